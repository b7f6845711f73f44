"""The storage layer: stores (zarr, HDF5, .npy), chunk jobs, indexing and StoredArray.

Built on the memory layer.  The compute layer above defines the public ``ChunkedArray`` (a
StoredArray with operators and reductions) and passes it down as ``array_type`` to the
constructors here, which return a plain StoredArray by default."""

from oocarray._storage._chunked import StoredArray
from oocarray._storage._create import DEFAULT_CACHE_BYTES, create, open
from oocarray._storage._temporaries import from_dask, from_numpy, temp

__all__ = [
    "DEFAULT_CACHE_BYTES",
    "StoredArray",
    "create",
    "from_dask",
    "from_numpy",
    "open",
    "temp",
]
