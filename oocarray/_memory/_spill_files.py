"""Where spilled data goes: a private directory and the disk-space cap.

Without ``spill_dir`` the system temporary directory is used, or ``/var/tmp`` when the former
is a tmpfs (spilling to memory would release nothing).  Files themselves are created by the
native code: unnamed (``O_TMPFILE``) or created ``0600`` and unlinked at once, with their
space reserved (``posix_fallocate``, or zeros written for small files) before any page is
written.  The directory is ``<spill_dir>/oocarray-<uid>``, mode ``0700`` and owned by the
user, shared by the user's processes: spill files in it have no name, so a crash or
``kill -9`` leaves none behind; the folders of temporary chunked arrays in it are removed at
exit, and those of dead processes at the next start (see ``oocarray._storage._temp_dirs``).
"""

from __future__ import annotations

import errno
import os
import stat
import tempfile
import threading

from oocarray import _native
from oocarray._memory import _config
from oocarray._memory._units import format_bytes
from oocarray.errors import SpillError

__all__ = ["apply_settings", "disk_refusal", "free_spill_bytes", "private_dir", "spill_error"]

_lock = threading.Lock()


def _is_in_memory(path: str) -> bool:
    """Whether ``path`` is on tmpfs or ramfs, where spilled data would still take RAM."""
    target = os.path.realpath(path)
    best, fstype = "", ""
    try:
        with open("/proc/self/mounts", encoding="utf-8") as mounts:
            for line in mounts:
                fields = line.split()
                point = fields[1].replace("\\040", " ")
                inside = target == point or target.startswith(point.rstrip("/") + "/")
                if inside and len(point) >= len(best):
                    best, fstype = point, fields[2]
    except OSError:
        return False
    return fstype in ("tmpfs", "ramfs")


def default_base() -> str:
    """The system temporary directory, unless it is in memory and /var/tmp is on a disk."""
    base = tempfile.gettempdir()
    if _is_in_memory(base) and os.path.isdir("/var/tmp") and not _is_in_memory("/var/tmp"):
        return "/var/tmp"
    return base


def _path_under(base: str | None) -> str:
    return os.path.join(base or default_base(), f"oocarray-{os.getuid()}")


def _make_private_dir(base: str | None) -> str:
    path = _path_under(base)
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    except OSError as error:
        raise SpillError(
            error.errno or errno.EIO,
            f"cannot create the spill directory: {error.strerror}; set spill_dir "
            "(oc.configure or OOCARRAY_SPILL_DIR) to a writable directory",
            path,
        ) from error
    info = os.lstat(path)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
        raise SpillError(
            errno.EPERM,
            "the spill directory exists but is not a directory owned by this user; remove it "
            "or choose another spill_dir",
            path,
        )
    if stat.S_IMODE(info.st_mode) != 0o700:
        os.chmod(path, 0o700)
    return path


def private_dir() -> str:
    """The private spill directory (created if it is missing)."""
    with _lock:
        path = _make_private_dir(_config.config().spill_dir)
        _native.set_spill_dir(path)
        return path


def apply_settings(settings: _config.Config) -> None:
    """Point the native code at the private directory under ``settings.spill_dir``."""
    _native.set_spill_limit(-1 if settings.max_spill_bytes is None else settings.max_spill_bytes)
    try:
        with _lock:
            _native.set_spill_dir(_make_private_dir(settings.spill_dir))
    except SpillError:
        # Unusable now: file creation fails there with its errno, reported as a SpillError.
        _native.set_spill_dir(_path_under(settings.spill_dir))


def spill_error(error: OSError, what: str, nbytes: int) -> SpillError:
    """A :class:`SpillError` for a failed move of ``nbytes``, naming the place and the sizes."""
    code = error.errno or errno.EIO
    return SpillError(
        code,
        f"{what} failed: {disk_refusal(code, nbytes)}",
        _path_under(_config.config().spill_dir),
    )


def disk_refusal(err: int, nbytes: int, free: int | None = None, used: int | None = None) -> str:
    """Why the spill directory refused a file of ``nbytes`` (``err`` is the errno), and what
    to do: the ``max_spill_bytes`` limit and a full disk both come back as ``ENOSPC``.

    ``free`` (bytes free on the disk) and ``used`` (bytes of this process's files there) as
    they were at the failure, when known; otherwise they are measured now, which is too late
    when the arrays alive at the failure (a failed expression's temporaries) are gone."""
    limit = _config.config().max_spill_bytes
    if used is None:
        used = _native.spill_used()
    if free is None:
        free = free_spill_bytes()
    if err == errno.ENOSPC and limit is not None and (used + nbytes > limit or free >= nbytes):
        return (
            f"the max_spill_bytes limit was reached: {format_bytes(used)} of "
            f"{format_bytes(limit)} is in use on disk and {format_bytes(nbytes)} more was "
            "needed. Raise it (oc.configure(max_spill_bytes=...) or OOCARRAY_MAX_SPILL_BYTES), "
            "or delete or oc.unspill() arrays that are on disk."
        )
    reason = f"[{errno.errorcode.get(err, err)}] {os.strerror(err)}"
    room = "" if free < 0 else f", {format_bytes(free)} free"
    return (
        f"{reason} in the spill directory ({format_bytes(nbytes)} needed{room}; this "
        f"process's arrays on disk there took {format_bytes(used)}). Free disk space, or point "
        "spill_dir (oc.configure or OOCARRAY_SPILL_DIR) at a larger disk."
    )


def free_spill_bytes() -> int:
    """Bytes free for this user on the spill directory's disk, or -1 if it cannot be read."""
    try:
        info = os.statvfs(private_dir())
    except OSError:
        return -1
    return info.f_bavail * info.f_frsize
