"""The scatter pass: every source chunk read once, its pieces copied into the partial target
blocks of a raw scatter buffer, each target block written once, when its last piece arrived.

The buffer is a temporary file, one slot per target block (of the output's write grid:
chunks, or shards), allocated in full up front so that a full disk is an ``OSError`` here
and never a ``SIGBUS`` in a copy.  Why not compressed spill memory: each source chunk adds a
piece to many partial target blocks, so compressed pages would be decoded and encoded again
once per source chunk; raw pages are copied into at memory speed and the kernel's page cache
keeps what RAM allows.

A piece that is one run of its slot's bytes (a target block's rows, whole along the faster
axes) is written with ``pwrite`` (several pieces gathered first into a small per-thread
array), and a slot is read back with ``pread``: a shared mapping of an ext4 file costs a
page fault and the file system's write notification per page, about 6x the time of
``pwrite`` of the same bytes here, and two threads faulting on one mapping were no faster
than one.  Other pieces are copied into the file mapped into memory; the pages this process
maps are handed back to the kernel (``MADV_DONTNEED``: they stay in the page cache, dirty ones
are written to the file) whenever about ``map_bytes`` of them were touched, so the RSS stays
in the plan.  Where a group's pieces are not runs of their slots (and nothing is streamed),
the plan stores the slots in piece order instead (see _tiles): every piece one ``pwrite``.
"""

from __future__ import annotations

import itertools
import math
import threading
from collections.abc import Iterator
from typing import Any

import numpy as np

from oocarray._compute._rechunk._buffer import PAGE, ScatterBuffer, copy_runs, flat_index
from oocarray._compute._rechunk._passes import SLAB_BYTES, Pass, slabs
from oocarray._compute._rechunk._resume import Marker
from oocarray._compute._rechunk._threads import Outcome, run_blocks
from oocarray._compute._rechunk._tiles import Tiles, assemble, write_pieces
from oocarray._compute._rechunk._zstd_stream import FrameReader, streamable, write_frame
from oocarray._storage._indexing import ChunkPiece, parse_key

__all__ = ["scatter"]

# A block of work: ("read", source chunk) or ("write", target block).
Job = tuple[str, tuple[int, ...]]


def _span(piece: np.ndarray, exact: bool = False) -> int:
    """Bytes of the pages a strided view covers (its first to its last element): counted
    from its address when ``exact``, else as many as its length could straddle."""
    if piece.size == 0:
        return 0
    last = sum((n - 1) * abs(s) for n, s in zip(piece.shape, piece.strides, strict=True))
    if not exact:
        return int(last + piece.itemsize) // PAGE * PAGE + 2 * PAGE
    start = int(piece.__array_interface__["data"][0]) + min(
        0, sum((n - 1) * s for n, s in zip(piece.shape, piece.strides, strict=True) if s < 0)
    )
    return int((start + last + piece.itemsize - 1) // PAGE - start // PAGE + 1) * PAGE


# One axis of a source region cut at target block bounds: blocks, span in each block, span
# in the region.  The blocks either all are whole or it is one block.
Segment = tuple[slice, slice, slice]


def _segments(start: int, stop: int, unit: int) -> list[Segment]:
    """``[start, stop)`` as a partial head block, whole middle blocks, a partial tail block."""
    first, last = start // unit, (stop - 1) // unit
    if first == last:
        return [
            (
                slice(first, first + 1),
                slice(start - first * unit, stop - first * unit),
                slice(0, stop - start),
            )
        ]
    out: list[Segment] = []
    full_from = first
    if start % unit:
        head = unit - start % unit
        out.append((slice(first, first + 1), slice(start % unit, unit), slice(0, head)))
        full_from = first + 1
    tail = stop - last * unit
    full_to = last + 1 if tail == unit else last
    if full_to > full_from:
        out.append(
            (
                slice(full_from, full_to),
                slice(0, unit),
                slice(full_from * unit - start, full_to * unit - start),
            )
        )
    if tail < unit:
        out.append(
            (slice(last, last + 1), slice(0, tail), slice(stop - tail - start, stop - start))
        )
    return out


def _run_start(within: tuple[slice, ...], unit: tuple[int, ...]) -> int | None:
    """The element of a slot where the piece ``within`` starts, when the piece is one run of
    the slot's elements (one index along the leading axes, a run along one, whole along the
    rest), else None."""
    axis = 0
    while axis < len(unit) - 1 and within[axis].stop - within[axis].start == 1:
        axis += 1
    for w, u in zip(within[axis + 1 :], unit[axis + 1 :], strict=True):
        if w.start != 0 or w.stop != u:
            return None
    start = 0
    for w, u in zip(within, unit, strict=True):
        start = start * u + w.start
    return start


def _write_runs(
    buffer: ScatterBuffer,
    moved: np.ndarray,
    blocks: tuple[slice, ...],
    start: int,
    staging: np.ndarray,
) -> bool:
    """Write the pieces of ``moved`` (block axes, then piece axes), each a run of its slot
    from element ``start`` on, with ``pwrite``: straight from the source where a piece is
    contiguous there, else gathered, as many as ``staging`` holds, into it first.  False
    (nothing written) where a piece is neither contiguous nor fits ``staging``."""
    ndim = len(blocks)
    counts, widths = moved.shape[:ndim], moved.shape[ndim:]
    piece_elements = math.prod(widths)
    direct = moved[(0,) * ndim].flags.c_contiguous  # every piece has the same strides
    room = staging.nbytes // max(piece_elements * moved.itemsize, 1)
    if not direct and room == 0:
        return False
    per_copy = 1 if direct else room
    base = start * moved.itemsize
    stage = staging.view(moved.dtype)
    for outer in itertools.product(*(range(n) for n in counts[:-1])):
        row = moved[outer]
        corner = [b.start + i for b, i in zip(blocks[:-1], outer, strict=True)]
        # Blocks next to each other along the last axis have slots next to each other.
        at = flat_index((*corner, blocks[-1].start), buffer.grid) * buffer.slot_bytes + base
        for first in range(0, counts[-1], per_copy):
            last = min(counts[-1], first + per_copy)
            if direct:
                part = row[first:last]
            else:
                part = stage[: (last - first) * piece_elements].reshape(last - first, *widths)
                copy_runs(part, row[first:last])  # short rows: see copy_runs
            offsets = at + np.arange(first, last, dtype=np.int64) * buffer.slot_bytes
            buffer.write_pieces(offsets, part)
    return True


def _scatter_into(
    buffer: ScatterBuffer,
    data: np.ndarray,
    region: tuple[slice, ...],
    unit: tuple[int, ...],
    step_bytes: int,
    staging: np.ndarray | None = None,
    tiles: Tiles | None = None,
) -> None:
    """Copy a group of source chunks' data (at ``region``) into its target blocks' slots: per
    combination of head, middle and tail segments (at most 3 per axis), pieces that are runs
    of their slots written with ``pwrite`` (gathered in ``staging``), other pieces by one
    NumPy copy into the mapped buffer, cut into copies that touch at most about
    ``step_bytes`` of the buffer's pages each, counted before they are touched (so the pages
    mapped stay what the plan counted).  With ``tiles`` (slots in piece order), every piece
    is written with ``pwrite`` into its own run of its slot."""
    ndim = len(unit)
    exact = buffer.slot_bytes % PAGE == 0
    axes = [_segments(r.start, r.stop, u) for r, u in zip(region, unit, strict=True)]
    for combination in itertools.product(*axes):
        blocks = tuple(seg[0] for seg in combination)
        within = tuple(seg[1] for seg in combination)
        piece = data[tuple(seg[2] for seg in combination)]
        counts = [b.stop - b.start for b in blocks]
        widths = [w.stop - w.start for w in within]
        split = piece.reshape([n for pair in zip(counts, widths, strict=True) for n in pair])
        order = [2 * axis for axis in range(ndim)] + [2 * axis + 1 for axis in range(ndim)]
        moved = split.transpose(order)
        if tiles is not None and staging is not None:
            write_pieces(
                buffer.write_at,
                buffer.write_pieces,
                moved,
                blocks,
                within,
                tiles,
                buffer.slot_at,
                staging,
            )
            continue
        start = _run_start(within, unit) if staging is not None else None
        if (
            start is not None
            and staging is not None
            and _write_runs(buffer, moved, blocks, start, staging)
        ):
            continue
        target = buffer.array[blocks + within]
        # Slots a whole number of pages long start at one offset within a page: the first
        # slot's pages count for each.
        per_block = _span(target[(0,) * ndim], exact)
        # Cut along the outer block axes: each copy takes one block along the axes before
        # ``axis`` and ``rows`` along it, whole along the rest (their blocks fit a step).
        axis = 0
        while axis < ndim - 1 and per_block * math.prod(counts[axis + 1 :]) > step_bytes:
            axis += 1
        per_row = per_block * math.prod(counts[axis + 1 :])
        rows = max(1, step_bytes // max(per_row, 1))
        for outer in itertools.product(*(range(n) for n in counts[:axis])):
            for start in range(0, counts[axis], rows):
                stop = min(counts[axis], start + rows)
                buffer.touched(per_row * (stop - start))
                part = (*(slice(i, i + 1) for i in outer), slice(start, stop))
                target[part] = moved[part]


def scatter(
    source: Any, out: Any, work: Pass, progress: bool, marker: Marker | None = None
) -> None:
    """Run a scatter pass from the stored array ``source`` into the stored array ``out``."""
    src, dst = source._store, out._store
    shape = tuple(src.shape)
    ndim = len(shape)
    # Read in groups of source chunks (the plan's block): see _passes._scatter_group.
    chunks, unit = tuple(work.block), tuple(dst.write_grid)
    per_thread = threading.local()
    grid = tuple(-(-n // u) for n, u in zip(shape, unit, strict=True))
    source_grid = tuple(-(-n // c) for n, c in zip(shape, chunks, strict=True))
    # Per axis and target block: how many source chunks it gets a piece from.
    pieces = [
        [(min(n, (b + 1) * u) - 1) // c - (b * u) // c + 1 for b in range(g)]
        for n, u, c, g in zip(shape, unit, chunks, grid, strict=True)
    ]
    done = marker.done if marker is not None else set()
    # Per target block: the pieces it still waits for.
    remaining = np.ones(grid, dtype=np.int64)
    for axis, counts in enumerate(pieces):
        remaining *= np.asarray(counts, dtype=np.int64).reshape(
            [-1 if a == axis else 1 for a in range(ndim)]
        )
    lock = threading.Lock()
    buffer = ScatterBuffer(grid, unit, np.dtype(dst.dtype), work.map_bytes)
    # Streamed where the plan counted on it and the stores allow (a store the plan could not
    # see, the output, is checked here; else the one-shot codec is used).
    stream_reads = work.stream_reads and streamable(src) and tuple(src.chunks) == chunks
    stream_writes = work.stream_writes and streamable(dst) and unit == tuple(dst.chunks)
    chunk_slabs = slabs(chunks, np.dtype(src.dtype).itemsize, SLAB_BYTES) if stream_reads else []
    tiles = Tiles(shape, unit, chunks) if work.tiled and not stream_reads else None
    itemsize = np.dtype(dst.dtype).itemsize

    def blocks_of(region: tuple[slice, ...]) -> tuple[slice, ...]:
        return tuple(
            slice(r.start // u, (r.stop - 1) // u + 1) for r, u in zip(region, unit, strict=True)
        )

    def group_region(group: tuple[int, ...]) -> tuple[slice, ...]:
        return tuple(
            slice(g * c, min(n, (g + 1) * c)) for g, c, n in zip(group, chunks, shape, strict=True)
        )

    def needed(group: tuple[int, ...]) -> bool:
        touched = blocks_of(group_region(group))
        ranges = [range(b.start, b.stop) for b in touched]
        return any(flat_index(b, grid) not in done for b in itertools.product(*ranges))

    def read(group: tuple[int, ...]) -> Outcome[Job]:
        region = group_region(group)
        # The group's chunks decoded side by side into this thread's group array, made once
        # per pass: a fresh one per group would be mapped, and faulted in, every time.
        if stream_reads:
            read_streamed(group, region)
        else:
            selection = parse_key(region, shape, tuple(src.chunks))
            flat = getattr(per_thread, "group", None)
            if flat is None:
                flat = per_thread.group = np.empty(math.prod(chunks), dtype=src.dtype)
            data = flat[: math.prod(selection.full_shape)].reshape(selection.full_shape)
            read_group(list(selection.pieces()), data)
            _scatter_into(buffer, data, region, unit, work.step_bytes, staging(), tiles)
            del data
        touched = blocks_of(region)
        with lock:
            reads_left[0] -= 1
            left = remaining[touched]
            left -= 1
            whole = np.argwhere(left == 0)
        corner = np.array([b.start for b in touched])
        complete: list[Job] = []
        for found in whole:
            block = tuple(int(i) for i in found + corner)
            if flat_index(block, grid) not in done:
                complete.append(("write", block))
        return complete, 0

    source_chunk = tuple(src.chunks)
    ahead = (slice(None),) * (ndim - 1)

    def read_group(pieces: list[ChunkPiece], data: np.ndarray) -> None:
        """Read a group's chunks into ``data``: each whole chunk decoded straight into this
        thread's stack of chunks (made once per pass), then copied into place.  Why: into
        ``data`` a chunk lands strided, and the store decodes it into a fresh scratch buffer
        first (inside a manager one is mapped, and its pages faulted in, per read)."""
        whole = all(p.covers_chunk and data[p.out].shape == source_chunk for p in pieces)
        if len(pieces) < 2 or not whole:
            src.read_into(pieces, data)
            return
        lead = source_chunk[0]
        stack = getattr(per_thread, "stack", None)
        if stack is None or len(stack) < len(pieces) * lead:
            stack = per_thread.stack = np.empty(
                (len(pieces) * lead, *source_chunk[1:]), dtype=src.dtype
            )
        placed = [
            ChunkPiece(p.chunk, p.local, (slice(k * lead, (k + 1) * lead), *ahead), True)
            for k, p in enumerate(pieces)
        ]
        src.read_into(placed, stack)
        for k, p in enumerate(pieces):
            copy_runs(data[p.out], stack[k * lead : (k + 1) * lead])

    def staging() -> np.ndarray:
        """This thread's array pieces are gathered in before they are written (the plan's
        step: it stands for the pages a copy into the mapped buffer touches)."""
        flat = getattr(per_thread, "staging", None)
        if flat is None:
            flat = per_thread.staging = np.empty(work.step_bytes, dtype=np.uint8)
        return flat

    def read_streamed(chunk: tuple[int, ...], region: tuple[slice, ...]) -> None:
        """Decode source chunk ``chunk`` (at ``region``) a slab at a time into this thread's
        slab array, each slab's valid part copied into the buffer before the next."""
        flat = getattr(per_thread, "slab", None)
        if flat is None:
            flat = per_thread.slab = np.empty(
                max(math.prod(s.stop - s.start for s in slab) for slab in chunk_slabs), src.dtype
            )
        reader = FrameReader(src, chunk)
        try:
            for slab in chunk_slabs:
                data = flat[: math.prod(s.stop - s.start for s in slab)]
                data = data.reshape([s.stop - s.start for s in slab])
                reader.read_into(data)
                at = tuple(
                    slice(r.start + s.start, min(r.stop, r.start + s.stop))
                    for r, s in zip(region, slab, strict=True)
                )
                if all(a.stop > a.start for a in at):  # else all padding, past the array
                    valid = data[tuple(slice(0, a.stop - a.start) for a in at)]
                    _scatter_into(buffer, valid, at, unit, work.step_bytes, staging())
            reader.finish()
        finally:
            reader.close()

    # A slot's bytes past the array's edge were never written: zeros, the padding of a fill
    # value whose bytes are zeros.
    zero_fill = not np.asarray(dst.fill_value, dtype=dst.dtype).tobytes().strip(b"\0")

    def write_streamed(block: tuple[int, ...], flat: int) -> None:
        """Encode target block ``block`` from its slot, read a piece at a time; padding at the
        array's edge is filled in the slot first where the fill value is not zeros."""
        region = dst.block_region(block)
        edge = any(r.stop - r.start < u for r, u in zip(region, unit, strict=True))
        if edge and not zero_fill:
            slot = buffer.array[block]
            for axis, r in enumerate(region):
                if r.stop - r.start < unit[axis]:
                    padding = (slice(None),) * axis + (slice(r.stop - r.start, None),)
                    buffer.touched(_span(slot[padding], buffer.slot_bytes % PAGE == 0))
                    slot[padding] = dst.fill_value
            del slot
        base = flat * buffer.slot_bytes
        write_frame(
            dst, block, buffer.slot_bytes, lambda start, out: buffer.read_at(base + start, out)
        )

    def write(block: tuple[int, ...]) -> Outcome[Job]:
        region = dst.block_region(block)
        valid = tuple(slice(0, r.stop - r.start) for r in region)
        flat = flat_index(block, grid)
        if not reads_left[0]:
            # Every group is read: this thread's read arrays make room for the page cache.
            for name in ("group", "stack", "staging", "slab"):
                per_thread.__dict__.pop(name, None)
        buffer.will_read(flat)
        if stream_writes:
            write_streamed(block, flat)
        elif tiles is not None:
            # Put in C order in this thread's arrays, made once per pass.
            if getattr(per_thread, "raw", None) is None:
                per_thread.raw = np.empty(buffer.slot_bytes, dtype=np.uint8)
                per_thread.ordered = np.empty(buffer.slot_bytes // itemsize, dst.dtype)
            values = assemble(
                buffer.read_at,
                tiles,
                block,
                buffer.slot_at(block),
                per_thread.raw,
                per_thread.ordered,
            )
            dst.write_blocks([(block, values)])
            del values
        else:
            # Encoded straight from the buffer's pages: no copy of the block (the store pads
            # one at the array's edge).  The buffer outlives every write.
            slot = buffer.array[block][valid]
            buffer.touched(_span(slot, buffer.slot_bytes % PAGE == 0))
            dst.write_blocks([(block, slot)])
            del slot
        buffer.release(flat)
        if marker is not None:
            marker.record(flat)
        return [], 1

    def run(job: Job) -> Outcome[Job]:
        kind, index = job
        return read(index) if kind == "read" else write(index)

    def every_group() -> Iterator[tuple[int, ...]]:
        return itertools.product(*(range(g) for g in source_grid))

    reads_left = [sum(1 for chunk in every_group() if needed(chunk))]
    jobs = (("read", chunk) for chunk in every_group() if needed(chunk))
    try:
        run_blocks(
            jobs,
            run,
            work.workers,
            total=math.prod(grid),
            initial=len(done),
            desc=f"rechunk {work.name}",
            progress=progress,
        )
    finally:
        buffer.close()
