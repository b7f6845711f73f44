"""Directories of temporary chunked arrays, and the removal of those a dead process left.

Each process keeps its temporary arrays in one *session* directory inside the private spill
directory: ``temps-<pid>-<random>/``, beside a lock file ``temps-<pid>-<random>.lock`` that the
process holds with ``flock`` for its whole life.  The kernel releases that lock when the process
ends, however it ends (``kill -9`` too), so whoever can take it knows the owner is gone: the
first temporary array of every process removes the sessions it can lock.  Unlike a pid check,
this cannot mistake a live process for a dead one after pid reuse or across pid namespaces.
At a normal exit a process removes its own session.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import os
import re
import secrets
import shutil
import stat
import tempfile
import threading
from dataclasses import dataclass

from oocarray._memory import _spill_files

__all__ = ["new_temp_dir", "remove_temp_dir"]

_SESSION_LOCK = re.compile(r"temps-\d+-[0-9a-f]{16}\.lock")


@dataclass(frozen=True, slots=True)
class _Session:
    pid: int
    directory: str
    lock_path: str
    lock_fd: int


_sessions: dict[tuple[int, str], _Session] = {}  # (pid, private spill dir) -> session
_lock = threading.Lock()


def new_temp_dir() -> str:
    """A new, empty directory for one temporary array, in this process's session directory
    (made, after removing what dead processes left, on first use)."""
    return tempfile.mkdtemp(prefix="temp-", suffix=".zarr", dir=_session().directory)


def remove_temp_dir(path: str, owner_pid: int) -> None:
    """Delete a temporary array's directory; only in the process that made it (a forked child
    must not delete its parent's data)."""
    if os.getpid() == owner_pid:
        _remove_directory(path)


def _session() -> _Session:
    base = _spill_files.private_dir()
    key = (os.getpid(), base)
    with _lock:
        session = _sessions.get(key)
        if session is None:
            remove_abandoned_sessions(base)
            session = _sessions[key] = _start_session(base)
            atexit.register(_end_session, session)
        return session


def _start_session(base: str) -> _Session:
    while True:
        name = f"temps-{os.getpid()}-{secrets.token_hex(8)}"
        lock_path = os.path.join(base, name + ".lock")
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        fcntl.flock(fd, fcntl.LOCK_EX)
        # A cleaner may have taken the lock between the open and the flock, taken the file
        # for a dead session's and unlinked it: then start again under another name.
        if _same_file(fd, lock_path):
            directory = os.path.join(base, name)
            os.mkdir(directory, 0o700)
            return _Session(os.getpid(), directory, lock_path, fd)
        os.close(fd)


def _end_session(session: _Session) -> None:
    if os.getpid() != session.pid:
        return  # a forked child exiting: the session is its parent's
    _remove_directory(session.directory)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(session.lock_path)
    os.close(session.lock_fd)


def remove_abandoned_sessions(base: str) -> None:
    """Remove the session directories in ``base`` whose owning process has ended (their lock
    can be taken).  Only names of our own pattern are touched, and links are never followed."""
    for name in os.listdir(base):
        if _SESSION_LOCK.fullmatch(name):
            _remove_if_abandoned(base, name)


def _remove_if_abandoned(base: str, lock_name: str) -> None:
    lock_path = os.path.join(base, lock_name)
    try:
        fd = os.open(lock_path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return  # removed meanwhile, or not a plain file of ours
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return  # its process is alive
        if not _same_file(fd, lock_path):
            return  # another cleaner removed it first
        _remove_directory(os.path.join(base, lock_name.removesuffix(".lock")))
        os.unlink(lock_path)
    finally:
        os.close(fd)


def _same_file(fd: int, path: str) -> bool:
    try:
        on_disk = os.lstat(path)
    except FileNotFoundError:
        return False
    held = os.fstat(fd)
    return (on_disk.st_dev, on_disk.st_ino) == (held.st_dev, held.st_ino)


def _remove_directory(path: str) -> None:
    """Remove a directory tree of ours; a link in its place is left alone, and links inside
    it are removed, never followed."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return
    if stat.S_ISDIR(info.st_mode):
        shutil.rmtree(path, ignore_errors=True)


def _forget_parent_sessions() -> None:
    """In a forked child: drop the parent's lock descriptors (the parent's lock stays held by
    the parent; the child makes its own session when it makes a temporary array)."""
    global _lock
    _lock = threading.Lock()  # another thread of the parent may have held it at the fork
    for key, session in list(_sessions.items()):
        if session.pid != os.getpid():
            os.close(session.lock_fd)
            del _sessions[key]


os.register_at_fork(after_in_child=_forget_parent_sessions)
