"""Functions applied block by block, as dask's ``blockwise``: a lazy node of oocarray's engine.

xarray hands the chunk manager functions written for dask blocks (``map_blocks``,
``blockwise``, ``apply_gufunc``, ``reduction``, ``scan``).  :class:`Blockwise` runs such a
function on the same blocks dask would give it, but lazily inside an oocarray expression tree:
a region of its output is made of the output blocks that touch it, each computed from the
regions of its inputs that block reads (an input's whole axis where the function contracts it).
Inputs are trees, so any region of them can be evaluated: no rechunk is ever written first.

The engine asks for regions on the grid of :meth:`Blockwise.chunks`; a region cutting a block
computes the whole block (kept for the rest of that region's evaluation, with its
``BlockReads``), so irregular output blocks stay correct, at some cost.
"""

from __future__ import annotations

import itertools
import math
import threading
import weakref
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from oocarray._compute._nodes import BlockReads, Node, Region

__all__ = ["Blockwise", "Operand", "bounds"]

Chunks = tuple[tuple[int, ...], ...]


def bounds(sizes: Sequence[int]) -> tuple[int, ...]:
    """Block boundaries from block sizes: ``(0, s0, s0 + s1, ...)``."""
    return tuple(int(v) for v in np.cumsum((0, *sizes)))


@dataclass(frozen=True)
class Operand:
    """One argument of a blockwise function.

    ``value`` is a tree (``Node``), a NumPy array (sliced like a tree) or, with ``index`` None,
    any object passed to every call as it is.  ``index`` labels its axes; ``chunks`` gives its
    block sizes per axis (a label the output keeps must have the output's number of blocks, or
    one block of size 1, broadcast to every output block)."""

    value: Any
    index: tuple[Hashable, ...] | None = None
    chunks: Chunks | None = None


class Blockwise(Node):
    """``function(*blocks, **kwargs)`` for every output block, lazily.

    Parameters
    ----------
    function
        Called with one block per array operand (in ``operands`` order, other operands as
        they are); returns the output block.
    operands
        The arguments.
    out_index
        The labels of the output's axes.
    out_chunks
        The output's block sizes per axis.
    dtype
        The dtype of the output.
    kwargs
        Keyword arguments of every call.
    name
        What error messages call the function.
    """

    def __init__(
        self,
        function: Callable[..., Any],
        operands: Sequence[Operand],
        out_index: tuple[Hashable, ...],
        out_chunks: Chunks,
        dtype: Any,
        kwargs: dict[str, Any] | None = None,
        name: str = "blockwise",
    ) -> None:
        self.function = function
        self.operands = tuple(operands)
        self.out_index = tuple(out_index)
        self.out_chunks = tuple(tuple(int(s) for s in sizes) for sizes in out_chunks)
        self.out_bounds = [bounds(sizes) for sizes in self.out_chunks]
        self.shape = tuple(b[-1] for b in self.out_bounds)
        self.dtype = np.dtype(dtype)
        self.kwargs = kwargs or {}
        self.name = name
        self._check()
        self._in_bounds = [
            None if o.chunks is None else [bounds(sizes) for sizes in o.chunks]
            for o in self.operands
        ]
        self._kept: weakref.WeakKeyDictionary[BlockReads, dict[tuple[int, ...], np.ndarray]]
        self._kept, self._lock = weakref.WeakKeyDictionary(), threading.Lock()

    def _check(self) -> None:
        blocks = dict(zip(self.out_index, (len(c) for c in self.out_chunks), strict=True))
        for operand in self.operands:
            if operand.index is None:
                continue
            if operand.chunks is None or len(operand.chunks) != len(operand.index):
                raise ValueError(f"{self.name}: each array operand needs chunks for its axes")
            for label, sizes in zip(operand.index, operand.chunks, strict=True):
                wanted = blocks.get(label)
                if wanted is not None and len(sizes) != wanted and tuple(sizes) != (1,):
                    raise ValueError(
                        f"{self.name}: an input has {len(sizes)} blocks along {label!r} where "
                        f"the output has {wanted}"
                    )

    def __getstate__(self) -> dict[str, Any]:
        # Kept blocks belong to evaluations in this process: they never travel.
        return {k: v for k, v in self.__dict__.items() if k not in ("_kept", "_lock")}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._kept, self._lock = weakref.WeakKeyDictionary(), threading.Lock()

    def children(self) -> Sequence[Node]:
        return [o.value for o in self.operands if isinstance(o.value, Node)]

    def chunks(self) -> tuple[int, ...] | None:
        return tuple(max(1, sizes[0]) for sizes in self.out_chunks)

    def evaluate(self, region: Region, reads: BlockReads) -> np.ndarray:
        ranges = []
        for span, edges in zip(region, self.out_bounds, strict=True):
            first = int(np.searchsorted(edges, span.start, side="right")) - 1
            last = int(np.searchsorted(edges, span.stop, side="left"))
            ranges.append(range(max(first, 0), max(last, first + 1)))
        indices = list(itertools.product(*ranges))
        if len(indices) == 1 and self._region_of(indices[0]) == region:
            return self._block(indices[0], reads)
        out = np.empty(tuple(s.stop - s.start for s in region), self.dtype)
        for index in indices:
            block = self._block(index, reads)
            whole = self._region_of(index)
            source, target = [], []
            for span, part in zip(region, whole, strict=True):
                lo, hi = max(span.start, part.start), min(span.stop, part.stop)
                source.append(slice(lo - part.start, hi - part.start))
                target.append(slice(lo - span.start, hi - span.start))
            out[tuple(target)] = block[tuple(source)]
        return out

    def _region_of(self, index: tuple[int, ...]) -> Region:
        return tuple(
            slice(edges[i], edges[i + 1]) for edges, i in zip(self.out_bounds, index, strict=True)
        )

    def _block(self, index: tuple[int, ...], reads: BlockReads) -> np.ndarray:
        with self._lock:
            kept = self._kept.get(reads)
        if kept is not None and index in kept:
            return kept[index]
        at = dict(zip(self.out_index, index, strict=True))
        args = [
            self._argument(o, edges, at, reads)
            for o, edges in zip(self.operands, self._in_bounds, strict=True)
        ]
        result = np.asarray(self.function(*args, **self.kwargs))
        expected = tuple(self.out_chunks[axis][i] for axis, i in enumerate(index))
        if result.shape != expected:
            if result.size != math.prod(expected):
                raise ValueError(
                    f"{self.name}: the function returned a block of shape {result.shape} where "
                    f"the output's block is {expected} (give the output's chunks, drop_axis, "
                    "new_axis or output_sizes to match what it returns)"
                )
            result = result.reshape(expected)
        result = result.astype(self.dtype, copy=False)
        with self._lock:  # kept while this evaluation's reads live (one engine block)
            self._kept.setdefault(reads, {})[index] = result
        return result

    @staticmethod
    def _argument(
        operand: Operand,
        edges: list[tuple[int, ...]] | None,
        at: dict[Hashable, int],
        reads: BlockReads,
    ) -> Any:
        if operand.index is None or edges is None:
            return operand.value
        key = []
        for label, axis_edges in zip(operand.index, edges, strict=True):
            i = at.get(label)
            if i is None or len(axis_edges) == 2:  # contracted, or one block for all
                key.append(slice(0, axis_edges[-1]))
            else:
                key.append(slice(axis_edges[i], axis_edges[i + 1]))
        region = tuple(key)
        if isinstance(operand.value, Node):
            shape = tuple(s.stop - s.start for s in region)
            value = operand.value.evaluate(region, reads)
            return value if np.shape(value) == shape else np.broadcast_to(value, shape)
        return np.asarray(operand.value)[region]
