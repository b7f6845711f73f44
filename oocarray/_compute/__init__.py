"""The compute layer: the public array types (ChunkedArray, Expr) with their operators and
streaming reductions, lazy expression trees, and the chunk-loop engine."""

from oocarray._compute._array import ChunkedArray, Expr, LazyArray, compute
from oocarray._compute._constructors import create, from_dask, from_numpy, open, temp
from oocarray._compute._ops import LazyResult, histogram
from oocarray._compute._rechunk import Plan as RechunkPlan
from oocarray._compute._rechunk import rechunk
from oocarray._compute._top_k import top_k

__all__ = [
    "ChunkedArray",
    "Expr",
    "LazyArray",
    "LazyResult",
    "RechunkPlan",
    "compute",
    "create",
    "from_dask",
    "from_numpy",
    "histogram",
    "open",
    "rechunk",
    "temp",
    "top_k",
]
