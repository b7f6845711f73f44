"""Selections whose size depends on the data: ``np.nonzero``, ``np.argwhere``,
``np.flatnonzero``, boolean masks (``expr[mask]``, ``np.extract``) and ``np.compress``.

One streaming pass (:class:`Selection`, a reduction of the engine) finds, per block, which
elements are kept: a block's partial is its mask packed to bits and, for a mask over values,
the kept values.  Partials merge in block order; the blocks of one band along the first axis
are then put in C order (sorted by flat position when the band is split along other axes)
and their flat positions and values appended to the result.  The result stays an ndarray
while it fits half the working memory, and moves into a temporary chunked array (appended
band by band) when it grows past that, so a selection never needs more memory than a band.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from oocarray._compute._build import elementwise
from oocarray._compute._engine import evaluate
from oocarray._compute._limits import working_bytes
from oocarray._compute._nodes import (
    Apply,
    BlockReads,
    Concat,
    ExpandDims,
    Node,
    Region,
    Source,
    as_node,
)
from oocarray._compute._reduce import Reduction
from oocarray._compute._reshape import ravel, reshape
from oocarray._compute._take import load_small, take
from oocarray._compute._temporaries import temporary
from oocarray._storage import StoredArray

__all__ = [
    "Selection",
    "argwhere",
    "compress",
    "extract",
    "flatnonzero",
    "masked",
    "nonzero",
]

# Items per chunk of a temporary result (8 MiB of int64 positions).
RESULT_CHUNK_ITEMS = 1 << 20


class Keep(Node):
    """Values and a mask evaluated together (one read of inputs they share), as a structured
    block with fields ``value`` and ``keep``."""

    def __init__(self, values: Node, mask: Node) -> None:
        self.values = values
        self.mask = mask
        self.shape = values.shape
        self.dtype = np.dtype([("value", values.dtype), ("keep", np.bool_)])

    def children(self) -> Sequence[Node]:
        return (self.values, self.mask)

    def evaluate(self, region: Region, reads: BlockReads) -> np.ndarray:
        shape = tuple(s.stop - s.start for s in region)
        out = np.empty(shape, self.dtype)
        out["value"] = self.values.evaluate(region, reads)
        out["keep"] = np.asarray(self.mask.evaluate(region, reads)).astype(bool)
        return out


class _Sink:
    """A growing 1-D result: an ndarray while it fits ``limit_bytes``, then a temporary
    chunked array, appended to a whole chunk at a time (an append that ends inside a chunk
    would have the next one read and rewrite it)."""

    def __init__(self, dtype: np.dtype[Any], limit_bytes: int) -> None:
        self.dtype = dtype
        self.limit_bytes = limit_bytes
        self.pieces: list[np.ndarray] = []
        self.held_bytes = 0
        self.stored: StoredArray | None = None
        self.chunk = max(1, min(RESULT_CHUNK_ITEMS, limit_bytes // max(1, dtype.itemsize)))

    def add(self, values: np.ndarray) -> None:
        if not len(values):
            return
        self.pieces.append(values)
        self.held_bytes += values.nbytes
        if self.stored is None and self.held_bytes <= self.limit_bytes:
            return
        if self.stored is None:
            self.stored = temporary((0,), self.dtype, chunks=(self.chunk,))
        held = sum(len(p) for p in self.pieces)
        if held >= self.chunk:
            self._append(held - held % self.chunk)

    def _append(self, count: int) -> None:
        """Moves the first ``count`` items held into the stored array."""
        assert self.stored is not None
        joined = np.concatenate(self.pieces) if len(self.pieces) > 1 else self.pieces[0]
        self.stored.append(joined[:count])
        rest = joined[count:]
        self.pieces = [rest] if len(rest) else []
        self.held_bytes = rest.nbytes

    def result(self) -> np.ndarray | StoredArray:
        if self.stored is not None:
            if self.pieces:
                self._append(sum(len(p) for p in self.pieces))
            return self.stored
        if not self.pieces:
            return np.empty(0, self.dtype)
        return self.pieces[0] if len(self.pieces) == 1 else np.concatenate(self.pieces)


class Selection(Reduction):
    """The flat positions of the kept elements of ``expr`` (nonzero ones, or where a
    :class:`Keep` node's mask is true), in C order, and for a :class:`Keep` node their values."""

    def __init__(self, expr: Node) -> None:
        super().__init__("selection", expr, tuple(range(expr.ndim)), False)
        self.with_values = isinstance(expr, Keep)
        limit = working_bytes() // 2
        # Positions and values share the half of the working memory a result may hold.
        value_bytes = expr.dtype["value"].itemsize if self.with_values else 0
        share = 8 / (8 + value_bytes)
        self.positions = _Sink(np.dtype(np.intp), int(limit * share))
        self.values: _Sink | None = None
        if self.with_values:
            self.values = _Sink(expr.dtype["value"], int(limit * (1 - share)))
        self.band: tuple[int, int] | None = None
        self.parts: list[tuple[Region, Any]] = []
        self.row_items = math.prod(expr.shape[1:])

    def partial(self, block: np.ndarray, region: Region) -> Any:
        keep = block["keep"] if self.with_values else block.astype(bool)
        values = block["value"][keep] if self.with_values else None
        return np.packbits(keep, axis=None), values

    def merge(self, partial: Any, region: Region) -> None:
        band = (region[0].start, region[0].stop)
        if self.band is not None and band != self.band:
            self._flush()
        self.band = band
        self.parts.append((region, partial))

    def _flush(self) -> None:
        """The kept elements of the band merged so far, in C order, appended to the result."""
        if self.band is None or not self.parts:
            return
        first = self.band[0]
        band_shape = (self.band[1] - first, *self.expr.shape[1:])
        positions, values = [], []
        for region, (packed, kept) in self.parts:
            shape = tuple(s.stop - s.start for s in region)
            # (unpackbits gives 0 and 1 bytes: viewed as bools, not converted)
            found = np.flatnonzero(np.unpackbits(packed, count=math.prod(shape)).view(np.bool_))
            if shape[1:] == band_shape[1:]:  # whole rows: flat in the block is flat in the band
                positions.append(found + (region[0].start - first) * self.row_items)
            else:
                coords = np.unravel_index(found, shape)
                local = tuple(
                    c + s.start - (first if a == 0 else 0)
                    for a, (c, s) in enumerate(zip(coords, region, strict=True))
                )
                positions.append(np.ravel_multi_index(local, band_shape).astype(np.intp))
            values.append(kept)
        flat = np.concatenate(positions) if len(positions) > 1 else positions[0]
        order = np.argsort(flat, kind="stable") if len(self.parts) > 1 else None
        if order is not None:
            flat = flat[order]
        self.positions.add(flat + first * self.row_items)
        if self.values is not None:
            joined = np.concatenate(values) if len(values) > 1 else values[0]
            self.values.add(joined[order] if order is not None else joined)
        self.parts = []

    def finish(self) -> Any:
        self._flush()
        return self.positions.result(), None if self.values is None else self.values.result()


def _shape(value: Any) -> tuple[int, ...]:
    return tuple(value.shape) if hasattr(value, "shape") else np.shape(value)


def _select(expr: Node, progress: bool = True) -> tuple[Any, Any]:
    selection = Selection(expr)
    evaluate([selection], [], progress, "select")
    positions, values = selection.finish()
    return positions, values


def _flat_positions(a: Any) -> Any:
    node = as_node(a)
    if node.ndim == 0:
        node = reshape(node, (1,))
    positions, _ = _select(node)
    return positions, node.shape


def _unravelled(positions: Any, shape: tuple[int, ...]) -> tuple[Any, ...]:
    """Each axis's coordinates of flat positions (lazy over a chunked array of them)."""
    if isinstance(positions, np.ndarray):
        return tuple(np.unravel_index(positions, shape))
    return tuple(
        Apply(
            functools.partial(_coordinate, shape=shape, axis=axis),
            [Source(positions)],
            tuple(positions.shape),
            np.dtype(np.intp),
            name="unravel_index",
        )
        for axis in range(len(shape))
    )


def _coordinate(flat: np.ndarray, shape: tuple[int, ...], axis: int) -> np.ndarray:
    return np.unravel_index(flat, shape)[axis]


def nonzero(a: Any) -> tuple[Any, ...]:
    """``np.nonzero``: the coordinates of the elements that are not zero, per axis.

    Examples
    --------
    >>> import numpy as np, oocarray as oc
    >>> x = oc.from_numpy(np.array([[0, 3], [4, 0]]), chunks=(1, 1))
    >>> np.nonzero(x)
    (array([0, 1]), array([1, 0]))
    >>> np.argwhere(x > 3), np.flatnonzero(x)
    (array([[1, 0]]), array([1, 2]))
    """
    node = as_node(a)
    if node.ndim == 0:
        np.nonzero(np.zeros(()))  # NumPy's error for 0-d arrays
    positions, shape = _flat_positions(node)
    return _unravelled(positions, shape)


def flatnonzero(a: Any) -> Any:
    """``np.flatnonzero``: the flat positions of the elements that are not zero."""
    return _flat_positions(a)[0]


def argwhere(a: Any) -> Any:
    """``np.argwhere``: one row of coordinates per element that is not zero."""
    node = as_node(a)
    positions, shape = _flat_positions(node)
    columns = _unravelled(positions, shape)
    if isinstance(positions, np.ndarray):
        stacked = np.stack(columns, axis=1) if columns else np.empty((len(positions), 0))
        return stacked[:, : node.ndim].astype(np.intp)
    return Concat([ExpandDims(as_node(c), 1) for c in columns], 1)


def masked(values: Any, mask: Any) -> Any:
    """``values[mask]`` for a boolean mask of the same shape (a chunked array, an expression
    or a NumPy array): the kept values in C order.

    Examples
    --------
    >>> import numpy as np, oocarray as oc
    >>> x = oc.from_numpy(np.arange(6.0).reshape(2, 3), chunks=(1, 2))
    >>> (x * 10)[x % 2 == 1]
    array([10., 30., 50.])
    """
    node, keep = as_node(values), as_node(mask, _shape(mask))
    if keep.dtype != np.bool_:
        raise TypeError("a mask must be a boolean array")
    if keep.shape != node.shape:
        raise IndexError(
            f"boolean index of shape {keep.shape} does not match the indexed shape {node.shape}"
        )
    if node.ndim == 0:
        node, keep = reshape(node, (1,)), reshape(keep, (1,))
    _, kept = _select(Keep(node, keep))
    return kept


def extract(condition: Any, arr: Any) -> Any:
    """``np.extract``: the elements of ``arr`` where ``condition`` is not zero (same shape)."""
    node = as_node(arr)
    if _shape(condition) != node.shape:
        raise TypeError(
            "np.extract on chunked arrays takes a condition of the array's shape; use "
            "np.take(np.ravel(arr), np.flatnonzero(condition)) for others"
        )
    if isinstance(condition, Node | StoredArray):
        return masked(node, elementwise(np.not_equal, condition, 0, name="condition"))
    return masked(node, np.asarray(condition) != 0)


def compress(condition: Any, a: Any, axis: Any = None, out: Any = None) -> Any:
    """``np.compress``: the slices along ``axis`` (``None``: the elements of the flattened
    array) where the 1-d ``condition`` is true."""
    if out is not None:
        raise TypeError("np.compress(..., out=) is not supported on chunked arrays")
    chosen = np.asarray(load_small(condition, "np.compress"))
    if chosen.ndim != 1:
        raise ValueError("condition must be a 1-d array")
    node = as_node(a)
    if axis is None:
        node, axis = ravel(node), 0
    return take(node, np.flatnonzero(chosen), axis=axis)
