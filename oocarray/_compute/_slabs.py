"""Reductions of elementwise expressions in cache-sized slabs: one pass over the input.

Evaluated a block at a time, ``((x*2+1)-x).sum()`` reads a block of ``x`` into memory and
writes and reads back a block-sized temporary per operation: several passes over memory for
each block, the same traffic as the step hand-written with ``out=`` buffers.  Evaluated here,
a block is cut into slabs of rows whose inputs and temporaries together stay in the caches
(:data:`SLAB_BYTES`); each slab's input rows are read straight into a buffer (uncompressed
chunks and memory maps read only the rows asked for; other arrays are read a block at a time and
cut), the expression runs as NumPy ufuncs into buffers reused every slab, and the slabs'
partials are combined into the block's.  The input is read from memory once and no temporary
goes to memory.

numexpr fuses an expression in the same way but not the reduction after it, its reductions are
single-threaded, and NumPy's vectorised float32 loops beat its own (``python -m benchmarks
--only FUSE``); so the slab loop is ours, and each step of it is one NumPy call.

A plan covers the reductions of a pass that combine their partials with one ufunc (sum, prod,
any, all, count_nonzero, min, max and their nan variants) over trees of NumPy ufuncs whose
leaves are chunked arrays of the pass's shape and NumPy constants; anything else is evaluated a
block at a time, as before.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from oocarray._compute._nodes import Apply, BlockReads, Constant, Node, Source
from oocarray._compute._reduce import Accumulate, Extreme, Reduction, _column_sums
from oocarray._storage import StoredArray

__all__ = ["ENABLED", "SLAB_BYTES", "SlabPlan", "plan_slabs"]

Region = tuple[slice, ...]

# The bytes a slab's buffers (input rows and temporaries) take together.  Measured on W1c's
# step, one thread, buffers reused: 10.0 ms a step at 512 KiB, 9.1 at 1 MiB, 8.3 at 2 MiB,
# 7.7 at 4 MiB, 10.0 at 8 MiB.  Below, the Python cost of each NumPy call and read (8-20 us)
# weighs; above, the slab no longer stays in the caches (1 MiB of L2 a core, 32 MiB of L3).
SLAB_BYTES = 4 << 20
# Benchmarks turn slabs off to measure what they buy, or what numexpr does without them.
ENABLED = True
# Buffers are cut from one allocation, each start aligned to a cache line.
_ALIGN = 64


@dataclass(slots=True)
class _Step:
    """``ufunc(*registers[ins], out=registers[out], **kwargs)``."""

    ufunc: np.ufunc
    ins: tuple[int, ...]
    out: int
    kwargs: dict[str, Any]


@dataclass(slots=True)
class SlabPlan:
    """How the streamed reductions of a pass evaluate one block, slab by slab.

    Registers hold a slab's values: a temporary buffer per live intermediate result (reused
    once its last reader has run), a buffer per chunked array read row by row, a view into the
    block per chunked array read whole, and each constant.
    """

    shape: tuple[int, ...]  # the pass's
    reductions: dict[int, Reduction]  # index in the pass -> reduction
    roots: dict[int, int]  # index in the pass -> the register its expression ends in
    steps: list[_Step] = field(default_factory=list)
    temporaries: dict[int, np.dtype[Any]] = field(default_factory=dict)
    row_reads: dict[int, StoredArray] = field(default_factory=dict)
    block_reads: dict[int, StoredArray] = field(default_factory=dict)
    constants: dict[int, Constant] = field(default_factory=dict)
    registers: int = 0

    def slab_rows(self, region: Region) -> int:
        """Rows of ``region`` per slab: the buffers of a slab fill :data:`SLAB_BYTES`."""
        row_items: int = math.prod(s.stop - s.start for s in region[1:])
        buffers = [*self.temporaries.values(), *(a.dtype for a in self.row_reads.values())]
        row_bytes = max(1, row_items * sum(d.itemsize for d in buffers))
        rows: int = region[0].stop - region[0].start
        return max(1, min(rows, SLAB_BYTES // row_bytes))

    def buffers(self, region: Region) -> dict[int, np.ndarray]:
        """The buffers of a slab of ``region``: one per temporary and per array read by rows.
        A worker makes them once, outside its cyclic workspace, and reuses them every block
        of the same width (see :meth:`partials`)."""
        rows = self.slab_rows(region)
        shape = (rows, *(s.stop - s.start for s in region[1:]))
        items = math.prod(shape)
        dtypes = {**self.temporaries, **{r: a.dtype for r, a in self.row_reads.items()}}
        sizes = {r: -(-items * d.itemsize // _ALIGN) * _ALIGN for r, d in dtypes.items()}
        # One allocation: at SLAB_BYTES (4 MiB) the manager maps it on huge pages, so a
        # worker's buffers cost two page faults a pass rather than a thousand (a quarter of
        # W1c's time went to them).
        backing = np.empty(sum(sizes.values()), np.uint8)
        made = {}
        offset = 0
        for r, dtype in dtypes.items():
            piece = backing[offset : offset + items * dtype.itemsize]
            made[r] = piece.view(dtype).reshape(shape)
            offset += sizes[r]
        return made

    def fits(self, buffers: dict[int, np.ndarray], region: Region) -> bool:
        """Whether ``buffers`` (from :meth:`buffers`) serve the slabs of ``region``."""
        rows = self.slab_rows(region)
        rest_shape = tuple(s.stop - s.start for s in region[1:])
        return all(len(b) >= rows and b.shape[1:] == rest_shape for b in buffers.values())

    def partials(
        self, region: Region, reads: BlockReads, buffers: dict[int, np.ndarray]
    ) -> dict[int, Any]:
        """The partial of each streamed reduction over the block ``region``, computed in
        ``buffers`` (which :meth:`fits` the region)."""
        start, stop = region[0].start, region[0].stop
        rest = region[1:]
        rows = self.slab_rows(region)
        values: list[Any] = [None] * self.registers
        # Rows are read on their own only where the block spans every other axis (a pass
        # that also writes a store cuts its blocks along the store's grid, which may not).
        spans = all(s.start == 0 and s.stop == n for s, n in zip(rest, self.shape[1:], strict=True))
        row_reads = self.row_reads if spans else {}
        whole = {
            r: reads.read(array, region)
            for r, array in {**self.block_reads, **({} if spans else self.row_reads)}.items()
        }
        for r, constant in self.constants.items():
            values[r] = _constant_rows(constant, region)
        per_slab_constants = {
            r: c for r, c in self.constants.items() if _varies_along_rows(c, len(region))
        }
        pieces: dict[int, list[Any]] = {i: [] for i in self.reductions}
        bound = 0
        for lo in range(start, stop, rows):
            hi = min(lo + rows, stop)
            if hi - lo != bound:  # the first slab, and a shorter last one: views of that length
                bound = hi - lo
                for r, buffer in buffers.items():
                    values[r] = buffer[:bound]
            for r, block in whole.items():
                values[r] = block[lo - start : hi - start]
            slab = (slice(lo, hi), *rest)
            for r, constant in per_slab_constants.items():
                values[r] = _constant_rows(constant, slab)
            for r, array in row_reads.items():
                array._read_rows_into(lo, values[r])
            for step in self.steps:
                step.ufunc(*[values[i] for i in step.ins], out=values[step.out], **step.kwargs)
            for i, reduction in self.reductions.items():
                pieces[i].append(_partial(reduction, values[self.roots[i]], slab))
        return {i: _joined(self.reductions[i], parts) for i, parts in pieces.items()}


def _partial(reduction: Reduction, values: np.ndarray, slab: Region) -> Any:
    """``reduction.partial``; a float sum over every axis as the column sums of the values
    seen as one column: NumPy's pairwise sum runs one strand at a time, the column sums 2,048
    interleaved strands at full vector speed (2.1x faster here) and about as accurately (each
    strand adds a few hundred items in a row; NumPy's pairwise sum adds 128 at its leaves)."""
    if (
        isinstance(reduction, Accumulate)
        and reduction.function is np.sum
        and not reduction.kwargs
        and len(reduction.axes) == values.ndim
        and values.dtype == reduction.result_dtype
        and values.dtype in _STRAND_DTYPES
        and values.flags.c_contiguous
    ):
        return _column_sums(values.reshape(-1, 1)).reshape((1,) * values.ndim)
    return reduction.partial(values, slab)


_STRAND_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))


def _joined(reduction: Reduction, parts: list[Any]) -> Any:
    """The slabs' partials of a reduction as the block's: combined where the reduction runs
    along the rows (in one call: the partials of a sum are summed pairwise), else stacked."""
    stacked = np.concatenate(parts, axis=0)  # a copy: no partial is a view of a buffer
    if 0 not in reduction.axes or len(parts) == 1:
        return stacked
    assert isinstance(reduction, Accumulate | Extreme)
    # As Accumulate.merge: partials already infinite or NaN combine to NaN without a warning.
    with np.errstate(invalid="ignore"):
        return reduction.combine.reduce(stacked, axis=0, keepdims=True)


def _varies_along_rows(constant: Constant, ndim: int) -> bool:
    """Whether ``constant`` differs from one slab of rows to the next."""
    value = constant.value
    return isinstance(value, np.ndarray) and value.ndim == ndim and ndim > 0 and value.shape[0] != 1


def _constant_rows(constant: Constant, region: Region) -> Any:
    return constant.evaluate(region, _NO_READS)


_NO_READS = BlockReads()


def _streamable(reduction: Reduction, shape: tuple[int, ...]) -> bool:
    """Whether ``reduction`` combines slab partials with one ufunc over a tree of ufuncs whose
    leaves are chunked arrays of ``shape`` and constants."""
    if not isinstance(reduction, Accumulate | Extreme) or not shape:
        return False
    stack: list[Node] = [reduction.expr]
    while stack:
        node = stack.pop()
        if isinstance(node, Source):
            if node.shape != shape:
                return False
        elif isinstance(node, Apply):
            if (
                not isinstance(node.function, np.ufunc)
                or node.function.nout != 1
                or node.shape != shape
                or "out" in node.kwargs
            ):
                return False
            stack.extend(node.args)
        elif not isinstance(node, Constant):
            return False
    return not isinstance(reduction.expr, Constant)


def _reads_rows(array: StoredArray) -> bool:
    """Whether ``array`` reads any run of rows on its own, at the cost of those rows: whole
    along every other axis in its chunks, and memory-mapped or uncompressed."""
    store = array._store
    return bool(array._rows_fast) and (
        store.memmap is not None or bool(store.supports_partial_reads)
    )


def _worth_slabs(reduction: Reduction) -> bool:
    """Slabs save a block's temporaries (an operation to compute) or its read (a chunked array
    that reads rows on its own); a compressed array reduced as it is saves neither."""
    expr = reduction.expr
    return isinstance(expr, Apply) or (isinstance(expr, Source) and _reads_rows(expr.array))


class _Compiler:
    """Builds a :class:`SlabPlan`: one register per distinct node, temporaries reused."""

    def __init__(self, exprs: Sequence[Node], shape: tuple[int, ...]) -> None:
        self.plan = SlabPlan(shape, {}, {})
        self.register_of: dict[int, int] = {}
        self.array_register: dict[int, int] = {}
        self.readers: dict[int, int] = {}  # node id -> steps still to read it
        self.free: list[int] = []  # temporaries whose last reader has run
        self.roots = {id(e) for e in exprs}
        for expr in exprs:
            self._count(expr)

    def _count(self, node: Node) -> None:
        seen = id(node) in self.readers
        self.readers[id(node)] = self.readers.get(id(node), 0)
        if seen:
            return
        for child in node.children():
            self._count(child)
            self.readers[id(child)] += 1

    def _new(self) -> int:
        self.plan.registers += 1
        return self.plan.registers - 1

    def register(self, node: Node) -> int:
        found = self.register_of.get(id(node))
        if found is not None:
            return found
        plan = self.plan
        if isinstance(node, Source):
            # One register per chunked array, however many leaves name it.
            found = self.array_register.get(id(node.array))
            r = self._new() if found is None else found
            self.array_register[id(node.array)] = r
            if _reads_rows(node.array):
                plan.row_reads[r] = node.array
            else:
                plan.block_reads[r] = node.array
        elif isinstance(node, Constant):
            r = self._new()
            plan.constants[r] = node
        else:
            assert isinstance(node, Apply)
            ins = tuple(self.register(arg) for arg in node.args)
            for arg in node.args:
                self._read(arg)
            r = self._temporary(node.dtype)
            plan.steps.append(_Step(node.function, ins, r, dict(node.kwargs)))  # type: ignore[arg-type]
        self.register_of[id(node)] = r
        return r

    def _read(self, node: Node) -> None:
        """One reader of ``node`` has been compiled: its temporary is free after the last."""
        self.readers[id(node)] -= 1
        r = self.register_of[id(node)]
        if (
            self.readers[id(node)] == 0
            and id(node) not in self.roots
            and r in self.plan.temporaries
        ):
            self.free.append(r)

    def _temporary(self, dtype: np.dtype[Any]) -> int:
        """A temporary of ``dtype``: one freed by this step's inputs (elementwise ufuncs write
        in place safely) or a new one."""
        for k, r in enumerate(self.free):
            if self.plan.temporaries[r] == dtype:
                del self.free[k]
                return r
        r = self._new()
        self.plan.temporaries[r] = dtype
        return r


def plan_slabs(reductions: Sequence[Reduction], shape: tuple[int, ...]) -> SlabPlan | None:
    """The slab plan of the reductions of a pass over ``shape`` that can stream (and gain by
    it); None when none can, or slabs are off (:data:`ENABLED`)."""
    if not ENABLED:
        return None
    chosen = {i: r for i, r in enumerate(reductions) if _streamable(r, shape) and _worth_slabs(r)}
    if not chosen:
        return None
    compiler = _Compiler([r.expr for r in chosen.values()], shape)
    plan = compiler.plan
    plan.reductions = chosen
    plan.roots = {i: compiler.register(r.expr) for i, r in chosen.items()}
    return plan
