"""The scatter pass without a scatter buffer: target chunks written as zstd frames, appended
strip by strip to their files.

A complete transposition (series -> time: (T, 64, 64) chunks to (1, Y, X)) gives each target
chunk a piece of every source chunk, so the raw scatter buffer (see _scatter) holds the whole
array before the first target chunk is whole: every byte copied into the page cache, read
back and put in order before it is encoded.  But a target chunk whose leading axes are one
element long is, in C order, runs of whole rows along its first longer axis (its ``axis``):
the rows that one row of source chunks along that axis holds, a *strip* of source chunks
(whole along the later axes) supplies one contiguous run of every target chunk it touches.
zstd decodes concatenated frames as one stream (as zarr-python, zarrs and tensorstore do), so
each run is encoded as a frame of its own and appended to its target chunk's file, strip
after strip in order: the partial target chunks live encoded, in their own files, and no byte
is written twice.  A strip's source chunks are decoded, and its frames encoded, on the pass's
threads; the frames of the next strip wait until the last ones are appended (their order is
the chunk's), and with two strips held the next one is decoded meanwhile.  zarr's crc32c
codec's checksum goes at the end, the CRC-32C extended over each frame as it is written
(``_native.zstd_append_frames``: a job's frames, neighbouring target chunks, in one call).

A target chunk's file is written beside its place under a name of its own and renamed there
with its last frame: readers see no chunk or a whole one, and a rerun (after kill -9) starts
the files it did not finish anew.  The plan (``_passes.frames_pass``) counts the strips held
and the codec's buffers.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import os
import threading
from collections.abc import Iterator
from typing import Any, cast

import numpy as np

from oocarray._compute._rechunk._buffer import copy_runs, flat_index
from oocarray._compute._rechunk._passes import SLAB_BYTES, Pass, slabs, strip_geometry
from oocarray._compute._rechunk._resume import Marker
from oocarray._compute._rechunk._threads import Outcome, run_blocks
from oocarray._compute._rechunk._zstd_stream import FrameReader, streamable
from oocarray._storage._indexing import ChunkPiece, parse_key
from oocarray._storage._zarr._chunk_files import as_encodable, new_file_mode

__all__ = ["PARTIAL_PREFIX", "append_frames", "remove_partials"]

# A block of work: ("read", strip, source chunk's piece) or ("encode", strip, target block).
Job = tuple[Any, ...]


PARTIAL_PREFIX = ".tmp-frames-"


def _partial_path(chunk_path: str) -> str:
    """Where a target chunk's frames are appended until it is whole: beside it, one name per
    chunk, so that a rerun replaces what a killed run left."""
    directory, name = os.path.split(chunk_path)
    return os.path.join(directory, f"{PARTIAL_PREFIX}{name}")


def remove_partials(root: str) -> None:
    """Remove the files of chunks a frames pass began and did not finish under ``root`` (an
    output array's directory, once every chunk of it is whole)."""
    for directory, _, names in os.walk(root):
        for name in names:
            if name.startswith(PARTIAL_PREFIX):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(os.path.join(directory, name))


class _Strips:
    """The strips of source chunks of a pass, in C order, and the target blocks each feeds."""

    def __init__(self, shape: tuple[int, ...], unit: tuple[int, ...], work: Pass) -> None:
        geometry = strip_geometry(shape, work.source_chunks, unit)
        assert geometry is not None
        self.axis, self.extent = geometry[0], tuple(work.block)  # a strip may be deeper
        self.shape, self.unit = shape, unit
        self.grid = tuple(-(-n // u) for n, u in zip(shape, unit, strict=True))
        counts = [-(-n // e) for n, e in zip(shape, self.extent, strict=True)]
        self.corners = list(itertools.product(*(range(c) for c in counts)))

    def region(self, strip: int) -> tuple[slice, ...]:
        """The array's elements a strip holds."""
        return tuple(
            slice(c * e, min(n, (c + 1) * e))
            for c, e, n in zip(self.corners[strip], self.extent, self.shape, strict=True)
        )

    def targets(self, strip: int) -> list[tuple[int, ...]]:
        """The target blocks a strip gives a frame."""
        ranges = [
            range(r.start // u, -(-r.stop // u))
            for r, u in zip(self.region(strip), self.unit, strict=True)
        ]
        return list(itertools.product(*ranges))

    def frame(self, strip: int, block: tuple[int, ...], held: np.ndarray) -> np.ndarray:
        """A target block's run in the strip buffer ``held``: one element along the axes
        before the strip's axis, the strip's rows along it, the block (padded) after it."""
        region = self.region(strip)
        k = self.axis
        where = [
            slice(b - r.start, b - r.start + 1) for b, r in zip(block[:k], region[:k], strict=True)
        ]
        where.append(slice(0, region[k].stop - region[k].start))
        for b, r, u in zip(block[k + 1 :], region[k + 1 :], self.unit[k + 1 :], strict=True):
            where.append(slice(b * u - r.start, (b + 1) * u - r.start))
        return held[tuple(where)]

    def frames(self, strip: int, blocks: list[tuple[int, ...]], held: np.ndarray) -> np.ndarray:
        """The runs of ``blocks`` (neighbours along the last axis, after the strip's axis, in
        order) as one array, a frame per index of its first axis: each block's run is the
        one before it moved along the last axis by a target chunk."""
        first = self.frame(strip, blocks[0], held)
        step = self.unit[-1] * held.strides[-1]
        return np.lib.stride_tricks.as_strided(
            first, (len(blocks), *first.shape), (step, *first.strides), writeable=False
        )

    def last_for(self, strip: int, block: tuple[int, ...]) -> bool:
        """Whether ``strip`` gives ``block`` its last frame (the strip reaches the block's end
        along the strip's axis, or the array's)."""
        k = self.axis
        end = min(self.shape[k], (block[k] + 1) * self.unit[k])
        return bool(self.region(strip)[k].stop >= end)

    def padding_rows(self, block: tuple[int, ...]) -> int:
        """Rows of fill value after the last frame of a block at the array's end."""
        k = self.axis
        return max(0, (block[k] + 1) * self.unit[k] - self.shape[k])


# A job appends the frames of neighbouring target chunks in one native call (see
# _native.zstd_append_frames) up to this many bytes of frames: a call from Python per frame
# cost tens of microseconds, a quarter of the work of a 128 KiB frame.
GROUP_BYTES = 1 << 20
# And at most this many (a file open for each while the call runs: small frames must not
# reach the process's limit of open files).
GROUP_FILES = 64
# And each strip's frames make at least this many jobs per thread, to keep every thread busy.
JOBS_PER_THREAD = 4


def _groups(
    blocks: list[tuple[int, ...]], strips: _Strips, threads: int, itemsize: int
) -> list[list[tuple[int, ...]]]:
    """``blocks`` (a strip's, in C order) cut into runs of neighbours along the last axis whose
    frames one strided array holds (see _Strips.frames), of at most GROUP_BYTES of frames and
    GROUP_FILES frames (at least one) and few enough to make JOBS_PER_THREAD jobs per thread;
    one block per run where the last axis is the strip's."""
    k = strips.axis
    if k == len(strips.unit) - 1:
        return [[b] for b in blocks]
    frame = strips.extent[k] * math.prod(strips.unit[k + 1 :]) * itemsize
    spread = -(-len(blocks) // (JOBS_PER_THREAD * max(1, threads)))
    most = max(1, min(GROUP_BYTES // frame, GROUP_FILES, spread))
    groups: list[list[tuple[int, ...]]] = []
    for block in blocks:
        last = groups[-1][-1] if groups else None
        if (
            last is not None
            and len(groups[-1]) < most
            and last[:-1] == block[:-1]
            and last[-1] + 1 == block[-1]
        ):
            groups[-1].append(block)
        else:
            groups.append([block])
    return groups


def append_frames(
    source: Any, out: Any, work: Pass, progress: bool, marker: Marker | None = None
) -> bool:
    """Run a frames pass from the stored array ``source`` into ``out``; False, with nothing
    written, where ``out``'s chunks are not local zstd chunk files stored in its dtype."""
    src, dst = source._store, out._store
    if not streamable(dst) or dst._zstd_writer is None:
        return False
    shape = tuple(src.shape)
    unit = tuple(dst.chunks)
    strips = _Strips(shape, unit, work)
    layout = dst._layout
    writer = dst._zstd_writer
    dtype = np.dtype(dst.dtype)
    fill = np.asarray(dst.fill_value, dtype=dtype)
    done = marker.done if marker is not None else set()
    needed = [
        s
        for s in range(len(strips.corners))
        if any(flat_index(b, strips.grid) not in done for b in strips.targets(s))
    ]
    depth = max(1, work.frames)
    lock = threading.Lock()
    buffers: list[np.ndarray | None] = [None] * depth
    reads_left: dict[int, int] = {}
    encodes_left: dict[int, int] = {}
    decoded: set[int] = set()
    encoded: set[int] = set()
    crcs: dict[tuple[int, ...], int] = {}
    partial: dict[tuple[int, ...], str] = {}  # the files of blocks begun and not yet whole
    per_thread = threading.local()

    def held(position: int) -> np.ndarray:
        """The strip buffer of the ``position``-th needed strip (made on first use, in the
        caller's manager: the threads run in its context; once, as several threads read
        into it)."""
        slot = position % depth
        with lock:
            flat = buffers[slot]
            if flat is None:
                flat = buffers[slot] = np.empty(math.prod(strips.extent), dtype=dtype)
        return flat.reshape(strips.extent)

    source_chunk = tuple(src.chunks)
    whole = tuple(slice(0, c) for c in source_chunk)
    # Large source chunks decoded as streams where the plan counted on it and the store
    # allows (else whole, as the plan would have counted: see _passes.frames_pass).
    stream_reads = work.stream_reads and streamable(src)
    itemsize = np.dtype(src.dtype).itemsize
    chunk_slabs = slabs(source_chunk, itemsize, SLAB_BYTES) if stream_reads else []

    def reads_of(position: int) -> list[Job]:
        """A job per source chunk of a strip (lock held)."""
        region = strips.region(needed[position])
        pieces = list(parse_key(region, shape, source_chunk).pieces())
        reads_left[position] = len(pieces)
        return [("read", position, piece) for piece in pieces]

    def slab_array(slab: tuple[slice, ...]) -> np.ndarray:
        """This thread's array a slab is decoded into (made once per pass)."""
        flat = getattr(per_thread, "slab", None)
        if flat is None:
            largest = max(math.prod(s.stop - s.start for s in each) for each in chunk_slabs)
            flat = per_thread.slab = np.empty(largest, dtype=src.dtype)
        shape = [s.stop - s.start for s in slab]
        return flat[: math.prod(shape)].reshape(shape)

    def read_streamed(piece: ChunkPiece, inside: np.ndarray) -> None:
        """Decode a large source chunk a slab at a time, each slab's part of the piece put
        into the strip before the next (the codec's buffers for a whole chunk are not
        needed): a slab the piece holds whole, where the strip holds it in C order, decoded
        in place; any other through this thread's slab array."""
        # A strip's region gives slices: the piece's place in the chunk and in the strip.
        local = cast(tuple[slice, ...], piece.local)
        out = cast(tuple[slice, ...], piece.out)
        reader = FrameReader(src, piece.chunk)
        try:
            for slab in chunk_slabs:
                # The slab's part of the piece (chunk coordinates), and where it goes.
                have = [
                    (max(s.start, p.start), min(s.stop, p.stop))
                    for s, p in zip(slab, local, strict=True)
                ]
                if not all(start < stop for start, stop in have):
                    reader.read_into(slab_array(slab))  # decoded past, none of it wanted
                    continue
                place = inside[
                    tuple(
                        slice(o.start + a - p.start, o.start + b - p.start)
                        for (a, b), p, o in zip(have, local, out, strict=True)
                    )
                ]
                if have == [(s.start, s.stop) for s in slab] and place.flags.c_contiguous:
                    reader.read_into(place)
                    continue
                data = slab_array(slab)
                reader.read_into(data)
                got = tuple(
                    slice(a - s.start, b - s.start) for (a, b), s in zip(have, slab, strict=True)
                )
                copy_runs(place, data[got])
            reader.finish()
        finally:
            reader.close()

    def read(position: int, piece: ChunkPiece) -> Outcome[Job]:
        region = strips.region(needed[position])
        buffer = held(position)
        inside = buffer[tuple(slice(0, r.stop - r.start) for r in region)]
        if stream_reads:
            read_streamed(piece, inside)
        elif piece.covers_chunk and inside[piece.out].shape == source_chunk:
            # Decoded whole into this thread's array (made once per pass), then put in
            # place: into the strip it lands strided, which the store would decode into a
            # fresh scratch buffer first, its pages faulted in at every read.
            chunk = getattr(per_thread, "chunk", None)
            if chunk is None:
                chunk = per_thread.chunk = np.empty(source_chunk, dtype=src.dtype)
            src.read_into([ChunkPiece(piece.chunk, piece.local, whole, True)], chunk)
            copy_runs(inside[piece.out], chunk)
        else:
            src.read_into([piece], inside)
        with lock:
            reads_left[position] -= 1
            if reads_left[position]:
                return [], 0
        # Past the array's edge along the later axes: the fill value, as the chunk pads.
        for axis in range(strips.axis + 1, len(shape)):
            width = region[axis].stop - region[axis].start
            if width < strips.extent[axis]:
                buffer[(slice(None),) * axis + (slice(width, None),)] = fill
        with lock:
            decoded.add(position)
            return encodes_of(position), 0

    def encodes_of(position: int) -> list[Job]:
        """The encodes of a decoded strip once the one before is appended (lock held)."""
        if position not in decoded or (position > 0 and position - 1 not in encoded):
            return []
        blocks = [
            b for b in strips.targets(needed[position]) if flat_index(b, strips.grid) not in done
        ]
        encodes_left[position] = len(blocks)
        return [
            ("encode", position, group)
            for group in _groups(blocks, strips, work.workers, dtype.itemsize)
        ]

    def scratch(frames: np.ndarray) -> np.ndarray:
        """This thread's array a frame is gathered in (made once per pass, grown as needed)."""
        nbytes = frames[0].nbytes
        flat = getattr(per_thread, "frame", None)
        if flat is None or flat.nbytes < nbytes:
            flat = per_thread.frame = np.empty(nbytes, dtype=np.uint8)
        return flat

    def open_partial(path: str, first: bool) -> int:
        if first:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)  # what a killed run left
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
            os.fchmod(fd, new_file_mode())
            return fd
        return os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC)

    def append(paths: list[str], firsts: list[bool], frames: np.ndarray, crc: np.ndarray) -> None:
        """Append ``frames[j]`` to ``paths[j]`` (begun anew where ``firsts[j]``), extending
        ``crc[j]``: one native call for all of them."""
        fds = np.empty(len(paths), dtype=np.int64)
        opened = 0
        try:
            for path, first in zip(paths, firsts, strict=True):
                fds[opened] = open_partial(path, first)
                opened += 1
            writer.append_frames(fds, as_encodable(frames), crc, scratch(frames))
        finally:
            for fd in fds[:opened]:
                os.close(int(fd))

    def finish(path: str, chunk_path: str, block: tuple[int, ...], crc: np.ndarray) -> None:
        """Fill rows past the array's end, a frame's rows at a time (the plan counts a frame,
        and the padding may be most of a target chunk); the CRC-32C; the file in its place."""
        k = strips.axis
        rows, step = strips.padding_rows(block), strips.extent[k]
        for done_rows in range(0, rows, step):
            pad = np.full((1, min(step, rows - done_rows), *unit[k + 1 :]), fill, dtype=dtype)
            append([path], [False], pad, crc)
        if layout is not None and layout.crc32c:
            with open(path, "ab") as f:
                f.write(int(crc[0]).to_bytes(4, "little"))
        os.replace(path, chunk_path)
        if marker is not None:
            marker.record(flat_index(block, strips.grid))

    def encode(position: int, blocks: list[tuple[int, ...]]) -> Outcome[Job]:
        strip = needed[position]
        chunk_paths = [dst._chunk_path(block) for block in blocks]
        crc = np.empty(len(blocks), dtype=np.uint32)
        paths, firsts = [], []
        with lock:
            for j, (block, chunk_path) in enumerate(zip(blocks, chunk_paths, strict=True)):
                path = partial.get(block)
                firsts.append(path is None)
                if path is None:
                    os.makedirs(os.path.dirname(chunk_path), exist_ok=True)
                    path = partial[block] = _partial_path(chunk_path)
                paths.append(path)
                crc[j] = crcs.get(block, 0)
        append(paths, firsts, strips.frames(strip, blocks, held(position)), crc)
        whole = [strips.last_for(strip, block) for block in blocks]
        for j, block in enumerate(blocks):
            if whole[j]:
                finish(paths[j], chunk_paths[j], block, crc[j : j + 1])
        units = sum(whole)
        follow: list[Job] = []
        with lock:
            for j, block in enumerate(blocks):
                if whole[j]:
                    partial.pop(block, None)
                    crcs.pop(block, None)
                else:
                    crcs[block] = int(crc[j])
            encodes_left[position] -= len(blocks)
            if encodes_left[position] == 0:
                encoded.add(position)
                # The strip's buffer is free: the strip that takes it next is read.
                if position + depth < len(needed):
                    follow.extend(reads_of(position + depth))
                follow.extend(encodes_of(position + 1))
        return follow, units

    def run(job: Job) -> Outcome[Job]:
        return read(job[1], job[2]) if job[0] == "read" else encode(job[1], job[2])

    def first_reads() -> Iterator[Job]:
        for position in range(min(depth, len(needed))):
            with lock:
                jobs = reads_of(position)
            yield from jobs

    try:
        run_blocks(
            first_reads(),
            run,
            work.workers,
            total=math.prod(strips.grid),
            initial=len(done),
            desc=f"rechunk {work.name}",
            progress=progress,
        )
    finally:
        for path in partial.values():  # interrupted or failed: no partial chunk left
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
    return True
