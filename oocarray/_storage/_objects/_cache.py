"""A local, on-disk cache of chunk objects fetched from object stores.

Repeated passes over an array in S3, GCS, Azure or over HTTP (training epochs, notebook re-runs)
fetch the same objects again and again.  With ``cache=`` the fetched objects are kept in a local
directory, each with the version (ETag or object version) it had: the caller revalidates that
version with the store (``If-None-Match``) and reads the bytes from here when it still holds.
The cache is only an optimisation, so a full disk or a read-only directory never raises from
:meth:`ChunkCache.store`, and a damaged file is a miss, never wrong data.

Layout of the directory::

    lock                  flock'ed around every change of the set of entries; holds the total
    tmp/                  entries being written, renamed into place once whole
    ab/cd/abcd...(64 hex) one file per entry, named by the SHA-256 of (namespace, key)

An entry file is a header (magic, format version, length of the version string, payload length,
CRC-32C of the version string and payload), the version string (UTF-8), then the payload.
:meth:`ChunkCache.lookup` checks the lengths against the file's size, :meth:`ChunkCache.read` the
checksum against the bytes it read; a file that fails is removed and the running total recounted
(its size may have changed behind the cache's back).  :meth:`ChunkCache.open_version` hands the
entry over as an open :class:`~oocarray._storage._reader.CheckedFile` instead: the native reader
checks the checksum as it reads the payload to decode it, and a payload that fails is fetched
anew, never decoded (a chunk that ends in zarr's own CRC-32C is checked both ways in one pass
over its bytes: the entry's checksum is combined from the chunk's).

Several processes may share one directory (DataLoader workers, several notebooks):

- an entry is written to ``tmp/`` and renamed into place, so a reader opens either the whole old
  file or the whole new one; a read opens the file once and reads it all from that descriptor,
  so an entry replaced or evicted meanwhile still reads whole (the old inode lives on);
- renames, evictions, discards and removals of damaged files happen under ``flock`` on
  ``lock``, which keeps the running total exact among processes that use this class;
- nothing is kept open or locked between calls, and no thread is started: the cache is fork-safe
  and each call opens (and closes) its own lock descriptor, so threads exclude each other too.

Recency is the file's mtime, set explicitly (nanoseconds) when an entry is written and when it
is read; eviction removes the oldest first (ties broken by name).

Accounting: ``lock`` holds ``"<total bytes> <stores since the last scan>"``.  A store adds its
file's size less that of the entry it replaces; a discard subtracts.  The directory is walked
only when the total is missing or unreadable, every :data:`RESCAN_EVERY` stores (to correct for
files removed or added by other means, or a process killed between a rename and the update), and
when the total exceeds ``max_bytes``: that walk lists the entries for eviction and gives the
exact total.  Eviction goes down to ``low_water * max_bytes`` (90% by default) so that a full
cache walks its directory once per tenth of its size stored rather than on every store.  Sizes
are those of the entry files (headers included); a process killed while writing leaves a file
in ``tmp/`` that a walk removes once it is an hour old.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import logging
import os
import secrets
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

import google_crc32c
import numpy as np

from oocarray._storage._objects._cache_files import (
    FORMAT,
    HEADER,
    MAGIC,
    MAX_VERSION_BYTES,
    CacheFile,
    Header,
    as_bytes,
    checksum,
    entry_files,
    load_state,
    open_quietly,
    read_header,
    read_into,
    save_state,
    size_or_zero,
    subdirectories,
    touch,
    unlink_quietly,
    write_all,
)
from oocarray._storage._reader import CheckedFile

if TYPE_CHECKING:
    from typing_extensions import Buffer  # collections.abc.Buffer from Python 3.12

__all__ = ["RESCAN_EVERY", "CachedChunk", "ChunkCache"]

_log = logging.getLogger("oocarray.cache")
_T = TypeVar("_T")

RESCAN_EVERY = 1000  # stores between walks that correct the running total
_STALE_TEMP_NS = 3600 * 10**9  # a temp file this old belongs to a process that died writing it


@dataclass(frozen=True, slots=True)
class CachedChunk:
    """An entry found by :meth:`ChunkCache.lookup`: the version it was stored at, the payload's
    length and the file holding it."""

    version: str
    nbytes: int
    path: str


class ChunkCache:
    """Chunk objects kept in ``directory``, at most ``max_bytes`` of entry files (0: none kept).

    Eviction removes least recently used entries down to ``low_water * max_bytes``.  Processes
    that share a directory with different limits each evict to their own on their stores."""

    def __init__(
        self, directory: str | os.PathLike[str], max_bytes: int, *, low_water: float = 0.9
    ) -> None:
        if not isinstance(directory, (str, os.PathLike)):
            raise TypeError(f"directory: a path, not {type(directory).__name__}")
        path = os.fspath(directory)
        if not isinstance(path, str):
            raise TypeError("directory: a str path, not bytes")
        if not path:
            raise ValueError("directory: an empty path")
        if isinstance(max_bytes, bool) or not isinstance(max_bytes, int):
            raise TypeError(f"max_bytes: an int, not {type(max_bytes).__name__}")
        if max_bytes < 0:
            raise ValueError(f"max_bytes: at least 0, not {max_bytes}")
        if isinstance(low_water, bool) or not isinstance(low_water, (int, float)):
            raise TypeError(f"low_water: a float, not {type(low_water).__name__}")
        if not 0 < low_water <= 1:
            raise ValueError(f"low_water: in (0, 1], not {low_water}")
        os.makedirs(path, exist_ok=True)  # an existing read-only directory still serves reads
        self._directory = os.path.abspath(path)
        self._max_bytes = max_bytes
        self._target = int(max_bytes * low_water)
        self._lock_path = os.path.join(self._directory, "lock")
        self._temp_dir = os.path.join(self._directory, "tmp")

    @property
    def directory(self) -> str:
        return self._directory

    @property
    def max_bytes(self) -> int:
        return self._max_bytes

    def lookup(self, namespace: str, key: str) -> CachedChunk | None:
        """The whole entry for ``(namespace, key)``, or None.  Its checksum is checked by
        :meth:`read`; a file whose header or size is wrong is removed here."""
        return self._open_entry(self._path(namespace, key), "lookup", _entry)

    def read(
        self, entry: CachedChunk, empty: Callable[[int], np.ndarray] | None = None
    ) -> np.ndarray | None:
        """The payload of ``entry`` as a new 1-D uint8 array and marks it recently used; None
        when the file is gone, was replaced by another version since the lookup, or fails its
        checks (then it is removed).  A None is a miss: fetch the object without
        ``If-None-Match``.  ``empty(nbytes)`` makes the array (the reader's manager counts and
        reuses its memory); by default ``np.empty``, counted by the active manager."""
        fd = open_quietly(entry.path)
        if fd is None:
            return None
        try:
            return self._read_open(entry, fd, empty or _empty_bytes)
        except OSError as error:
            _log.debug("cache read of %s failed: %s", entry.path, error)
            return None
        finally:
            os.close(fd)

    def read_version(
        self,
        namespace: str,
        key: str,
        version: str,
        empty: Callable[[int], np.ndarray] | None = None,
    ) -> np.ndarray | None:
        """:meth:`lookup` and :meth:`read` in one: the payload of ``(namespace, key)`` when the
        entry holds ``version`` (a version the caller knows is current), else None.  One open
        of the file instead of two, for passes that read many small entries."""

        def payload(fd: int, header: Header, path: str) -> np.ndarray | None:
            if header.version != version:
                return None
            return self._read_open(_entry(fd, header, path), fd, empty or _empty_bytes)

        return self._open_entry(self._path(namespace, key), "read", payload)

    def open_version(
        self, namespace: str, key: str, version: str, remove_damaged: bool = True
    ) -> CheckedFile | None:
        """The entry of ``(namespace, key)`` as an open file when it holds ``version`` (a
        version the caller knows is current), else None; marked recently used.  Its payload
        is read and checked by whoever decodes it (the native reader, without a copy into
        Python), and the kernel is asked to read it ahead meanwhile.  A few system calls and
        no lock, unless a damaged file is found and ``remove_damaged`` (the lock is taken to
        remove it; without, a later store replaces it)."""

        def opened(fd: int, header: Header, path: str) -> CheckedFile | None:
            if header.version != version:
                return None
            touch(fd)
            with contextlib.suppress(OSError):
                os.posix_fadvise(fd, header.offset, header.nbytes, os.POSIX_FADV_WILLNEED)
            seed = int(google_crc32c.value(header.encoded))
            # a descriptor of its own: the one the header was read from is closed
            return CheckedFile(os.dup(fd), header.offset, header.nbytes, seed, header.crc)

        return self._open_entry(self._path(namespace, key), "open", opened, remove_damaged)

    def _open_entry(
        self,
        path: str,
        what: str,
        use: Callable[[int, Header, str], _T | None],
        remove_damaged: bool = True,
    ) -> _T | None:
        """``use(fd, header, path)`` of the entry file at ``path`` open, its header read; None
        when there is no file, it is damaged (then removed, if ``remove_damaged``) or reading
        it fails."""
        fd = open_quietly(path)
        if fd is None:
            return None
        try:
            header = read_header(fd)
            if header is None:
                if remove_damaged:
                    self._remove_damaged(path, fd)
                return None
            return use(fd, header, path)
        except OSError as error:
            _log.debug("cache %s of %s failed: %s", what, path, error)
            return None
        finally:
            os.close(fd)

    def store(self, namespace: str, key: str, version: str, data: Buffer) -> None:
        """Keep ``data`` as the content of ``(namespace, key)`` at ``version``, replacing any
        entry there, then evict least recently used entries while over ``max_bytes``.  An entry
        larger than ``max_bytes`` is not kept (and the older one is discarded).  Never raises
        ``OSError``: a full disk or read-only directory only drops the entry."""
        payload = as_bytes(data)
        encoded = version.encode("utf-8", "surrogatepass")
        size = HEADER.size + len(encoded) + payload.size
        if size > self._max_bytes or len(encoded) > MAX_VERSION_BYTES:
            self.discard(namespace, key)  # never leave an older version behind a newer one
            return
        path = self._path(namespace, key)
        try:
            temp = self._write_temp(encoded, payload)
        except OSError as error:
            _log.debug("cache store of %s dropped: %s", path, error)
            return
        try:
            with self._locked() as lock:
                self._place(lock, temp, path, size)
        except OSError as error:
            _log.debug("cache store of %s dropped: %s", path, error)
            unlink_quietly(temp)

    def discard(self, namespace: str, key: str) -> None:
        """Remove the entry for ``(namespace, key)`` if there is one (never raises OSError)."""
        path = self._path(namespace, key)
        try:
            with self._locked() as lock:
                self._remove(lock, path)
        except OSError as error:
            _log.debug("cache discard of %s failed: %s", path, error)

    @property
    def used_bytes(self) -> int:
        """The total size of the entry files (walked when no running total is kept yet)."""
        try:
            with self._locked() as lock:
                return self._state(lock)[0]
        except OSError:  # a read-only directory with no lock file: count without one
            return sum(f.size for f in self._walk(remove_stale=False))

    def clear(self) -> None:
        """Remove every entry (files being written by other processes are left alone).  Unlike
        the other methods this raises ``OSError`` (a read-only directory): it was asked for."""
        with self._locked() as lock:
            for entry in self._walk(remove_stale=True):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(entry.path)
            self._remove_empty_fans()
            save_state(lock, 0, 0)

    # -- reading --------------------------------------------------------------------------

    def _read_open(
        self, entry: CachedChunk, fd: int, empty: Callable[[int], np.ndarray]
    ) -> np.ndarray | None:
        header = read_header(fd)
        if header is None:
            self._remove_damaged(entry.path, fd)
            return None
        if (header.version, header.nbytes) != (entry.version, entry.nbytes):
            return None  # replaced since the lookup: the caller validated the other version
        out = empty(header.nbytes)
        if not read_into(fd, out, header.offset) or checksum(header.encoded, out) != header.crc:
            self._remove_damaged(entry.path, fd)
            return None
        touch(fd)
        return out

    def _remove_damaged(self, path: str, fd: int) -> None:
        """Remove ``path`` if it is still the damaged file open at ``fd`` (not a whole entry
        renamed over it since)."""
        _log.debug("cache entry %s is damaged: removed", path)
        try:
            opened = os.fstat(fd)
            with self._locked() as lock:
                current = os.stat(path)
                if (current.st_dev, current.st_ino) == (opened.st_dev, opened.st_ino):
                    os.unlink(path)
                    os.ftruncate(lock, 0)  # recount: its size may not be the one accounted
        except OSError as error:
            _log.debug("cache could not remove %s: %s", path, error)

    # -- writing --------------------------------------------------------------------------

    def _write_temp(self, encoded: bytes, payload: np.ndarray) -> str:
        """A new file in ``tmp/`` holding the whole entry, stamped as just used."""
        os.makedirs(self._temp_dir, exist_ok=True)
        temp = os.path.join(self._temp_dir, f"{os.getpid()}-{secrets.token_hex(8)}.tmp")
        header = HEADER.pack(MAGIC, FORMAT, len(encoded), payload.size, checksum(encoded, payload))
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666)
        try:
            try:
                write_all(fd, memoryview(header + encoded))
                write_all(fd, payload.data)
                touch(fd)
            finally:
                os.close(fd)  # may report ENOSPC too (NFS)
        except BaseException:
            unlink_quietly(temp)
            raise
        return temp

    def _place(self, lock: int, temp: str, path: str, size: int) -> None:
        """Rename ``temp`` to ``path`` and account for it; evict if over the limit.  Under the
        lock, so that ``clear`` cannot remove the fan-out directory in between."""
        total, stores = self._state(lock)
        replaced = size_or_zero(path)
        try:
            os.rename(temp, path)
        except FileNotFoundError:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            os.rename(temp, path)
        total, stores = total - replaced + size, stores + 1
        if stores >= RESCAN_EVERY or total > self._max_bytes:
            total, stores = self._evict(keep=path), 0
        save_state(lock, total, stores)

    def _evict(self, keep: str) -> int:
        """Remove the least recently used entries (never ``keep``, just stored) while over
        the limit, down to the low-water mark; the exact total after."""
        entries = self._walk(remove_stale=True)
        total = sum(f.size for f in entries)
        if total <= self._max_bytes:
            return total
        for entry in sorted(entries):
            if total <= self._target:
                break
            if entry.path == keep:
                continue
            with contextlib.suppress(FileNotFoundError):
                os.unlink(entry.path)
            total -= entry.size
        return total

    def _remove(self, lock: int, path: str) -> None:
        """Unlink an entry under the lock and subtract it from the running total."""
        size = size_or_zero(path)
        try:
            os.unlink(path)
        except FileNotFoundError:
            return
        state = load_state(lock)
        if state is not None:
            save_state(lock, max(0, state[0] - size), state[1])

    # -- accounting -----------------------------------------------------------------------

    @contextlib.contextmanager
    def _locked(self) -> Iterator[int]:
        """The lock file's descriptor, held exclusively (closing it releases the lock)."""
        fd = os.open(self._lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield fd
        finally:
            os.close(fd)

    def _state(self, lock: int) -> tuple[int, int]:
        """(total bytes, stores since the last walk), walking the directory when unknown."""
        state = load_state(lock)
        if state is None:
            state = (sum(f.size for f in self._walk(remove_stale=True)), 0)
            save_state(lock, *state)
        return state

    def _walk(self, *, remove_stale: bool) -> list[CacheFile]:
        """Every entry file, with its mtime and size; old temp files removed on the way."""
        found: list[CacheFile] = []
        for outer in subdirectories(self._directory):
            for inner in subdirectories(outer):
                found.extend(entry_files(inner))
        if remove_stale:
            self._remove_stale_temps()
        return found

    def _remove_stale_temps(self) -> None:
        cutoff = time.time_ns() - _STALE_TEMP_NS
        with contextlib.suppress(OSError), os.scandir(self._temp_dir) as it:
            for item in it:
                with contextlib.suppress(OSError):
                    if item.name.endswith(".tmp") and item.stat().st_mtime_ns < cutoff:
                        os.unlink(item.path)

    def _remove_empty_fans(self) -> None:
        for outer in subdirectories(self._directory):
            for inner in subdirectories(outer):
                with contextlib.suppress(OSError):  # not empty: a file not ours
                    os.rmdir(inner)
            with contextlib.suppress(OSError):
                os.rmdir(outer)

    def _path(self, namespace: str, key: str) -> str:
        # length-prefixed, so that no two (namespace, key) pairs give the same text
        text = f"{len(namespace)}:{namespace}:{key}".encode("utf-8", "surrogatepass")
        digest = hashlib.sha256(text).hexdigest()
        return os.path.join(self._directory, digest[:2], digest[2:4], digest)


# -- helpers ----------------------------------------------------------------------------------


def _empty_bytes(nbytes: int) -> np.ndarray:
    return np.empty(nbytes, np.uint8)


def _entry(fd: int, header: Header, path: str) -> CachedChunk:
    return CachedChunk(header.version, header.nbytes, path)
