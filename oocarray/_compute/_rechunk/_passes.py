"""The passes a rechunk plan (``_rechunk._plan``) weighs, each sized in the memory budget: its
blocks, its threads, the bytes it reads, writes and copies through the scatter buffer, and its
projected peak memory.

- :func:`block_pass`: blocks made of whole chunks, read and written once (the direct pass, and
  both passes of two-pass); :func:`direct_pass` streams the direct one where that does better;
- :func:`scatter_pass`: groups of source chunks copied into a raw scatter buffer, with chunks
  read and written as streams where they are large and that runs more threads;
- :func:`frames_pass`: the scatter pass without a buffer, where the target chunks are runs of
  rows that strips of source chunks supply in order (:func:`strip_geometry`): each strip's
  runs appended to the target chunks' files as zstd frames (run by _frames);
- :func:`grown_middle`: the intermediate chunks of a two-pass rechunk.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, replace

from oocarray._compute._rechunk._direct_stream import STREAM_WORKER_BYTES, streams_directly
from oocarray._compute._rechunk._tiles import pieces_are_runs
from oocarray._compute._rechunk._zstd_stream import CONTEXT_BYTES, PIECE_BYTES
from oocarray._storage._pool import workers as cpu_workers

__all__ = [
    "SCATTER_MAP_BYTES",
    "SLAB_BYTES",
    "Pass",
    "block_pass",
    "direct_pass",
    "frames_pass",
    "grown_middle",
    "lcm_block",
    "scatter_pass",
    "slabs",
    "strip_geometry",
]

# A block is held while it is read (decode buffers) and again while it is encoded for writing.
BLOCK_COPIES = 2

# The scatter buffer's pages this process maps at most before it lets the kernel take them
# back (they stay in the page cache): counted in the plan's peak, as they count in its RSS.
SCATTER_MAP_BYTES = 64 << 20

# A scatter worker's group of source chunks takes at most this share of the budget (split
# between the workers); the rest holds target chunks being written and mapped buffer pages.
SCATTER_GROUP_SHARE = 4

# The scatter buffer's pages one copy into it touches at most (see SCATTER_MAP_BYTES).
SCATTER_STEP_BYTES = 1 << 20

# Chunks of at least this many bytes are encoded or decoded as a stream (see _zstd_stream)
# where their store allows: smaller ones cost the codec's buffers little, and a stream's
# calls cost more per byte.
STREAM_FROM_BYTES = 8 << 20

# A streamed source chunk is decoded and scattered this many bytes at a time.
SLAB_BYTES = 4 << 20

# Between plans running as many threads, whether the streamed one is chosen.
PREFER_STREAMS = False

# A frames pass appends frames of at least this many bytes (zstd's largest block: a frame of
# that size is compressed as its blocks would be inside one chunk-sized frame), its strips
# as many source chunks deep as that takes.  Smaller frames cost each their own frame's set-up
# and Python's work per frame: time -> series at 4 GiB took 16.8 s in frames of 16 KiB, 11.8 s
# in 64 KiB, 10.4 s in 128 KiB, and 11-12 s through the buffered scatter pass.
MIN_FRAME_BYTES = 128 << 10
# Strips of source chunks a frames pass holds at most: two let one be decoded while the
# other's frames are encoded.
MAX_STRIPS_HELD = 2


@dataclass(frozen=True)
class Pass:
    """One pass: blocks of ``block`` elements per axis, read from ``source_chunks``-chunked
    data and written into ``target_chunks``-chunked data."""

    name: str
    block: tuple[int, ...]
    source_chunks: tuple[int, ...]
    target_chunks: tuple[int, ...]
    bytes_read: int
    bytes_written: int
    peak_bytes: int
    workers: int = 1
    # Bytes through the scatter buffer (copied in, then read back once per target chunk).
    scatter_bytes: int = 0
    # Scatter: the buffer's pages mapped at once (in peak_bytes).
    map_bytes: int = 0
    # Scatter: the buffer's pages one copy touches at most.
    step_bytes: int = 0
    # Source chunks decoded, and target chunks encoded, as streams (_zstd_stream); a direct
    # pass does both or neither (_direct_stream).
    stream_reads: bool = False
    stream_writes: bool = False
    # Scatter: slots stored in piece order (see _tiles), where pieces are not runs of them.
    tiled: bool = False
    # A direct pass streamed that writes each target chunk as its source chunks' stored
    # frames, none decoded or encoded (_direct_stream).
    copies_frames: bool = False
    # The output's chunk files written past the page cache (Store.write_direct).
    direct_writes: bool = False
    # A frames pass (see _frames): the strips of source chunks held at once (``block`` is a
    # strip); 0 for any other pass.
    frames: int = 0
    # A frames pass: the scatter pass through a buffer, run where the output cannot take
    # appended frames after all (a store the plan could not see).
    fallback: Pass | None = None


def slabs(chunk: tuple[int, ...], itemsize: int, nbytes: int) -> list[tuple[slice, ...]]:
    """A chunk cut, in C order, into boxes of at most ``nbytes`` (at least one element): one
    index along the leading axes, a run along one axis, whole along the rest."""
    axis = 0
    while axis < len(chunk) - 1 and math.prod(chunk[axis + 1 :]) * itemsize > nbytes:
        axis += 1
    row = math.prod(chunk[axis + 1 :]) * itemsize
    rows = max(1, nbytes // max(row, 1))
    out = []
    for lead in itertools.product(*(range(n) for n in chunk[:axis])):
        for start in range(0, chunk[axis], rows):
            out.append(
                (
                    *(slice(i, i + 1) for i in lead),
                    slice(start, min(chunk[axis], start + rows)),
                    *(slice(0, n) for n in chunk[axis + 1 :]),
                )
            )
    return out


def lcm_block(a: tuple[int, ...], b: tuple[int, ...], shape: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(min(math.lcm(x, y), max(n, 1)) for x, y, n in zip(a, b, shape, strict=True))


def block_pass(
    name: str,
    block: tuple[int, ...],
    source: tuple[int, ...],
    target: tuple[int, ...],
    shape: tuple[int, ...],
    itemsize: int,
    budget: int,
    threads: int,
) -> Pass:
    """A pass's bytes: each block reads the source chunks it touches whole; as many blocks run
    at once as the budget holds (at least one), at most ``threads``."""
    read_span = 1
    for n, b, s in zip(shape, block, source, strict=True):
        covered = 0
        for start in range(0, n, b):
            stop = min(n, start + b)
            covered += min(n, -(-stop // s) * s) - (start // s) * s
        read_span *= covered
    nbytes = math.prod(shape) * itemsize
    chunk = math.prod(source) * itemsize
    per_block = BLOCK_COPIES * math.prod(block) * itemsize + chunk
    workers = max(1, min(threads, budget // max(per_block, 1)))
    return Pass(
        name, block, source, target, read_span * itemsize, nbytes, workers * per_block, workers
    )


def _streamed_direct(
    direct: Pass,
    itemsize: int,
    budget: int,
    streams: tuple[bool, bool],
    write_unit: tuple[int, ...] | None,
    recompress: bool,
) -> Pass | None:
    """The direct pass with its target chunks written from their source chunks' frames, or
    with ``recompress`` encoded from them as streams (see _direct_stream), where the stores
    allow and each target chunk is made of whole source chunks, each one run of it (encoded,
    where the chunks are large too: STREAM_FROM_BYTES)."""
    source, target = direct.source_chunks, direct.target_chunks
    if (
        streams != (True, True)
        or write_unit is not None
        or direct.block != target
        or (recompress and math.prod(target) * itemsize < STREAM_FROM_BYTES)
        or not streams_directly(source, target)
    ):
        return None
    workers = max(1, min(cpu_workers(), budget // STREAM_WORKER_BYTES))
    return replace(
        direct,
        peak_bytes=workers * STREAM_WORKER_BYTES,
        workers=workers,
        stream_reads=True,
        stream_writes=True,
        copies_frames=not recompress,
    )


def direct_pass(
    shape: tuple[int, ...],
    itemsize: int,
    source: tuple[int, ...],
    target: tuple[int, ...],
    budget: int,
    write_unit: tuple[int, ...] | None,
    streams: tuple[bool, bool],
    threads: int,
    recompress: bool,
) -> Pass:
    """The direct pass: blocks of whole source and whole target chunks (per axis their lcm),
    on at most ``threads`` threads; streamed instead (see :func:`_streamed_direct`) where that
    copies the frames within ``budget``, runs more threads, the plain pass does not fit, or
    PREFER_STREAMS says so."""
    direct = block_pass(
        "pass 1 (direct)",
        lcm_block(source, target, shape),
        source,
        target,
        shape,
        itemsize,
        budget,
        threads,
    )
    streamed = _streamed_direct(direct, itemsize, budget, streams, write_unit, recompress)
    if streamed is not None and (
        (streamed.copies_frames and streamed.peak_bytes <= budget)
        or streamed.workers > direct.workers
        or direct.peak_bytes > budget
        or PREFER_STREAMS
    ):
        direct = streamed
    return direct


def scatter_pass(
    shape: tuple[int, ...],
    itemsize: int,
    source: tuple[int, ...],
    target: tuple[int, ...],
    budget: int,
    unit: tuple[int, ...] | None,
    streams: tuple[bool, bool],
    threads: int,
) -> Pass:
    """One pass through the scatter buffer, reading groups of source chunks (the pass's
    ``block``).  ``streams``: whether the source's chunks can be read, and the output's
    written, as streams (local unsharded zstd chunk files); they are where their chunks are
    large (see STREAM_FROM_BYTES) and where that runs more threads in the budget.  At most
    ``threads`` where target chunks are not streamed, else the cores."""
    source_bytes = math.prod(source) * itemsize
    target_bytes = math.prod(unit or target) * itemsize
    reads = streams[0] and source_bytes >= STREAM_FROM_BYTES
    writes = streams[1] and unit is None and target_bytes >= STREAM_FROM_BYTES
    variants = [
        _scatter_variant(
            shape, itemsize, source, target, budget, unit, r, w, cpu_workers() if w else threads
        )
        for r, w in {(False, False), (reads, False), (False, writes), (reads, writes)}
    ]
    # The most threads in the budget; then as PREFER_STREAMS says.
    fits = [v for v in variants if v.peak_bytes <= budget] or variants
    sign = 1 if PREFER_STREAMS else -1
    return max(fits, key=lambda v: (v.workers, sign * (v.stream_reads + v.stream_writes)))


def strip_geometry(
    shape: tuple[int, ...], source: tuple[int, ...], target: tuple[int, ...], depth: int = 1
) -> tuple[int, tuple[int, ...]] | None:
    """Where target chunks are runs of rows that strips of source chunks supply in order:
    their axis (the first along which a target chunk is longer than one element, one before
    it everywhere) and a strip's extent per axis (a source chunk's before it, ``depth`` source
    chunks along it; after it, whole target and source chunks: their lcm, at most the axis
    padded to whole target chunks).  None where a target chunk along that axis is not a whole
    number of strips, or no source chunk is shorter there (no run to append)."""
    if not shape or 0 in shape:
        return None
    axis = next((i for i, u in enumerate(target) if u > 1), None)
    if axis is None or source[axis] >= target[axis] or target[axis] % (source[axis] * depth):
        return None
    extent = [*source[:axis], source[axis] * depth]
    for n, s, u in zip(shape[axis + 1 :], source[axis + 1 :], target[axis + 1 :], strict=True):
        extent.append(min(math.lcm(s, u), -(-n // u) * u))
    return axis, tuple(extent)


def frames_pass(
    shape: tuple[int, ...],
    itemsize: int,
    source: tuple[int, ...],
    target: tuple[int, ...],
    budget: int,
    threads: int,
    streamable_source: bool = False,
) -> Pass | None:
    """The scatter pass that appends each strip's runs to the target chunks' files as zstd
    frames (see _frames), where :func:`strip_geometry` finds strips deep enough for frames
    of MIN_FRAME_BYTES and a strip fits the budget beside the codec's buffers: every thread's
    decoding (a source chunk's stored bytes and a copy of it; where the source's chunks can
    be read as streams and are large, STREAM_FROM_BYTES, its contexts and a slab of
    SLAB_BYTES instead) and encoding (a frame gathered, and its encoded bytes).  As many
    strips held as fit, at most MAX_STRIPS_HELD."""
    geometry = strip_geometry(shape, source, target)
    if geometry is None:
        return None
    axis = geometry[0]
    # The fewest source chunks per strip whose frames reach MIN_FRAME_BYTES, among those that
    # cut a target chunk into whole strips.
    row = source[axis] * math.prod(target[axis + 1 :]) * itemsize
    depth = next(
        (
            d
            for d in range(1, target[axis] // source[axis] + 1)
            if target[axis] % (source[axis] * d) == 0 and d * row >= MIN_FRAME_BYTES
        ),
        None,
    )
    if depth is None:
        return None
    geometry = strip_geometry(shape, source, target, depth)
    if geometry is None:
        return None
    strip = geometry[1]
    frame = depth * row
    strip_bytes = math.prod(strip) * itemsize
    source_bytes = math.prod(source) * itemsize
    streamed = streamable_source and source_bytes >= STREAM_FROM_BYTES
    reading = SLAB_BYTES + CONTEXT_BYTES + PIECE_BYTES if streamed else 2 * source_bytes
    codec = threads * (reading + 2 * frame)
    held = min(MAX_STRIPS_HELD, (budget - codec) // strip_bytes)
    if held < 1:
        return None
    nbytes = math.prod(shape) * itemsize
    return Pass(
        "pass 1 (scatter as appended frames)",
        strip,
        source,
        target,
        nbytes,
        nbytes,
        held * strip_bytes + codec,
        threads,
        stream_reads=streamed,
        frames=int(held),
    )


def _scatter_variant(
    shape: tuple[int, ...],
    itemsize: int,
    source: tuple[int, ...],
    target: tuple[int, ...],
    budget: int,
    unit: tuple[int, ...] | None,
    stream_reads: bool,
    stream_writes: bool,
    threads: int,
) -> Pass:
    """The scatter pass with source chunks read, and target chunks written, as streams or
    not, on at most ``threads`` threads."""
    nbytes = math.prod(shape) * itemsize
    target_bytes = math.prod(unit or target) * itemsize
    source_bytes = math.prod(source) * itemsize
    workers = threads
    # A streamed source chunk is read alone, a slab at a time: no group.
    group = (
        source
        if stream_reads
        else _scatter_group(shape, itemsize, source, unit or target, budget, workers)
    )
    # A worker holds either its group, decoded (streamed: a slab of a source chunk), and the
    # step (the array pieces are gathered in before they are written, or the pages a copy
    # into the mapped buffer touches); or the buffer's pages of the target block it encodes
    # (straight from the buffer), a copy of it where it is padded (at the array's edge) or a
    # shard (zarr-python encodes a copy) -- streamed, a piece of the block read back.  Pages
    # counted as mapped may be mapped again by a worker still copying (or encoding) after
    # another let them go: hence the step and the block are its own.  And the codec's
    # buffers, kept per thread: the native codec's one (the encoded block, or a chunk's
    # stored bytes while it is decoded); streamed, its contexts and a piece of stored bytes.
    even = all(n % u == 0 for n, u in zip(shape, unit or target, strict=True))
    copies = 0 if even and unit is None else 1
    # Slots in piece order are read back whole and put in C order: two blocks, not the
    # buffer's pages (see _tiles).
    tiled = not (stream_reads or stream_writes or pieces_are_runs(group, unit or target))
    copies += 1 if tiled else 0
    group_bytes = math.prod(group) * itemsize
    if stream_reads:
        group_bytes = min(SLAB_BYTES, group_bytes)
    step_bytes = min(SCATTER_STEP_BYTES, group_bytes)
    # A group of several chunks is decoded into a stack of them first (see _scatter).
    stacked = group_bytes if not stream_reads and tuple(group) != tuple(source) else 0
    reading = group_bytes + stacked + step_bytes + (PIECE_BYTES if stream_reads else 0)
    writing = 2 * PIECE_BYTES if stream_writes else (1 + copies) * target_bytes
    sides = ((source_bytes, stream_reads), (target_bytes, stream_writes))
    native = [nbytes for nbytes, streamed in sides if not streamed]
    codec = max(native, default=0) + (CONTEXT_BYTES if stream_reads or stream_writes else 0)
    per_worker = max(reading, writing) + codec
    least_mapped = step_bytes if stream_writes else target_bytes  # the block read back
    # The mapped pages of the buffer take what the workers leave, at most SCATTER_MAP_BYTES,
    # at least what one worker maps at once.
    workers = max(1, min(workers, (budget - least_mapped) // max(per_worker, 1)))
    map_bytes = max(least_mapped, min(SCATTER_MAP_BYTES, budget - workers * per_worker))
    return Pass(
        "pass 1 (scatter)",
        group,
        source,
        target,
        nbytes,
        nbytes,
        workers * per_worker + map_bytes,
        workers,
        2 * nbytes,
        map_bytes,
        step_bytes,
        stream_reads,
        stream_writes,
        tiled,
    )


def _scatter_group(
    shape: tuple[int, ...],
    itemsize: int,
    source: tuple[int, ...],
    unit: tuple[int, ...],
    budget: int,
    workers: int,
) -> tuple[int, ...]:
    """The source chunks a scatter worker reads at once: per axis a multiple of the source
    chunk, grown (doubling) along the axes where a target block is longer, up to the target
    block, the last axis first, while the group stays within
    ``budget / SCATTER_GROUP_SHARE / workers``.

    Why: a piece of a small source chunk is a few bytes of each of many target blocks, and
    copying it touches a page of each; a group puts the pieces of several source chunks side
    by side, so a page of the scatter buffer is faulted in once per group instead of once per
    source chunk.  The last axis first: its pieces are the runs that lie contiguous in a
    target block."""
    limit = budget // SCATTER_GROUP_SHARE // max(workers, 1)
    group = list(source)
    for axis in reversed(range(len(group))):
        while True:
            wanted = min(2 * group[axis], max(unit[axis], source[axis]), max(shape[axis], 1))
            wanted = wanted // source[axis] * source[axis]
            trial = [*group[:axis], wanted, *group[axis + 1 :]]
            if wanted <= group[axis] or math.prod(trial) * itemsize > limit:
                break
            group = trial
    return tuple(group)


def grown_middle(
    shape: tuple[int, ...],
    itemsize: int,
    source: tuple[int, ...],
    target: tuple[int, ...],
    budget: int,
) -> tuple[int, ...]:
    """Intermediate chunks: per axis the smaller of source and target, then doubled along the
    axes where the source's is smaller (up to the target's) while pass 1 fits the budget, so
    the temporary store holds fewer, larger chunks."""
    middle = [min(s, t) for s, t in zip(source, target, strict=True)]
    grown = True
    while grown:
        grown = False
        for axis, (s, t) in enumerate(zip(source, target, strict=True)):
            if s >= t or middle[axis] >= t:
                continue
            trial = list(middle)
            trial[axis] = min(t, 2 * middle[axis])
            block = lcm_block(source, tuple(trial), shape)
            if BLOCK_COPIES * math.prod(block) * itemsize + math.prod(source) * itemsize > budget:
                continue
            if lcm_block(tuple(trial), target, shape) != lcm_block(tuple(middle), target, shape):
                continue  # pass 2's blocks would grow
            middle, grown = trial, True
    return tuple(middle)
