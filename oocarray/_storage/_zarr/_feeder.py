"""``as_ndarray()`` of an array in an object store: a feeder process fetches chunks for the
pager, on demand and ahead of it.

The pager fills pages in native threads that must never wait for Python (the thread that
faulted may hold the GIL), and fetching is the object-store library's work.  So a process of
its own fetches: the pager asks it for a chunk on a pipe when the chunk's file is missing
(``native/pager_remote.c``), the feeder writes the chunk's stored bytes into that file (beside
it, then renamed: whole or absent) and answers; the pager decodes the file as it decodes a
local chunk, and evicts and refills pages under the budget as usual.  With each request the
feeder also fetches the next chunks in the direction the reads go, several requests in flight,
so a scan finds its chunks there.  The pager starts it (``native/pager_feeder.c``) the first
time one of its fills needs it in a process: a scan that this process reads ahead in memory
(``_prefetch``) never does, and a forked child starts one of its own.  The files live in a
private temporary directory (on disk, not in RAM), removed with the array; a process killed
meanwhile leaves it to the next one's clean-up of dead sessions (see ``_temp_dirs``).

Run as ``python -m oocarray._storage._zarr._feeder``: the configuration (the location, with
its options, and the cache) comes on stdin, never on the command line, where other users
could read credentials.
"""

from __future__ import annotations

import collections
import concurrent.futures
import functools
import itertools
import math
import os
import pickle
import select
import struct
import sys
import threading
import traceback
import warnings
import weakref
from typing import Any

import numpy as np

from oocarray import _native
from oocarray._storage._paged._plan import ChunkTable
from oocarray._storage._temp_dirs import new_temp_dir, remove_temp_dir
from oocarray._storage._zarr._prefetch import ReadAhead, row_chunks_together

__all__ = ["feeder_table"]

READY, ABSENT, FAILED = 2, 3, 4  # answers (pager_remote.c)
_REQUEST = struct.Struct("<q")
_ANSWER = struct.Struct("<qq")
AHEAD_BYTES = 64 << 20  # stored bytes fetched ahead of the pager's requests, at most
AHEAD_CHUNKS = 256  # and chunks
HELPED_RUN = 4  # chunks asked for in a row before reading ahead where this process is helped
HELPER_NICENESS = 10  # then its priority lowered by this


def feeder_table(store: Any, nchunks: int, read_ahead: bool = False) -> ChunkTable:
    """The pager's table for a remote array: one file per row chunk in a private directory,
    none there yet, and how the pager starts a feeder process to fetch them (``spec``: it ends
    when the pager closes its pipes, or is stopped with the array).  With ``read_ahead`` (a
    read-only array), this process also fetches ahead of a forward scan and hands the chunks
    over in memory (``_prefetch``), and the feeder reads ahead only when it is asked for chunks
    one after another (that reader could not keep up)."""
    directory = new_temp_dir()
    chunk_bytes = math.prod(store.chunks) * store.dtype.itemsize
    config = pickle.dumps((store.reopen_remote(), directory, nchunks, chunk_bytes, read_ahead))
    spec = (
        feeder_command(read_ahead),
        [key + b"=" + value for key, value in os.environb.items()],
        _REQUEST.pack(len(config)) + config,
        os.fsencode(os.path.join(directory, "feeder.log")),
    )
    table = np.zeros((nchunks, 3), dtype=np.int64)
    table[:, 0] = np.arange(nchunks)
    table[:, 2] = -1
    paths = [os.path.join(directory, str(c)) for c in range(nchunks)]
    feed = _Feed(spec, directory, os.getpid())
    if read_ahead:
        feed.read_ahead = functools.partial(
            ReadAhead, store, nchunks=nchunks, chunk_bytes=chunk_bytes
        )
    return ChunkTable(paths, table, feed=feed)


def feeder_command(helper: bool) -> list[bytes]:
    """The command line of a feeder process (nothing secret: its configuration comes on
    stdin)."""
    command = [sys.executable, "-m", "oocarray._storage._zarr._feeder"]
    return [os.fsencode(part) for part in command + (["--helper"] if helper else [])]


class _Feed:
    """How the pager starts the feeder process of one paged array (``spec``, the Pages
    object's ``remote_feeder``), and its directory, removed once the array has gone and its
    feeder was stopped."""

    def __init__(self, spec: tuple[Any, ...], directory: str, owner: int) -> None:
        self.spec = spec
        self.directory = directory
        self._owner = owner
        # Set when a put of written-back chunks failed: their files are the only copy, and the
        # directory is then kept (and named) when the array goes, never removed.
        self._unsent: list[bool] = []
        # this process's read-ahead, started with the pages (where the array is read-only)
        self.read_ahead: Any = None

    def handed_over(self, pages: Any) -> None:
        """The pager has the array: clean up after it, and start the read-ahead."""
        token = pages.remote_token()
        weakref.finalize(pages, _finish, token, self.directory, self._owner, self._unsent)
        if self.read_ahead is not None:
            self.read_ahead(pages)

    def upload(self, store: Any) -> int:
        """Put every chunk file the pager wrote back since the last upload (one PUT each);
        the chunks put.  The feeder stamps the files it fetches with mtime 0; a file written
        back is a new file (written beside and renamed) with the time of its writing, stamped
        0 again through the descriptor it was read from once it is put: a file renamed over it
        meanwhile keeps its time, and goes with the next upload."""
        objects: list[tuple[str, Any]] = []
        uploaded: list[int] = []
        try:
            for name in os.listdir(self.directory):
                if not name.isdigit():
                    continue
                fd = os.open(os.path.join(self.directory, name), os.O_RDONLY | os.O_CLOEXEC)
                if os.fstat(fd).st_mtime_ns == 0:
                    os.close(fd)
                    continue
                with open(fd, "rb", closefd=False) as f:
                    objects.append((store._key((int(name), *store._rest)), f.read()))
                uploaded.append(fd)
            if objects:
                try:
                    store._put_all(objects)
                except BaseException:
                    self._unsent[:] = [True]
                    raise
                self._unsent.clear()
                for fd in uploaded:
                    os.utime(fd, ns=(0, 0))
        finally:
            for fd in uploaded:
                os.close(fd)
        return len(objects)

    def abandon(self) -> None:
        """The pager was not made: remove the directory."""
        _finish(None, self.directory, self._owner, self._unsent)


def _finish(token: int | None, directory: str, owner: int, unsent: list[bool]) -> None:
    # No view of the array is left, so no fill will ask for a chunk again: stop this process's
    # feeder now (it writes no file after this), rather than when the pager frees the array.
    if token is not None:
        _native.pager_stop_feeder(token)
    if unsent:
        warnings.warn(
            f"chunks written into an array in an object store could not be put there; they "
            f"are kept in {directory} (one file per row chunk, stored as the array's chunks)",
            RuntimeWarning,
            stacklevel=1,
        )
        return
    remove_temp_dir(directory, owner)


# ---- the feeder process ----------------------------------------------------------------------


def _serve() -> None:
    if "--helper" in sys.argv:
        # This process only helps (the asking process reads ahead itself): its start must
        # not take the cores from the scan it helps.
        os.nice(HELPER_NICENESS)
    from oocarray._storage._formats import open_store

    requests: Any = sys.stdin.buffer.raw  # type: ignore[union-attr]
    # The answers go to the pipe that is stdout; whatever a library prints goes to the log.
    answers = os.dup(1)
    os.dup2(2, 1)
    size = _REQUEST.unpack(_read(requests, 8))[0]
    (location, dataset, cache), directory, nchunks, chunk_bytes, helped = pickle.loads(
        _read(requests, size)
    )
    store: Any = open_store(location, "r", dataset, True, cache)
    _Feeder(store, directory, nchunks, chunk_bytes, answers, helped).serve(requests)


class _Feeder:
    """Chunks fetched on their own threads (each blocks on its requests, many in flight), the
    ones asked for answered as soon as their file is written, and the next ones in the
    direction the reads go started ahead."""

    def __init__(
        self,
        store: Any,
        directory: str,
        nchunks: int,
        chunk_bytes: int,
        answers: int,
        helped: bool = False,
    ) -> None:
        self._store = store
        self._directory = directory
        self._nchunks = nchunks
        self._answers = answers
        self._ahead = max(1, min(AHEAD_CHUNKS, AHEAD_BYTES // max(1, chunk_bytes)))
        # Chunks fetched together: the row chunks of one shard (ranges of one object, one
        # request); chunks of their own objects each alone, so each is ready when it arrives.
        self._together = row_chunks_together(store)
        # A thread per fetch running at once: the one asked for, and those ahead of it.
        self._pool = concurrent.futures.ThreadPoolExecutor(
            self._ahead // self._together + 4, "feeder"
        )
        self._lock = threading.Lock()
        self._outcome: dict[int, tuple[int, str]] = {}  # chunk -> (status, why)
        self._running: set[int] = set()
        self._asked: set[int] = set()  # asked for, not answered yet
        self._last = -1
        # The asking process reads a scan ahead itself: read ahead only when asked for several
        # chunks one after another (it cannot run), not for the few it misses.
        self._helped = helped
        self._run = 0  # chunks asked for one after another

    def serve(self, requests: Any) -> None:
        while True:
            asked = _requests(requests, block=True)
            if asked is None:
                self._pool.shutdown(wait=False, cancel_futures=True)
                return  # the pager closed its end: the array is gone
            for c in dict.fromkeys(asked):
                self._ask(c)

    def _ask(self, c: int) -> None:
        step = 1 if c >= self._last else -1
        self._run = self._run + 1 if abs(c - self._last) == 1 else 0
        self._last = c
        with self._lock:
            known = self._outcome.get(c)
            if known is not None and known[0] != FAILED:
                self._answer(c, known)
            else:
                self._outcome.pop(c, None)  # a failure: try again
                self._asked.add(c)
                self._start([c])
            if self._run >= HELPED_RUN or not self._helped:
                self._top_up(c, step)

    def _top_up(self, c: int, step: int) -> None:
        """Keep the chunks ahead of ``c``, in the direction the reads go, fetched or being
        fetched: started in batches of at least half the window (neighbouring ranges of a
        shard then go in one request), or at once when the next chunk is not started."""
        wanted = [
            nxt
            for nxt in (c + step * n for n in range(1, self._ahead + 1))
            if 0 <= nxt < self._nchunks and nxt not in self._outcome and nxt not in self._running
        ]
        if wanted and (wanted[0] == c + step or len(wanted) >= max(1, self._ahead // 2)):
            self._start(wanted)

    def _start(self, chunks: list[int]) -> None:
        chunks = sorted(c for c in chunks if c not in self._running)
        self._running.update(chunks)
        for _, group in itertools.groupby(chunks, key=lambda c: c // self._together):
            self._pool.submit(self._fetch, list(group))

    def _fetch(self, numbers: list[int]) -> None:
        rest = self._store._rest
        outcomes = dict.fromkeys(numbers, (FAILED, "the fetch failed"))
        try:
            sources = self._store._chunk_sources([(c, *rest) for c in numbers])
            try:
                for c in numbers:
                    data = sources.stored_bytes((c, *rest))
                    if data is None:
                        outcomes[c] = (ABSENT, "")
                    else:
                        # stamped as fetched, not written back (see upload), before it appears
                        path = os.path.join(self._directory, str(c))
                        _write_file(path, data, fetched=True)
                        outcomes[c] = (READY, "")
            finally:
                sources.close()
        except Exception as error:  # told to the pager, with the message, if it asked
            outcomes = {c: (FAILED, f"{type(error).__name__}: {error}") for c in numbers}
            traceback.print_exc()
        with self._lock:
            for c, outcome in outcomes.items():
                self._running.discard(c)
                self._outcome[c] = outcome
                if c in self._asked:
                    self._answer(c, outcome)

    def _answer(self, c: int, outcome: tuple[int, str]) -> None:
        """Under the lock: tell the pager (its failure's reason in a file beside the chunk)."""
        status, why = outcome
        if status == FAILED:
            _write_file(os.path.join(self._directory, f"{c}.error"), why.encode())
        self._asked.discard(c)
        os.write(self._answers, _ANSWER.pack(c, status))  # 16 bytes: one atomic write


def _write_file(path: str, data: Any, fetched: bool = False) -> None:
    temporary = f"{path}.part"
    with open(temporary, "wb") as f:
        f.write(memoryview(data).cast("B"))
    if fetched:
        os.utime(temporary, ns=(0, 0))
    os.replace(temporary, path)


def _read(stream: Any, n: int) -> bytes:
    out = b""
    while len(out) < n:
        got = stream.read(n - len(out))
        if not got:
            raise EOFError
        out += got
    return out


def _requests(stream: Any, block: bool) -> list[int] | None:
    """The chunk numbers asked for (waiting for the first); None at end-of-file."""
    asked = collections.deque[int]()
    fd = stream.fileno()
    wait = None if block else 0
    while True:
        ready, _, _ = select.select([fd], [], [], wait)
        if not ready:
            return list(asked)
        data = os.read(fd, 8 * 512)
        if not data:
            return list(asked) if asked else None
        while len(data) % 8:
            more = os.read(fd, 8 - len(data) % 8)
            if not more:
                return None
            data += more
        asked.extend(v for (v,) in _REQUEST.iter_unpack(data))
        wait = 0  # then take what else is there, without waiting


if __name__ == "__main__":
    _serve()
