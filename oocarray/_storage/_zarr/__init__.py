"""zarr arrays on local disk: the store (``_store``), the chunk layouts read and written without
zarr-python (``_layout``), creating arrays (``_create``) and arrays inside groups
(``_groups``)."""
