"""Sorted runs of an external merge sort, spilled to a scratch file, and the merge's readers
of them: each run's buffered head, refilled a buffer at a time.

A first level's runs are stored compressed, in blocks of the merge's buffer, with the cheaper
of two codecs for the run; a merge level's runs (and argsort's indices) raw, at their flat
positions.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

from oocarray._compute._scratch_file import ScratchFile

__all__ = ["RunReader", "Runs", "run_codecs"]

# A run's blocks are stored with plain LZ4 when its first compresses at least this much.
REPEATS_MIN_RATIO = 4


class Runs:
    """Sorted runs spilled to a scratch file, and argsort's indices beside them.

    Raw, every run's items ``[start, stop)`` lie at their flat positions (a merge level writes
    them so).  With ``block`` (values only: a first level's runs), each run is stored as
    blocks of ``block`` items from its start, each compressed on its own with a cheap codec
    and appended to the file; a merge reads a run a block at a time, so a block is decoded
    whole.  A run's first block chooses its codec: plain LZ4 where it compresses well (sorted
    values that repeat: long matches, encoded and decoded at memory speed), else Blosc LZ4
    with byte shuffle (sorted values share their high bytes: 3x on full-precision floats,
    where plain LZ4 gains nothing)."""

    def __init__(self, size: int, dtype: np.dtype[Any], arg: bool, block: int = 0) -> None:
        self.scratch = ScratchFile()
        self.size, self.dtype, self.arg = size, dtype, arg
        self.indices_at = size * dtype.itemsize
        self.block = block if not arg else 0
        # Compressed: each block's (offset, bytes, codec) by its first item; the file's end.
        self.blocks: dict[int, tuple[int, int, Any]] = {}
        self.end = 0
        self.lock = threading.Lock()
        self.codecs = run_codecs() if self.block else None

    def write(self, at: int, values: np.ndarray, indices: np.ndarray | None) -> None:
        """Stores the sorted ``values`` of a run from flat position ``at`` (and argsort's
        ``indices``); safe from several threads at once."""
        if self.codecs is None:
            self.scratch.write(at * self.dtype.itemsize, values)
            if indices is not None:
                self.scratch.write(self.indices_at + at * indices.itemsize, indices)
            return
        repeats, shuffled = self.codecs
        codec = repeats
        for first in range(0, len(values), self.block):
            block = values[first : first + self.block]
            encoded = codec.encode(block)
            if first == 0 and len(encoded) * REPEATS_MIN_RATIO > block.nbytes:
                codec = shuffled
                encoded = codec.encode(block)
            with self.lock:
                offset, self.end = self.end, self.end + len(encoded)
                self.blocks[at + first] = (offset, len(encoded), codec)
            self.scratch.write(offset, np.frombuffer(encoded, np.uint8))

    def read_into(self, at: int, values: np.ndarray, indices: np.ndarray | None) -> None:
        """Fills ``values`` (and ``indices``) with the items from ``at``: a block's first
        item and its length, where blocks are compressed."""
        if self.codecs is None:
            self.scratch.read_into(at * self.dtype.itemsize, values)
            if indices is not None:
                self.scratch.read_into(self.indices_at + at * indices.itemsize, indices)
            return
        offset, nbytes, codec = self.blocks[at]
        encoded = np.empty(nbytes, np.uint8)
        self.scratch.read_into(offset, encoded)
        codec.decode(encoded, out=values)

    def close(self) -> None:
        """Frees the scratch file's space."""
        self.scratch.close()


def run_codecs() -> tuple[Any, Any]:
    """Plain LZ4 and Blosc LZ4 with byte shuffle (numcodecs, installed with zarr)."""
    from numcodecs import LZ4, Blosc

    return LZ4(acceleration=1), Blosc(cname="lz4", clevel=1, shuffle=Blosc.SHUFFLE, blocksize=0)


class RunReader:
    """A run's buffered head, refilled a buffer at a time from the runs' scratch file.

    The head lives in one buffer of two reads, made once: a refill moves what is left to its
    front and reads the next buffer right after it (a fresh array per refill would be fresh
    pages, zeroed by the kernel, every time).  What :meth:`take` gives are views of it, valid
    until the next :meth:`fill` (the merge copies them out before it refills)."""

    def __init__(self, runs: Runs, start: int, stop: int, chunk: int) -> None:
        self.runs = runs
        self.position, self.stop, self.chunk = start, stop, chunk
        capacity = min(2 * chunk, stop - start)
        self.value_buffer = np.empty(capacity, runs.dtype)
        self.index_buffer = np.empty(capacity, np.intp) if runs.arg else None
        self.values = self.value_buffer[:0]
        self.indices = None if self.index_buffer is None else self.index_buffer[:0]
        self.fill()

    @property
    def exhausted(self) -> bool:
        return self.position >= self.stop

    def fill(self) -> None:
        """Reads the run's next buffer after the head, when less than a buffer is left."""
        if self.exhausted or len(self.values) >= self.chunk:
            return
        count = min(self.chunk, self.stop - self.position)
        kept = len(self.values)
        # What is left of the head moves to the front (NumPy's copies are right where source
        # and destination overlap), the next read right after it.
        values = self.value_buffer[: kept + count]
        values[:kept] = self.values
        indices = None
        if self.index_buffer is not None and self.indices is not None:
            indices = self.index_buffer[: kept + count]
            indices[:kept] = self.indices
        self.runs.read_into(
            self.position, values[kept:], None if indices is None else indices[kept:]
        )
        self.values, self.indices = values, indices
        self.position += count

    def take(self, count: int) -> tuple[np.ndarray, np.ndarray | None]:
        """The head's first ``count`` values (and indices), as views; the head goes past them."""
        values, self.values = self.values[:count], self.values[count:]
        if self.indices is None:
            return values, None
        indices, self.indices = self.indices[:count], self.indices[count:]
        return values, indices
