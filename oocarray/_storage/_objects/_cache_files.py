"""The files of the chunk cache's directory: the entry file format, reading and writing an entry
file whole, recency stamps, and the walk of the fan-out folders and the running total kept in
the lock file (the layout is described in :mod:`._cache`).

An entry file is a header (:data:`HEADER`: magic, format version, length of the version string,
payload length, CRC-32C of the version string and payload), the version string (UTF-8), then the
payload.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import re
import struct
import time
from typing import TYPE_CHECKING, NamedTuple

import google_crc32c
import numpy as np

if TYPE_CHECKING:
    from typing_extensions import Buffer  # collections.abc.Buffer from Python 3.12

__all__ = [
    "FORMAT",
    "HEADER",
    "MAGIC",
    "MAX_VERSION_BYTES",
    "CacheFile",
    "Header",
    "as_bytes",
    "checksum",
    "entry_files",
    "load_state",
    "open_quietly",
    "read_header",
    "read_into",
    "save_state",
    "size_or_zero",
    "subdirectories",
    "touch",
    "unlink_quietly",
    "write_all",
]

_log = logging.getLogger("oocarray.cache")

# magic, format version, version-string length, payload length, CRC-32C of version and payload
HEADER = struct.Struct("<4sHHQI")
MAGIC = b"OCch"
FORMAT = 1
MAX_VERSION_BYTES = 0xFFFF

_FAN = re.compile(r"[0-9a-f]{2}")
_ENTRY = re.compile(r"[0-9a-f]{64}")

_last_stamp = 0


class Header(NamedTuple):
    """An entry file's header, read and checked against the file's size (:func:`read_header`)."""

    version: str
    encoded: bytes  # the version as stored
    nbytes: int
    crc: int
    offset: int  # of the payload in the file


class CacheFile(NamedTuple):
    """An entry file found by a walk: its mtime (when it was last used), size and path."""

    mtime_ns: int
    size: int
    path: str


def _stamp() -> int:
    """Now in nanoseconds, strictly increasing within the process, so that an entry used
    after another is always the more recent even when the clock has not moved."""
    global _last_stamp
    _last_stamp = max(time.time_ns(), _last_stamp + 1)
    return _last_stamp


def touch(fd: int) -> None:
    """Mark the open file as used now (a read-only cache keeps its old times)."""
    stamp = _stamp()
    with contextlib.suppress(OSError):
        os.utime(fd, ns=(stamp, stamp))


def open_quietly(path: str) -> int | None:
    """A read-only descriptor of ``path``; None where it cannot be opened (a miss)."""
    try:
        return os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as error:
        _log.debug("cache could not open %s: %s", path, error)
        return None


def read_header(fd: int) -> Header | None:
    """The header of an entry file, or None when it is not whole (magic, format, or a size that
    disagrees with the lengths it gives)."""
    raw = os.pread(fd, HEADER.size, 0)
    if len(raw) != HEADER.size:
        return None
    magic, version_format, version_length, nbytes, crc = HEADER.unpack(raw)
    if magic != MAGIC or version_format != FORMAT:
        return None
    offset = HEADER.size + version_length
    if os.fstat(fd).st_size != offset + nbytes:
        return None
    encoded = os.pread(fd, version_length, HEADER.size)
    if len(encoded) != version_length:
        return None
    try:
        version = encoded.decode("utf-8", "surrogatepass")
    except UnicodeDecodeError:
        return None
    return Header(version, encoded, nbytes, crc, offset)


def checksum(encoded: bytes, payload: np.ndarray) -> int:
    """The CRC-32C of the version string then the payload: a damaged version is caught too."""
    return int(google_crc32c.extend(google_crc32c.value(encoded), payload))


def read_into(fd: int, out: np.ndarray, offset: int) -> bool:
    """Fill ``out`` from ``fd`` at ``offset``; False when the file ends first."""
    view = out.data
    done = 0
    while done < len(view):
        count = os.preadv(fd, [view[done:]], offset + done)
        if count == 0:
            return False
        done += count
    return True


def write_all(fd: int, view: memoryview) -> None:
    while view:
        written = os.write(fd, view)
        if written == 0:
            raise OSError(errno.ENOSPC, "no bytes written")
        view = view[written:]


def as_bytes(data: Buffer) -> np.ndarray:
    """The bytes of a buffer as a 1-D uint8 array, without a copy when it is contiguous
    (google_crc32c takes a NumPy array but not a memoryview)."""
    view = memoryview(data)
    if not view.c_contiguous:
        view = memoryview(view.tobytes())
    return np.frombuffer(view.cast("B"), np.uint8)


def size_or_zero(path: str) -> int:
    try:
        return os.stat(path).st_size
    except FileNotFoundError:
        return 0


def unlink_quietly(path: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(path)


def subdirectories(directory: str) -> list[str]:
    """The fan-out directories (two hex digits) in ``directory``."""
    try:
        with os.scandir(directory) as it:
            return [d.path for d in it if _FAN.fullmatch(d.name) and d.is_dir()]
    except OSError:
        return []


def entry_files(directory: str) -> list[CacheFile]:
    found = []
    try:
        with os.scandir(directory) as it:
            for item in it:
                if not _ENTRY.fullmatch(item.name):
                    continue
                with contextlib.suppress(OSError):  # removed meanwhile
                    stat = item.stat(follow_symlinks=False)
                    found.append(CacheFile(stat.st_mtime_ns, stat.st_size, item.path))
    except OSError:
        pass
    return found


def load_state(lock: int) -> tuple[int, int] | None:
    """(total, stores since the last walk) from the lock file; None when missing or torn."""
    raw = os.pread(lock, 64, 0)
    fields = raw.split()
    if len(fields) != 2 or not raw.endswith(b"\n"):
        return None
    try:
        total, stores = int(fields[0]), int(fields[1])
    except ValueError:
        return None
    return (total, stores) if total >= 0 and stores >= 0 else None


def save_state(lock: int, total: int, stores: int) -> None:
    raw = b"%d %d\n" % (total, stores)
    os.pwrite(lock, raw, 0)
    os.ftruncate(lock, len(raw))
