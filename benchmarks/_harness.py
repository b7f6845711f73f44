"""One harness for the workloads: a scratch directory, peer discovery, a checked round, timed
rounds from a warm or a cold page cache, and the rows and tables every workload reports.

A workload names its sides as :class:`Peer` makers (a peer whose library does not import is
reported missing, never skipped silently), checks every side's answer once untimed, then runs
them in interleaved rounds (:func:`benchmarks._timing.interleave`).  From a cold page cache the
workload's own files are evicted before every side's run, so no side reads what another side or
an earlier round left cached; other processes' cached files are left alone.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

from benchmarks._timing import Ratio, Result, Row, Table, format_seconds, interleave

__all__ = [
    "Peer",
    "Run",
    "Sides",
    "Timings",
    "checkout_env",
    "evict_page_cache",
    "files_under",
    "fresh_python",
    "marked_cold",
    "scratch",
    "zarr_pipeline",
    "zarrs_pipeline",
]

# A side: does one repeat of its workload, returns the seconds its timed part took and what it
# computed (None when there is nothing to check).
Run = Callable[[], tuple[float, object]]


@contextmanager
def scratch(prefix: str) -> Iterator[str]:
    """A fresh temporary directory for a workload's data, removed afterwards."""
    directory = tempfile.mkdtemp(prefix=prefix)
    try:
        yield directory
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def files_under(paths: Sequence[str]) -> Iterator[str]:
    """Every file ``paths`` name or hold (directories walked)."""
    for path in paths:
        if os.path.isfile(path):
            yield path
        for directory, _, names in os.walk(path):
            for name in names:
                yield os.path.join(directory, name)


def checkout_env(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """``base`` (this process's environment by default) with this checkout first on
    ``PYTHONPATH``: a child process then imports this checkout's ``benchmarks`` and
    ``oocarray``."""
    env = dict(os.environ if base is None else base)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [root, env.get("PYTHONPATH")]))
    return env


def fresh_python(code: str, timeout: float | None = None) -> subprocess.CompletedProcess[str]:
    """``code`` run by this interpreter in a fresh process that imports this checkout's
    ``benchmarks`` and ``oocarray``, its output captured; ``subprocess.TimeoutExpired`` (the
    process stopped) past ``timeout`` seconds."""
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=checkout_env(),
        check=False,
        timeout=timeout,
    )


def evict_page_cache(paths: Sequence[str]) -> int:
    """Drops the cached pages of every file under ``paths``; the number of files.

    ``posix_fadvise(DONTNEED)`` on the workload's files rather than ``/proc/sys/vm/drop_caches``:
    it needs no root and leaves other processes' cache (and their measurements) alone.  Dirty
    pages cannot be dropped, so each file is written back first; mapped pages cannot either,
    so this process's read-only mappings of the files let go of theirs first.
    """
    files = list(files_under(paths))
    _drop_mapped_pages(files)
    count = 0
    for path in files:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fdatasync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
        count += 1
    return count


_MADV_DONTNEED = 4


def _drop_mapped_pages(files: Sequence[str]) -> None:
    """Unmap the pages this process has mapped of ``files`` (a ``numpy.memmap`` side keeps
    every page it touched mapped, and ``POSIX_FADV_DONTNEED`` leaves mapped pages in the page
    cache).  Only read-only shared mappings: their pages come back from the file unchanged,
    where dropping a private or writable mapping's pages could lose data."""
    wanted = {os.path.realpath(f) for f in files}
    libc = ctypes.CDLL(None, use_errno=True)
    with open("/proc/self/maps", encoding="utf-8", errors="replace") as maps:
        regions = [line.split(maxsplit=5) for line in maps]
    for fields in regions:
        if len(fields) < 6 or fields[5].strip() not in wanted:
            continue
        perms = fields[1]
        if perms[1] != "-" or perms[3] != "s":
            continue
        start, end = (int(v, 16) for v in fields[0].split("-"))
        libc.madvise(ctypes.c_void_p(start), ctypes.c_size_t(end - start), _MADV_DONTNEED)


def marked_cold(result: Result, ids: Sequence[str] | None = None) -> Result:
    """``result`` with its rows (those of ``ids``, or every row) saying they were measured from
    a cold page cache."""
    rows = [
        dataclasses.replace(row, workload=f"{row.workload}, cold page cache")
        if ids is None or row.id in ids
        else row
        for row in result.rows
    ]
    return Result(rows, result.tables, result.notes)


@contextmanager
def zarrs_pipeline() -> Iterator[None]:
    """zarr-python's reads inside the block decode with the zarrs (Rust) codec pipeline.

    Raises ``ImportError`` when zarrs is not installed, so a peer made with it is missing.
    """
    import zarr
    import zarrs  # noqa: F401  (only its presence is needed: zarr loads the pipeline by path)

    with zarr.config.set({"codec_pipeline.path": "zarrs.ZarrsCodecPipeline"}):
        yield


def zarr_pipeline(zarrs: bool) -> Callable[[], contextlib.AbstractContextManager[None]]:
    """The context a zarr-python side reads in: the zarrs pipeline, or zarr's default.  Raises
    ``ImportError`` at once when zarrs is asked for and missing, so the side is missing."""
    if not zarrs:
        return contextlib.nullcontext
    with zarrs_pipeline():
        pass
    return zarrs_pipeline


@dataclass(frozen=True, slots=True)
class Peer:
    """A side to build: its label in the tables and a maker (``ImportError``: missing)."""

    label: str
    make: Callable[[], Run]


@dataclass(slots=True)
class Sides:
    """The sides of one workload that could be built, and what each computed last."""

    workload: str
    runs: dict[str, Run]
    labels: dict[str, str]
    missing: dict[str, str] = field(default_factory=dict)
    results: dict[str, object] = field(default_factory=dict)

    @classmethod
    def discover(cls, workload: str, peers: Mapping[str, Peer]) -> Sides:
        """Builds every peer; one whose library is not installed is recorded as missing."""
        runs: dict[str, Run] = {}
        labels: dict[str, str] = {}
        missing: dict[str, str] = {}
        for name, peer in peers.items():
            try:
                runs[name] = peer.make()
            except ImportError as error:
                missing[name] = str(error)
                continue
            labels[name] = peer.label
        return cls(workload, runs, labels, missing)

    def notes(self) -> list[str]:
        """One note per missing peer."""
        return [
            f"{self.workload}: {name} is not installed ({why}): its side is missing."
            for name, why in self.missing.items()
        ]

    def check(self, verify: Callable[[str, object], None]) -> None:
        """One untimed round: every side runs once and ``verify(name, result)`` checks it."""
        for name, run in self.runs.items():
            _, got = run()
            verify(name, got)

    def time(self, rounds: int, files: Sequence[str] = (), cold: bool = False) -> Timings:
        """``rounds`` interleaved rounds of the sides reading ``files``: from a warm page cache
        or, with ``cold``, each side's run from a cold one."""
        if cold and not files:
            raise ValueError(f"{self.workload}: a cold run needs the files it reads")

        def timed(name: str) -> Callable[[], float]:
            def side() -> float:
                seconds, self.results[name] = self.runs[name]()
                return seconds

            return side

        before = (lambda: evict_page_cache(files)) if cold else None
        times = interleave(
            {name: timed(name) for name in self.runs}, rounds, warmup=0, before_each=before
        )
        cache = ("cold" if cold else "warm") if files else None
        return Timings(self.workload, times, dict(self.labels), dict(self.missing), cache)


@dataclass(frozen=True, slots=True)
class Timings:
    """Seconds per round per side, and the rows and tables made from them."""

    workload: str
    times: dict[str, list[float]]
    labels: dict[str, str]
    missing: dict[str, str]
    page_cache: str | None = None  # "warm" or "cold" for the sides that read files

    def median(self, name: str) -> float:
        return statistics.median(self.times[name])

    @property
    def cache(self) -> str:
        return f"{self.page_cache} page cache" if self.page_cache else ""

    def row(
        self, what: str, side: str, peer: str, target: float | None, *, label: str | None = None
    ) -> Row:
        """``side`` against ``peer``: the paired ratio of their rounds (a missing peer: none)."""
        text = f"{what}: {label or 'vs ' + self.labels.get(peer, peer)}"
        if peer not in self.times:  # (missing, or not among this workload's sides)
            return Row(self.workload, text, self.median(side), peer, None, None, target)
        return Row(
            self.workload,
            text,
            self.median(side),
            self.labels[peer],
            self.median(peer),
            Ratio.paired(self.times[side], self.times[peer]),
            target,
        )

    def by_side(
        self,
        title: str,
        nbytes: int,
        extra: Mapping[str, Callable[[str], str]] | None = None,
    ) -> Table:
        """Median, min, max and GB/s of ``nbytes`` per side, plus ``extra`` columns (a header
        and the cell it gives a side)."""
        extra = extra or {}
        headers = ("side", "median", "min", "max", "GB/s", *extra)
        rows = [
            [
                self.labels[name],
                format_seconds(self.median(name)),
                format_seconds(min(t)),
                format_seconds(max(t)),
                f"{nbytes / self.median(name) / 1e9:.2f}",
                *(cell(name) for cell in extra.values()),
            ]
            for name, t in self.times.items()
        ]
        rounds = len(next(iter(self.times.values())))
        cache = f", {self.cache}" if self.cache else ""
        return Table(f"{title} ({rounds} interleaved rounds{cache})", headers, rows)
