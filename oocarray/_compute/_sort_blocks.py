"""Sorting along one axis of an N-d chunked array whose lines fit in memory a few at a time
but not as a lazy block (say along the chunked first axis of a tall (N, 64) array).

The lines are sorted in blocks: each block holds whole lines along the axis (as many as fit
the budget, cut along the other axes) and is sorted in RAM by NumPy, on every core, then
written whole to a temporary chunked array.  When the input's chunks span several blocks (a
block of a few columns of chunks holding every column), reading each block from the input
would decode every chunk once per block: the input is first copied once, decoded, into an
uncompressed temporary array chunked by block (a transposition on disk), which the blocks
then read without decoding.
"""

from __future__ import annotations

import concurrent.futures
import itertools
import math
import os
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import numpy as np

from oocarray._compute._external_sort import RESULT_CODEC, read_region
from oocarray._compute._limits import working_bytes
from oocarray._compute._nodes import Node, Region
from oocarray._compute._scratch_file import ScratchFile
from oocarray._compute._temporaries import temporary
from oocarray._memory import active_manager, system
from oocarray._storage import StoredArray

__all__ = ["sort_line_blocks"]

# Results are written a block at a time, once, with the external sort's cheap codec.
OUTPUT_CODEC = RESULT_CODEC
MAX_WORKERS = 2
# Chunks along the sorted axis of the input, when it has none; the result's chunks are a
# block's extent on the other axes and about CELL_BYTES (every chunk written costs a fixed
# overhead: small chunks, many times).
AXIS_CHUNK_BYTES = 4 << 20
CELL_BYTES = 4 << 20


def _cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # pragma: no cover - platforms without affinity
        return os.cpu_count() or 1


def _smaller(block: int, chunk: int) -> int:
    """The next smaller extent of a block along an axis chunked by ``chunk``: a smaller
    multiple of the chunk, else a smaller divisor of it (a block never shares a chunk with
    another block unless it holds all of it)."""
    if block > chunk:
        return chunk * max(1, math.ceil(block / chunk) // 2)
    return max(d for d in range(1, block) if chunk % d == 0)


def _block_shape(
    shape: tuple[int, ...], axis: int, chunks: tuple[int, ...], max_items: int
) -> tuple[int, ...] | None:
    """Whole lines along ``axis``, the other axes cut (widest first) until a block holds at
    most ``max_items``; None when one line does not fit."""
    block = list(shape)
    while math.prod(block) > max_items:
        others = [d for d in range(len(shape)) if d != axis and block[d] > 1]
        if not others:
            return None
        widest = max(others, key=lambda d: block[d])
        block[widest] = _smaller(block[widest], chunks[widest])
    return tuple(block)


def _regions(shape: tuple[int, ...], step: tuple[int, ...]) -> Iterator[Region]:
    counts = [math.ceil(n / s) for n, s in zip(shape, step, strict=True)]
    for index in np.ndindex(*counts):
        yield tuple(
            slice(i * s, min((i + 1) * s, n)) for i, s, n in zip(index, step, shape, strict=True)
        )


def _input_chunks(node: Node, axis: int) -> tuple[int, ...]:
    """The input's chunks (each at most its axis), or whole axes and a few MiB along the
    sorted axis for an input without chunks."""
    found = node.chunks()
    if found is not None:
        return tuple(max(1, min(c, n)) for c, n in zip(found, node.shape, strict=True))
    chunks = list(node.shape)
    other_bytes = max(1, math.prod(chunks) // max(1, chunks[axis]) * node.dtype.itemsize)
    chunks[axis] = max(1, min(node.shape[axis], AXIS_CHUNK_BYTES // other_bytes))
    return tuple(chunks)


def _run(workers: int, work: Callable[[Any], None], items: Iterable[Any]) -> None:
    """``work`` for every item, ``workers`` at a time, inside the active manager."""
    manager = active_manager() or system()

    def one(item: Any) -> None:
        with manager.activate():
            work(item)

    if workers == 1:
        for item in items:
            one(item)
        return
    with concurrent.futures.ThreadPoolExecutor(workers, "oocarray-sort-lines") as pool:
        for done in [pool.submit(one, item) for item in items]:
            done.result()


def sort_line_blocks(node: Node, axis: int, kind: Any, arg: bool) -> StoredArray | None:
    """``node`` sorted (``arg``: argsorted) along ``axis`` by blocks of whole lines, into a
    temporary chunked array (uncompressed, chunked by block on the other axes); None when a
    single line does not fit the budget.  ``np.sort(x, axis=0)`` of a chunked array reaches
    it when its lines are too long for a lazy sort (see ``_sorting``)."""
    shape = node.shape
    out_dtype = np.dtype(np.intp) if arg else node.dtype
    # A worker holds a block's values (sorted in place; NumPy copies one line at a time) with
    # as much again for reading and writing them, and argsort's order.
    per_item = 2 * node.dtype.itemsize + (out_dtype.itemsize if arg else 0)
    memory = working_bytes()
    chunks = _input_chunks(node, axis)
    workers = MAX_WORKERS if _cpus() > 1 else 1
    block: tuple[int, ...] | None = None
    while block is None and workers >= 1:
        block = _block_shape(shape, axis, chunks, memory // (workers * per_item))
        workers -= block is None
    if block is None:
        return None
    line_items = math.prod(b for d, b in enumerate(block) if d != axis)
    cell = list(block)
    cell[axis] = max(1, min(shape[axis], CELL_BYTES // (line_items * out_dtype.itemsize)))
    out = temporary(shape, out_dtype, chunks=tuple(cell), codec=OUTPUT_CODEC)
    blocks = list(_regions(shape, block))

    def write(region: Region, values: np.ndarray, fresh: bool) -> None:
        """Sorts a block's ``values`` (in place when ``fresh``: no one else holds them)."""
        if arg:
            out[region] = np.argsort(values, axis=axis, kind=kind)
            return
        if not fresh:
            values = values.copy()
        values.sort(axis=axis, kind=kind)
        out[region] = values

    if len(blocks) == 1 or all(b >= c for b, c in zip(block, chunks, strict=True)):
        # Every input chunk lies in one block: each block reads its own chunks.
        _run(workers, lambda region: write(region, read_region(node, region), False), blocks)
        return out
    with ScratchFile() as scratch:
        _staged(node, axis, block, chunks, blocks, scratch, workers, memory)
        offsets = _block_offsets(blocks, node.dtype.itemsize)

        def sort_block(index: int) -> None:
            region = blocks[index]
            moved = _moved_shape(region, axis)
            values = np.empty(moved, node.dtype)
            scratch.read_into(offsets[index], values)
            write(region, np.moveaxis(values, 0, axis), True)

        _run(workers, sort_block, range(len(blocks)))
    return out


def _moved_shape(region: Region, axis: int) -> tuple[int, ...]:
    """The shape of ``region`` with ``axis`` first (the scratch file's layout of a block)."""
    sizes = [s.stop - s.start for s in region]
    return (sizes[axis], *sizes[:axis], *sizes[axis + 1 :])


def _block_offsets(blocks: list[Region], itemsize: int) -> list[int]:
    sizes = [math.prod(s.stop - s.start for s in region) * itemsize for region in blocks]
    return [sum(sizes[:i]) for i in range(len(sizes))]


def _staged(
    node: Node,
    axis: int,
    block: tuple[int, ...],
    chunks: tuple[int, ...],
    blocks: list[Region],
    scratch: ScratchFile,
    workers: int,
    memory: int,
) -> None:
    """Copies ``node`` into ``scratch``, each block as one C-order extent with ``axis`` first
    (so a block is one read), from units of whole input chunks read (decoded) once."""
    # A unit holds whole blocks (or all of one block) on the other axes, so its part of a
    # block is rows of the block's extent: contiguous in the file.
    unit = [max(b, c) for b, c in zip(block, chunks, strict=True)]
    unit_items = math.prod(u for d, u in enumerate(unit) if d != axis)
    rows = memory // (workers * 2 * node.dtype.itemsize * unit_items * chunks[axis])
    unit[axis] = min(node.shape[axis], chunks[axis] * max(1, rows))
    offsets = _block_offsets(blocks, node.dtype.itemsize)
    index_of = {tuple(s.start for s in region): i for i, region in enumerate(blocks)}

    def stage(region: Region) -> None:
        values = read_region(node, region)
        inner = [
            range(r.start, r.stop, b) if d != axis else range(1)
            for d, (r, b) in enumerate(zip(region, block, strict=True))
        ]
        for corner in itertools.product(*inner):
            start = tuple(0 if d == axis else c for d, c in enumerate(corner))
            target = blocks[index_of[start]]
            part = tuple(
                slice(0, r.stop - r.start)
                if d == axis
                else slice(t.start - r.start, t.stop - r.start)
                for d, (r, t) in enumerate(zip(region, target, strict=True))
            )
            piece = np.moveaxis(values[part], axis, 0)
            line_items = math.prod(piece.shape[1:])
            offset = offsets[index_of[start]] + region[axis].start * line_items * piece.itemsize
            scratch.write(offset, piece)

    _run(workers, stage, list(_regions(node.shape, tuple(unit))))
