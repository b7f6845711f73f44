"""The compute layer: lazy expressions and streaming reductions over chunked arrays."""

from oocarray._compute._expr import Expr
from oocarray._compute._ops import LazyResult, compute, histogram, install

__all__ = ["Expr", "LazyResult", "compute", "histogram"]

install()
