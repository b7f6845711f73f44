"""Outer indexing, lazily: per axis a slice, an integer or a 1-d integer array, as xarray's
``OuterIndexer`` gives them.

The selection is one :class:`~._gather.Gather` over the input (an axis map only where the
positions are not the whole axis), with the integer-indexed axes squeezed away: a block of it
reads only the input windows its positions fall in, so nothing is copied ahead of use and a
reduction of the selection streams it like any other expression.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import numpy as np

from oocarray._compute._array import Expr
from oocarray._compute._gather import AxisMap, Gather
from oocarray._compute._nodes import as_node
from oocarray._compute._reshape import squeeze

__all__ = ["outer_take"]


def _listed(positions: np.ndarray, start: int, stop: int) -> np.ndarray:
    return positions[start:stop]


def outer_take(value: Any, picks: Sequence[tuple[np.ndarray, bool]]) -> Expr:
    """``value`` at the positions ``picks`` lists per axis: ``(positions, dropped)``, the
    non-negative input positions the axis keeps in order (repeats allowed) and whether the
    axis is dropped (an integer key: one position).

    Examples
    --------
    >>> import numpy as np, oocarray as oc
    >>> from oocarray._compute._outer import outer_take
    >>> x = oc.from_numpy(np.arange(12).reshape(3, 4), chunks=(2, 2))
    >>> picked = outer_take(x, [(np.array([2, 0, 2]), False), (np.array([1]), True)])
    >>> picked[...]
    array([9, 1, 9])
    """
    node = as_node(value)
    if len(picks) != node.ndim:
        raise ValueError(f"outer_take needs one pick per axis ({node.ndim}), got {len(picks)}")
    maps: list[AxisMap | None] = []
    for (positions, _), n in zip(picks, node.shape, strict=True):
        flat = np.asarray(positions, dtype=np.int64).ravel()
        if len(flat) and (int(flat.min()) < 0 or int(flat.max()) >= n):
            raise IndexError(f"positions out of range for an axis of length {n}")
        if len(flat) == n and bool((flat == np.arange(n)).all()):
            maps.append(None)
        else:
            maps.append(AxisMap(len(flat), functools.partial(_listed, flat)))
    if any(m is not None for m in maps):
        node = Gather(node, maps)
    dropped = [axis for axis, (_, drop) in enumerate(picks) if drop]
    return Expr(squeeze(node, tuple(dropped)) if dropped else node)
