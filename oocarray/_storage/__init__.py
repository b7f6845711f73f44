"""The storage layer: stores (zarr, HDF5, .npy), chunk jobs, indexing and ChunkedArray.

Built on the memory layer; the compute layer above adds expressions to ChunkedArray."""

from oocarray._storage._chunked import ChunkedArray
from oocarray._storage._create import create, open
from oocarray._storage._temporaries import from_dask, from_numpy, temp

__all__ = ["ChunkedArray", "create", "from_dask", "from_numpy", "open", "temp"]
