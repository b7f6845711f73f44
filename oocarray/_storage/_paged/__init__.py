"""Chunk-backed ndarrays (``x.as_ndarray()``): the paged arrays and their write-back
(``_arrays``), what each format decides before paging (``_plan``) and HDF5's part
(``_hdf5``)."""
