"""The streaming reductions by NumPy function name: :func:`make_reduction` makes the one a
name asks for, and :data:`REDUCTIONS` lists the names it takes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from oocarray._compute._moments import Moments
from oocarray._compute._nodes import Node
from oocarray._compute._reduce import (
    Accumulate,
    ArgExtreme,
    Extreme,
    Reduction,
    normalize_axes,
)

__all__ = ["REDUCTIONS", "make_reduction"]


def make_reduction(
    name: str,
    expr: Node,
    axis: Any = None,
    keepdims: bool = False,
    dtype: Any = None,
    ddof: int = 0,
) -> Reduction:
    """The reduction ``name`` (a NumPy function name) of ``expr``."""
    if name in Accumulate.FUNCTIONS:
        return Accumulate(name, expr, normalize_axes(axis, expr.ndim), keepdims, dtype)
    if dtype is not None and name in Extreme.FUNCTIONS:
        raise TypeError(f"{name}() takes no dtype")
    if name in Extreme.FUNCTIONS:
        return Extreme(name, expr, normalize_axes(axis, expr.ndim), keepdims)
    if name in ("mean", "var", "std", "nanmean", "nanvar", "nanstd"):
        return Moments(name, expr, normalize_axes(axis, expr.ndim), keepdims, dtype, ddof)
    if name in ("argmin", "argmax", "nanargmin", "nanargmax"):
        return ArgExtreme(name, expr, axis, keepdims)
    raise TypeError(f"{name} is not a reduction oocarray streams")


REDUCTIONS: Sequence[str] = (
    *Accumulate.FUNCTIONS,
    *Extreme.FUNCTIONS,
    "mean",
    "var",
    "std",
    "nanmean",
    "nanvar",
    "nanstd",
    "argmin",
    "argmax",
    "nanargmin",
    "nanargmax",
)
