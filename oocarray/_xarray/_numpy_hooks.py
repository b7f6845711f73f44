"""NumPy functions xarray calls on chunked data that oocarray's compute layer does not take as
xarray calls them, made lazy and out of core here for :class:`~._lazy.OOCLazyArray`.

- ``sliding_window_view`` (``rolling(...)``, ``construct``): a lazy node whose block reads
  the input region plus the window's overlap (``_windows.py``, with its reductions).
- ``zeros_like``, ``ones_like``, ``full_like``, ``empty_like`` (``nansum``): lazy constants.
- ``einsum`` with ``...`` (``xr.dot``, ``weighted(...).mean()``): the ellipsis spelled out as
  named axes, which oocarray's einsum takes.
"""

from __future__ import annotations

import string
from collections.abc import Callable
from typing import Any

import numpy as np

from oocarray._compute import Expr
from oocarray._compute._nodes import Constant
from oocarray._xarray._windows import sliding_window_view

__all__ = ["HOOKS"]


def einsum(subscripts: str, *operands: Any, **kwargs: Any) -> Any:
    """``np.einsum`` with each ``...`` replaced by letters no subscript uses, aligned from the
    right as NumPy aligns broadcast axes."""
    text = subscripts.replace(" ", "")
    if "..." not in text:
        return np.einsum(text, *operands, **kwargs)
    if "->" not in text:
        raise NotImplementedError("einsum with '...' and no output subscripts on oocarray arrays")
    inputs, output = text.split("->")
    terms = inputs.split(",")
    extras = [
        len(np.shape(o)) - len(t.replace("...", "")) for t, o in zip(terms, operands, strict=True)
    ]
    widest = max(extras)
    letters = [c for c in string.ascii_letters if c not in text][:widest]
    if len(letters) < widest:
        raise NotImplementedError("einsum with too many axes behind '...' on oocarray arrays")
    spelled = [
        t.replace("...", "".join(letters[widest - k :])) for t, k in zip(terms, extras, strict=True)
    ]
    result = output.replace("...", "".join(letters))
    arrays, spelled = _sum_lone_axes(list(operands), spelled, result)
    return np.einsum(",".join(spelled) + "->" + result, *arrays, **kwargs)


def _sum_lone_axes(
    operands: list[Any], terms: list[str], output: str
) -> tuple[list[Any], list[str]]:
    """Axes only one operand has and the output drops, summed first (a streaming reduction):
    oocarray's einsum contracts only axes that operands share."""
    for i, term in enumerate(terms):
        others = "".join(t for j, t in enumerate(terms) if j != i) + output
        lone = [k for k, c in enumerate(term) if c not in others]
        if lone and len(lone) < len(term):
            operands[i] = np.sum(operands[i], axis=tuple(lone))
            terms[i] = "".join(c for k, c in enumerate(term) if k not in lone)
    return operands, terms


def _filled_like(fill: Any) -> Callable[..., Expr]:
    """``np.zeros_like``-style functions (xarray's ``nansum`` calls ``zeros_like``): a lazy
    constant of the array's shape, never allocated whole."""

    def like(
        prototype: Any, dtype: Any = None, order: str = "K", subok: bool = True, shape: Any = None
    ) -> Expr:
        target = np.dtype(dtype if dtype is not None else prototype.dtype)
        size = tuple(prototype.shape) if shape is None else tuple(np.atleast_1d(shape))
        return Expr(Constant(np.asarray(fill, dtype=target), size))

    return like


def full_like(prototype: Any, fill_value: Any, dtype: Any = None, **kwargs: Any) -> Expr:
    return _filled_like(fill_value)(prototype, dtype, **kwargs)


HOOKS: dict[Callable[..., Any], Callable[..., Any]] = {
    np.lib.stride_tricks.sliding_window_view: sliding_window_view,
    np.einsum: einsum,
    np.zeros_like: _filled_like(0),
    np.empty_like: _filled_like(0),
    np.ones_like: _filled_like(1),
    np.full_like: full_like,
}
