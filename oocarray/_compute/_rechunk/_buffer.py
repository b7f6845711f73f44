"""The scatter buffer: a raw temporary file with a slot per target block, written with
``pwrite`` or through a shared mapping, read back with ``pread`` (see _scatter for why)."""

from __future__ import annotations

import contextlib
import math
import mmap
import os
import threading
from typing import Any

import numpy as np

from oocarray import _native
from oocarray._compute._limits import outgrows_page_cache
from oocarray._compute._scratch_file import ScratchFile
from oocarray._storage._zarr._chunk_files import as_encodable

__all__ = ["PAGE", "ScatterBuffer", "copy_runs", "flat_index"]

PAGE = mmap.PAGESIZE


def copy_runs(dst: np.ndarray, src: np.ndarray) -> None:
    """``dst[...] = src`` natively (see ``_native.copy_runs``: short rows copied faster than
    NumPy does), for any dtype: datetimes and timedeltas as the integers they are, since they
    export no buffer."""
    _native.copy_runs(as_encodable(dst), as_encodable(src))


def flat_index(block: tuple[int, ...], grid: tuple[int, ...]) -> int:
    """A block's index in C order of ``grid``: its slot's number."""
    index = 0
    for b, n in zip(block, grid, strict=True):
        index = index * n + b
    return index


class ScatterBuffer:
    """The scatter buffer: an array of shape ``grid + unit``, a slot per target block."""

    def __init__(
        self, grid: tuple[int, ...], unit: tuple[int, ...], dtype: np.dtype[Any], map_bytes: int
    ):
        slot = math.prod(unit) * dtype.itemsize
        self.slot_bytes = slot
        # Slots written and not yet freed, and the thread that frees them (see release).
        self._to_free: list[int] = []
        self._freeing = threading.Condition()
        self._freer: threading.Thread | None = None
        self._punching = False
        self._closing = False  # closed, or holes cannot be punched: no more freeing
        self._file = ScratchFile()
        size = max(slot * math.prod(grid), 1)
        try:
            os.posix_fallocate(self._file.fd, 0, size)
            self._map = mmap.mmap(self._file.fd, size)
            # Without it a fault maps the whole (large) folio around a touched page, so a few
            # bytes copied into each of many slots would map most of the file.
            self._map.madvise(mmap.MADV_RANDOM)
        except BaseException:
            self.close()
            raise
        count = math.prod(grid) * math.prod(unit)
        self.array = np.frombuffer(self._map, dtype=dtype, count=count).reshape(grid + unit)
        self.grid = grid
        self._map_bytes = max(map_bytes, slot)
        self._touched = 0
        self._lock = threading.Lock()
        # One write into the file at a time: the file system serialises them anyway (ext4 holds
        # the file's lock for the copy), and a thread waiting there spins on a core, where one
        # waiting here sleeps and leaves the core to a thread decoding (series -> time at 4 GiB:
        # 6% of the scatter's CPU time spun, 1 s of 16 s).
        self._writing = threading.Lock()
        # Slots are freed once written where the buffer takes a fair share of the memory
        # available: their pages then make room for others (else taken from the page cache,
        # our own dirty pages included, which are written to disk first).  A small buffer's
        # are freed at once when it is closed: freeing slot by slot costs about three times
        # the pread of the slot (0.13 s per 256 MiB here).
        self._free_slots = outgrows_page_cache(size)

    def write_at(self, offset: int, values: np.ndarray) -> None:
        """Write a C-contiguous array's bytes at byte ``offset`` of the buffer."""
        view = memoryview(as_encodable(values)).cast("B")  # type: ignore[arg-type]
        with self._writing:
            while view:
                written = os.pwrite(self._file.fd, view, offset)
                view, offset = view[written:], offset + written

    def write_pieces(self, offsets: np.ndarray, pieces: np.ndarray) -> None:
        """Write a C-contiguous array's pieces along its first axis, piece ``j`` at byte
        ``offsets[j]`` (int64), in one call that holds no GIL."""
        if len(offsets):
            with self._writing:
                _native.pwrite_pieces(self._file.fd, as_encodable(pieces), offsets)

    def slot_at(self, block: tuple[int, ...]) -> int:
        """The first byte of a target block's slot."""
        return flat_index(block, self.grid) * self.slot_bytes

    def read_at(self, offset: int, out: np.ndarray) -> None:
        """Fill a C-contiguous array with the buffer's bytes from byte ``offset`` on."""
        view = memoryview(as_encodable(out)).cast("B")  # type: ignore[arg-type]
        while view:
            got = os.preadv(self._file.fd, [view], offset)
            if got <= 0:
                raise OSError(f"the scatter buffer ended at byte {offset}")
            view, offset = view[got:], offset + got

    def touched(self, nbytes: int) -> None:
        """Count pages touched; past ``map_bytes``, give the mapped pages back."""
        with self._lock:
            self._touched += nbytes
            if self._touched <= self._map_bytes:
                return
            self._touched = 0
        self._map.madvise(mmap.MADV_DONTNEED)

    def will_read(self, flat: int) -> None:
        """Start reading slot ``flat`` from the file where it is not in the page cache, in
        large requests: the mapping's faults (random access advised, see above) would read it
        a page at a time, which under a hard memory limit (the slots written back to disk)
        made the read-back of time -> series at 4 GiB a million 4 KiB reads.

        A slot whose first and last pages are cached is taken as cached (slots are written
        and evicted whole, near enough): the kernel's readahead waits for the file's lock,
        which a hole punched (see release) holds while the disk discards it, and in time ->
        series at 4 GiB that was about 1.2 s of each worker's time."""
        start = flat * self.slot_bytes
        if self._cached(start) and self._cached(start + self.slot_bytes - 1):
            return
        with contextlib.suppress(OSError):
            os.posix_fadvise(self._file.fd, start, self.slot_bytes, os.POSIX_FADV_WILLNEED)

    def _cached(self, offset: int) -> bool:
        """Whether the page holding byte ``offset`` is in the page cache (read without
        waiting: a page that is not fails at once).  A page that is not has its readahead
        started by the asking, in one request of up to the disk's readahead size; wanted here,
        as the slot is read next (under a hard memory limit, series to time at 4 GiB wrote
        its blocks in 10.3-10.4 s this way, 11.3-11.8 s asking with ``mincore``, which starts
        nothing)."""
        try:
            return os.preadv(self._file.fd, [bytearray(1)], offset, os.RWF_NOWAIT) == 1
        except OSError:  # BlockingIOError where it is not; no RWF_NOWAIT: take it as not
            return False

    def release(self, flat: int) -> None:
        """Free slot ``flat`` (its target block is written, it is never read again): its pages,
        dirty or not, leave the page cache and the file without being written to disk.

        Why: a scatter buffer the size of the data is otherwise written back by the kernel
        (once dirty pages pass its limits, the copies into the buffer wait for the disk),
        though each byte is read back once and then never needed.  A thread of the buffer's
        own punches the holes, slots next to each other at once: a file system mounted with
        ``discard`` waits for the disk on each punch (time -> series at 4 GiB: 3-3.5 s
        of the workers' time, in 1024 punches of 4 MiB)."""
        if self.slot_bytes % PAGE or not self._free_slots:
            return  # a slot's first and last pages are shared with its neighbours
        with self._freeing:
            if self._closing:
                return
            self._to_free.append(flat)
            if self._freer is None:
                self._freer = threading.Thread(
                    target=self._free_loop, name="oocarray-scatter-free", daemon=True
                )
                self._freer.start()
            self._freeing.notify()

    def _free_loop(self) -> None:
        while True:
            with self._freeing:
                while not self._to_free and not self._closing:
                    self._freeing.wait()
                if self._closing:
                    return
                slots = sorted(self._to_free)
                self._to_free.clear()
                self._punching = True
            try:
                self._punch(slots)
                stop = False
            except OSError:  # a file system that cannot punch holes: nothing more to do
                stop = True
            with self._freeing:
                self._punching = False
                self._closing = self._closing or stop
                self._freeing.notify_all()

    def _punch(self, slots: list[int]) -> None:
        """Punch the holes of ``slots`` (sorted), a run of neighbours at once."""
        first = last = slots[0]
        for flat in [*slots[1:], None]:
            if flat is not None and flat == last + 1:
                last = flat
                continue
            nbytes = (last + 1 - first) * self.slot_bytes
            _native.punch_hole(self._file.fd, first * self.slot_bytes, nbytes)
            if flat is not None:
                first = last = flat

    def wait_freed(self) -> None:
        """Wait until every slot released so far is freed (or freeing stopped)."""
        with self._freeing:
            while (self._to_free or self._punching) and not self._closing:
                self._freeing.wait()

    def close(self) -> None:
        with self._freeing:
            self._closing = True  # slots not yet freed go with the file
            self._freeing.notify_all()
        if self._freer is not None:
            self._freer.join()
        if hasattr(self, "array"):
            del self.array
        if hasattr(self, "_map"):
            # A traceback may still hold a view: then the collector unmaps it.
            with contextlib.suppress(BufferError):
                self._map.close()
        self._file.close()
