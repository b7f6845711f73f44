"""Lazy gathers along axes: flip, roll, tile, repeat and pad, each an index map per axis
(``_take`` builds np.take on them too).

Every one of these functions says, per axis, which input position each output position reads
(:class:`AxisMap`; ``-1`` and ``-2``: a pad's constant before and after the data).  A
:class:`Gather` node evaluates a block by mapping its range on each axis, grouping the input
positions it needs into windows (runs of positions, joined while a window stays within twice
the positions it serves or one input chunk), and reading one rectangle of the input per
combination of windows: a rolled block reads the two pieces either side of the seam, a tiled
or padded block the small region it repeats, and nothing else.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.lib.array_utils import normalize_axis_index, normalize_axis_tuple

from oocarray._compute._nodes import BlockReads, ExpandDims, Node, Region, as_node
from oocarray._compute._reshape import probe, ravel, reshape

__all__ = ["AxisMap", "Gather", "flip", "pad", "repeat", "roll", "tile", "windows"]

FILL_BEFORE, FILL_AFTER = -1, -2


@dataclass(frozen=True)
class AxisMap:
    """An output axis of ``length`` that reads input position ``positions(start, stop)[i]``
    at output position ``start + i`` (int64; a pad's fills are negative)."""

    length: int
    positions: Callable[[int, int], np.ndarray]


def _shape_of(region: Region) -> tuple[int, ...]:
    return tuple(s.stop - s.start for s in region)


def _as_slice(index: np.ndarray) -> slice | np.ndarray:
    """A run of consecutive positions, increasing or decreasing, as a slice (a view, where
    indexing with the array would copy)."""
    if not len(index):
        return index
    first, last = int(index[0]), int(index[-1])
    step = 1 if last >= first else -1
    if abs(last - first) != len(index) - 1:
        return index
    if len(index) > 1 and not bool((np.diff(index) == step).all()):
        return index
    if step == 1:
        return slice(first, last + 1)
    return slice(first, last - 1 if last > 0 else None, -1)


def _is_everything(target: Any) -> bool:
    return isinstance(target, slice) and target == slice(None)


def windows(positions: np.ndarray, chunk: int) -> list[tuple[slice, Any, Any]]:
    """The input windows one axis of a block reads: ``(input range, output positions, their
    positions in the window)``, for the valid (non-negative) ``positions``."""
    run = _as_slice(positions)
    if isinstance(run, slice) and len(positions) and int(positions.min()) >= 0:
        # One run (a flip, a roll away from its seam, a crop): one window, read as a view.
        low, high = int(positions.min()), int(positions.max())
        local = _as_slice(positions - low)
        return [(slice(low, high + 1), slice(None), local)]
    valid = positions >= 0
    wanted = np.unique(positions[valid])
    if not len(wanted):
        return []
    breaks = (np.flatnonzero(np.diff(wanted) > 1) + 1).tolist()
    groups: list[list[int]] = []  # [low, high, distinct positions]
    for begin, end in zip([0, *breaks], [*breaks, len(wanted)], strict=True):
        low, high, count = int(wanted[begin]), int(wanted[end - 1]), end - begin
        if groups and high - groups[-1][0] + 1 <= max(2 * (groups[-1][2] + count), chunk):
            groups[-1][1], groups[-1][2] = high, groups[-1][2] + count
        else:
            groups.append([low, high, count])
    every = bool(valid.all())
    found: list[tuple[slice, Any, Any]] = []
    for low, high, _ in groups:
        if every and len(groups) == 1:
            out: Any = slice(None)
            local = positions - low
        else:
            chosen = np.flatnonzero(valid & (positions >= low) & (positions <= high))
            out, local = _as_slice(chosen), positions[chosen] - low
        found.append((slice(low, high + 1), out, _as_slice(local)))
    return found


class Gather(Node):
    """``part`` read through an :class:`AxisMap` per axis (None: the axis as it is);
    ``fills[axis]``: the values of positions ``-1`` and ``-2`` on it."""

    def __init__(
        self,
        part: Node,
        maps: Sequence[AxisMap | None],
        fills: Sequence[tuple[Any, Any] | None] | None = None,
    ) -> None:
        self.part = part
        self.maps = tuple(maps)
        self.fills = tuple(fills) if fills is not None else (None,) * len(self.maps)
        self.shape = tuple(
            n if m is None else m.length for n, m in zip(part.shape, self.maps, strict=True)
        )
        self.dtype = part.dtype
        self._part_chunks = part.chunks()

    def children(self) -> Sequence[Node]:
        return (self.part,)

    def chunks(self) -> tuple[int, ...] | None:
        return self._part_chunks

    def evaluate(self, region: Region, reads: BlockReads) -> np.ndarray:
        shape = _shape_of(region)
        if 0 in shape:
            return np.empty(shape, self.dtype)
        chunks = self._part_chunks or (1,) * self.ndim
        per_axis: list[list[tuple[slice, Any, Any]]] = []
        fills: list[tuple[tuple[Any, ...], Any]] = []  # (where, value), axis by axis
        for axis, (m, s) in enumerate(zip(self.maps, region, strict=True)):
            if m is None:
                per_axis.append([(s, slice(None), slice(None))])
                continue
            positions = m.positions(s.start, s.stop)
            fill = self.fills[axis]
            if fill is not None and int(positions.min()) < 0:
                where = (slice(None),) * axis
                fills.append(((*where, positions == FILL_BEFORE), fill[0]))
                fills.append(((*where, positions == FILL_AFTER), fill[1]))
            per_axis.append(windows(positions, chunks[axis]))
        whole = all(len(w) == 1 and _is_everything(w[0][1]) for w in per_axis)
        if whole and not fills:  # one window gives the whole block (a view, for runs)
            return self._read([w[0] for w in per_axis], reads)
        out = np.empty(shape, self.dtype)
        for where, value in fills:  # in axis order, as np.pad: later axes win the corners
            out[where] = value
        for combination in itertools.product(*per_axis):
            block = self._read(combination, reads)
            targets = [w[1] for w in combination]
            if all(isinstance(t, slice) for t in targets):
                out[tuple(targets)] = block
            else:
                ranges = [
                    np.arange(n)[t] if isinstance(t, slice) else t
                    for t, n in zip(targets, shape, strict=True)
                ]
                out[np.ix_(*ranges)] = block
        return out

    def _read(self, combination: Sequence[tuple[slice, Any, Any]], reads: BlockReads) -> np.ndarray:
        """The input of one window per axis, at the window's local positions."""
        inner = tuple(w[0] for w in combination)
        block = np.broadcast_to(self.part.evaluate(inner, reads), _shape_of(inner))
        for axis, (_, _, local) in enumerate(combination):
            if isinstance(local, slice):
                block = block[(slice(None),) * axis + (local,)]
            else:
                block = np.take(block, local, axis=axis)
        return block


def _flipped(n: int, start: int, stop: int) -> np.ndarray:
    return np.arange(n - 1 - start, n - 1 - stop, -1, dtype=np.int64)


def _rolled(n: int, shift: int, start: int, stop: int) -> np.ndarray:
    return (np.arange(start, stop, dtype=np.int64) - shift) % n


def _tiled(n: int, start: int, stop: int) -> np.ndarray:
    return np.arange(start, stop, dtype=np.int64) % n


def _repeated(times: int, start: int, stop: int) -> np.ndarray:
    return np.arange(start, stop, dtype=np.int64) // times


def _repeated_counts(ends: np.ndarray, start: int, stop: int) -> np.ndarray:
    return np.searchsorted(ends, np.arange(start, stop, dtype=np.int64), side="right")


def _padded(mode: str, n: int, before: int, start: int, stop: int) -> np.ndarray:
    """np.pad's source position of each output position (checked against np.pad of a range)."""
    j = np.arange(start - before, stop - before, dtype=np.int64)
    if mode in ("constant", "empty"):
        return np.where(j < 0, FILL_BEFORE, np.where(j >= n, FILL_AFTER, j))
    if mode == "edge":
        return np.clip(j, 0, n - 1)
    if mode == "wrap":
        return j % n
    if mode == "reflect":
        if n == 1:
            return np.zeros_like(j)
        period = 2 * (n - 1)
        j %= period
        return np.where(j >= n, period - j, j)
    period = 2 * n  # symmetric
    j %= period
    return np.where(j >= n, period - 1 - j, j)


def _gather(node: Node, maps: dict[int, AxisMap], fills: Any = None) -> Node:
    if not maps:
        return node
    return Gather(node, [maps.get(a) for a in range(node.ndim)], fills)


def flip(m: Any, axis: Any = None) -> Node:
    """``np.flip``: the order of elements along ``axis`` (all axes by default) reversed.

    Examples
    --------
    >>> import numpy as np, oocarray as oc
    >>> x = oc.from_numpy(np.arange(6).reshape(2, 3), chunks=(1, 2))
    >>> np.flip(x, 1)[...]
    array([[2, 1, 0],
           [5, 4, 3]])
    >>> np.flip(x, 0).sum(axis=1)
    array([12,  3])
    """
    node = as_node(m)
    np.flip(probe(node), axis)  # NumPy's errors
    axes = range(node.ndim) if axis is None else normalize_axis_tuple(axis, node.ndim)
    n = node.shape
    return _gather(
        node, {a: AxisMap(n[a], functools.partial(_flipped, n[a])) for a in axes if n[a] > 1}
    )


def roll(a: Any, shift: Any, axis: Any = None) -> Node:
    """``np.roll``: elements shifted along axes, those past the end coming back at the start
    (``axis=None``: along the flattened array, through a reshape).

    Examples
    --------
    >>> import numpy as np, oocarray as oc
    >>> x = oc.from_numpy(np.arange(5), chunks=2)
    >>> np.roll(x, 2)[...], np.roll(x, -1)[...]
    (array([3, 4, 0, 1, 2]), array([1, 2, 3, 4, 0]))
    """
    node = as_node(a)
    if axis is None:
        if node.ndim == 1:
            return roll(node, shift, 0)
        return reshape(roll(ravel(node), shift, 0), node.shape)
    shifts = dict.fromkeys(range(node.ndim), 0)
    for s, ax in np.broadcast(shift, axis):
        shifts[normalize_axis_index(int(ax), node.ndim)] += int(s)
    maps = {}
    for ax, s in shifts.items():
        n = node.shape[ax]
        if n and s % n:
            maps[ax] = AxisMap(n, functools.partial(_rolled, n, s % n))
    return _gather(node, maps)


def tile(A: Any, reps: Any) -> Node:
    """``np.tile``: the array repeated ``reps`` times along each axis."""
    node = as_node(A)
    counts = tuple(int(r) for r in np.atleast_1d(np.asarray(reps)).ravel())
    if any(r < 0 for r in counts):
        raise ValueError("negative dimensions are not allowed")
    for _ in range(len(counts) - node.ndim):
        node = ExpandDims(node, 0)
    counts = (1,) * (node.ndim - len(counts)) + counts
    maps = {}
    for ax, r in enumerate(counts):
        n = node.shape[ax]
        if r != 1:
            maps[ax] = AxisMap(n * r, functools.partial(_tiled, max(n, 1)))
    return _gather(node, maps)


def repeat(a: Any, repeats: Any, axis: Any = None) -> Node:
    """``np.repeat``: each element repeated (a count, or one count per element along
    ``axis``; ``axis=None``: of the flattened array)."""
    if isinstance(repeats, Node) or hasattr(repeats, "chunks"):
        raise TypeError("np.repeat on chunked arrays takes repeats as an int or a NumPy array")
    node = as_node(a)
    if axis is None:
        node, axis = ravel(node), 0
    axis = normalize_axis_index(axis, node.ndim)
    counts = np.asarray(repeats).astype(np.intp, casting="safe")
    n = node.shape[axis]
    if n == 0 and counts.size == 1:  # NumPy broadcasts the count to no elements: no check
        return node
    if (counts < 0).any():
        raise ValueError("repeats may not contain negative values.")
    if counts.size == 1:
        times = int(counts.reshape(()))
        if times == 1:
            return node
        positions = functools.partial(_repeated, max(times, 1))
        return _gather(node, {axis: AxisMap(n * times, positions)})
    if counts.ndim != 1 or len(counts) != n:
        raise ValueError(
            f"operands could not be broadcast together with shape ({n},) {counts.shape}"
        )
    ends = np.cumsum(counts)
    length = int(ends[-1]) if len(ends) else 0
    return _gather(node, {axis: AxisMap(length, functools.partial(_repeated_counts, ends))})


_PAD_MODES = ("constant", "edge", "reflect", "symmetric", "wrap", "empty")
_NUMPY_PAD_MODES = (*_PAD_MODES, "linear_ramp", "maximum", "mean", "median", "minimum")


def _pairs(value: Any, ndim: int, what: str) -> np.ndarray:
    array = np.asarray(value)
    try:
        return np.broadcast_to(array, (ndim, 2))
    except ValueError:
        raise ValueError(
            f"{what} of shape {array.shape} does not broadcast to ({ndim}, 2) for {ndim} axes"
        ) from None


def pad(array: Any, pad_width: Any, mode: Any = "constant", **kwargs: Any) -> Node:
    """``np.pad`` in the modes constant, edge, reflect, symmetric, wrap and empty (as zeros).

    Examples
    --------
    >>> import numpy as np, oocarray as oc
    >>> x = oc.from_numpy(np.array([1, 2, 3]), chunks=2)
    >>> np.pad(x, (2, 1), mode="reflect")[...], np.pad(x, 1, constant_values=9)[...]
    (array([3, 2, 1, 2, 3, 2]), array([9, 1, 2, 3, 9]))
    """
    node = as_node(array)
    if callable(mode) or mode not in _NUMPY_PAD_MODES:
        if callable(mode):
            raise TypeError("np.pad with a function as mode is not supported on chunked arrays")
        raise ValueError(f"mode '{mode}' is not supported")
    if mode not in _PAD_MODES:
        raise TypeError(
            f"np.pad(mode={mode!r}) is not supported on chunked arrays; modes "
            f"{', '.join(_PAD_MODES)} are (or pad a part loaded with x[...])"
        )
    allowed = {"constant": {"constant_values"}, "empty": set()}.get(mode, {"reflect_type"})
    if set(kwargs) - allowed:
        raise ValueError(
            f"unsupported keyword arguments for mode '{mode}': {set(kwargs) - allowed}"
        )
    if kwargs.get("reflect_type", "even") != "even":
        raise TypeError("np.pad(reflect_type='odd') is not supported on chunked arrays")
    widths = np.asarray(pad_width)
    if widths.dtype.kind not in "iu":
        raise TypeError("`pad_width` must be of integral type.")
    widths = _pairs(widths, node.ndim, "pad_width").astype(np.int64)
    if (widths < 0).any():
        raise ValueError("index can't contain negative values")
    fills = None
    if mode in ("constant", "empty"):
        values = _pairs(kwargs.get("constant_values", 0), node.ndim, "constant_values")
        np.empty(values.shape, node.dtype)[...] = values  # NumPy's errors (a NaN into ints)
        fills = [(values[a, 0], values[a, 1]) for a in range(node.ndim)]
    maps = {}
    for ax in range(node.ndim):
        before, after = (int(w) for w in widths[ax])
        n = node.shape[ax]
        if not before and not after:
            continue
        if n == 0 and mode not in ("constant", "empty"):
            raise ValueError(
                f"can't extend empty axis {ax} using modes other than 'constant' or 'empty'"
            )
        positions = functools.partial(_padded, mode, n, before)
        maps[ax] = AxisMap(n + before + after, positions)
    return _gather(node, maps, fills)
