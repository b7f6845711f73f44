"""A direct pass streamed: each target chunk written from its source chunks' stored frames, or
encoded as a zstd stream while its source chunks are decoded as streams into the encoder's
input, a piece at a time.

Why: a direct pass holds a whole block twice (read, then encoded) and the encoded chunk; with
64 MiB target chunks that is about 144 MiB a thread, so a 256 MiB budget ran one thread and
the encoding on one core (merging (1, 2048, 2048) chunks four at a time: 17.8 s for 4 GiB,
against 16.4 s for rechunker holding 1.1 GiB).  Streamed, a thread holds its codec contexts
and three pieces, and every core encodes.

It applies where a target chunk is made of whole source chunks (per axis a multiple of the
source chunk) and each source chunk is one run of the target chunk's C order
(:func:`~oocarray._compute._rechunk._tiles.pieces_are_runs`): the target chunk's bytes are
then its source chunks' bytes one after the other, in the C order of their indices.  Both
stores being zstd, the target chunk's file is then by default its source chunks' zstd frames
one after the other (:func:`~oocarray._compute._rechunk._zstd_stream.copy_frames`), none
decoded or encoded: zstd decodes concatenated frames as one stream (numcodecs from 0.16.4,
zarrs and tensorstore do), and the rechunk is a copy at the disk's speed (merging four
(1, 2048, 2048) chunks at a time: 10.3 s for 4 GiB re-encoded, 3.4 s copied).  Each source
chunk is checked as it is copied, by its CRC-32C or else by decoding it.  A target chunk with
a source chunk never written, or every one with ``recompress``, is encoded as one frame;
padding at the array's edges is then carried byte for byte (a source chunk past the edge
reads as the fill value, as the array does).
"""

from __future__ import annotations

import itertools
import math
from typing import Any

import numpy as np

from oocarray._compute._rechunk._resume import Marker
from oocarray._compute._rechunk._threads import Outcome, run_blocks
from oocarray._compute._rechunk._tiles import pieces_are_runs
from oocarray._compute._rechunk._zstd_stream import (
    CONTEXT_BYTES,
    PIECE_BYTES,
    FrameReader,
    copy_frames,
    streamable,
    write_frame,
)

__all__ = ["STREAM_WORKER_BYTES", "stream_copy", "streams_directly"]

# A thread's memory: libzstd's contexts, the encoded piece, its input, and the stored bytes
# of the source chunk being decoded.
STREAM_WORKER_BYTES = CONTEXT_BYTES + 3 * PIECE_BYTES


def streams_directly(source: tuple[int, ...], target: tuple[int, ...]) -> bool:
    """Whether a direct pass from ``source`` chunks to ``target`` chunks can stream: each
    target chunk made of whole source chunks, each one run of its C order."""
    whole = all(t % s == 0 for s, t in zip(source, target, strict=True))
    return whole and pieces_are_runs(source, target)


def stream_copy(
    source: Any,
    out: Any,
    block: tuple[int, ...],
    workers: int,
    progress: bool,
    marker: Marker | None = None,
    recompress: bool = False,
) -> bool:
    """Copy the stored array ``source`` into ``out``, one streamed target chunk (``block``)
    per unit of work: its source chunks' frames copied, or with ``recompress`` encoded again;
    False, with nothing done, where either store cannot stream (a store the plan could not
    see) and the caller copies as usual."""
    src, dst = source._store, out._store
    target = tuple(dst.chunks)
    if (
        not (streamable(src) and streamable(dst))
        or np.dtype(src.dtype) != np.dtype(dst.dtype)
        or tuple(block) != target
        or not streams_directly(tuple(src.chunks), target)
    ):
        return False
    chunks = tuple(src.chunks)
    grid = [range(-(-n // t)) for n, t in zip(dst.shape, target, strict=True)]
    blocks = list(itertools.product(*grid))
    per_block = [t // c for t, c in zip(target, chunks, strict=True)]
    dtype = np.dtype(dst.dtype)
    nbytes = math.prod(target) * dtype.itemsize
    done = marker.done if marker is not None else set()

    def copy(index: int) -> Outcome[int]:
        corner = blocks[index]
        spans = zip(corner, per_block, strict=True)
        inside = list(itertools.product(*(range(b * n, (b + 1) * n) for b, n in spans)))
        if not recompress and copy_frames(src, dst, corner, inside):
            if marker is not None:
                marker.record(index)
            return [], 1
        readers = (FrameReader(src, chunk) for chunk in inside)
        reader = next(readers)
        left = src._chunk_nbytes

        def fill(start: int, piece: np.ndarray) -> None:
            nonlocal reader, left
            at = 0
            while at < piece.nbytes:
                if left == 0:
                    reader.finish()
                    reader, left = next(readers), src._chunk_nbytes
                take = min(left, piece.nbytes - at)
                # In the dtype (every offset is a multiple of its size): a chunk never written
                # reads as the fill value.
                reader.read_into(piece[at : at + take].view(dtype))
                at += take
                left -= take

        try:
            write_frame(dst, corner, nbytes, fill)
            reader.finish()
        finally:
            reader.close()
        if marker is not None:
            marker.record(index)  # only once the chunk is whole on disk
        return [], 1

    run_blocks(
        (i for i in range(len(blocks)) if i not in done),
        copy,
        workers,
        total=len(blocks),
        initial=len(done),
        desc=f"rechunk pass 1 (direct, {'streamed' if recompress else 'frames copied'})",
        progress=progress,
    )
    return True
