"""W11-hard (issue 13): NumPy, SciPy and an incremental PCA on ``x.as_ndarray()`` of an
8 GiB zstd zarr store, in a process under a hard memory limit of 1 GiB (a memory cgroup).

``python -m benchmarks.w11_hard [--size 8G] [--limit 1G] [--budget 768M] [--dir DIR] [--keep]
[--spill mmap] [--only WORKLOAD,...] [--percentile-columns 4] [--timeout S] [--whole-timeout S]``
(also ``python -m benchmarks --large --only W11H``: the defaults).

Data (:func:`make_data`, under ``--dir``, default a temporary directory on the disk of
``tempfile.gettempdir()``, removed at the end unless ``--keep``): an ``(N, 64)`` float32
array, eight smooth latent signals (sines of periods from 4,000 to 2,000,000 rows, distinct
amplitudes, fixed orthonormal loadings) plus per-column offsets plus Gaussian noise, rounded
to two decimals; written once as a zstd zarr v3 array in row chunks of 16384 rows (4 MiB,
oocarray's writer) and once raw as ``x.npy``.

References (:func:`compute_reference`) are computed in a separate process *outside* the
cgroup, from ``np.load(npy, mmap_mode="r")``, without ever holding the array in RAM: means in
one streaming pass (NumPy's own ``np.mean(m, axis=0)`` on the memmap, the same call in
float64, and an independent float64 sum of row blocks), then column blocks of 8 columns
(``np.array(m[:, j:j+8])``, 1 GiB at 8 GiB) for ``np.percentile(block, [1, 50, 99], axis=0)``
and for ``scipy.ndimage.gaussian_filter1d(block, 2.0, axis=0)`` over each *whole* column,
digested per column (SHA-256 of the float32 output and its float64 sum), and the incremental
PCA over the same row batches as the children.

Workloads, each in a fresh child process put in a new memory cgroup of ``--limit`` (cgroup v1
``memory.limit_in_bytes`` or v2 ``memory.max``, by :func:`testkit.cgroup.memory_cgroup`;
page cache counted).  Side ``oc``: ``a = oc.open(store).as_ndarray()`` inside ``with
oc.Manager(max_bytes=budget, spill=spill)``; side ``numpy`` (the peer): ``a =
np.load(npy, mmap_mode="r")``, no manager.  Then the same plain NumPy/SciPy code on ``a``:

- ``mean``: ``np.mean(a, axis=0)`` (NumPy's float32 accumulation) and ``np.mean(a, axis=0,
  dtype=np.float64)``;
- ``percentile``: ``np.percentile(a[:, j:j+w], [1, 50, 99], axis=0)`` for column blocks of
  ``w`` columns (each call copies its block, ``N * 4 * w`` bytes, and partitions it);
- ``percentile-whole``: ``np.percentile(a, [1, 50, 99], axis=0)``: NumPy copies all of ``a``
  (8 GiB) and partitions each of the 64 columns in place, a strided pass over the whole copy
  per column;
- ``pca``: an ``IncrementalPCA(n_components=8).partial_fit(a[i:i+8192])`` loop over row
  batches (scikit-learn's where it is installed, else :class:`NumpyIncrementalPCA`, the
  same algorithm in NumPy);
- ``filter``: ``scipy.ndimage.gaussian_filter1d(a[lo:hi], 2.0, axis=0)`` over row batches
  (65536 rows, fewer where the budget is small: :func:`filter_batch_rows`) with a halo of the
  filter's radius (8 rows) on each side, the halo cut off: the output equals the filter of
  the whole columns bit for bit, and is digested per column (SciPy filters a column at a
  time, so one call on all of ``a`` would read the whole store once per column);
- ``load`` (peer only): ``np.load(npy)`` without ``mmap_mode``.

Recorded per child: wall time of each step, the cgroup's peak usage
(``memory.max_usage_in_bytes`` / ``memory.peak``), OOM kills, exit status, VmHWM, the bytes
it made the kernel write to storage (``/proc/PID/io`` ``write_bytes``, sampled by the parent
so that a child that is killed or stopped has a figure too: spill files' write-back), and on
the oc side the peak bytes its manager held in spill files (``stats()`` sampled every 20 ms)
and the chunk bytes the pager decoded.  Before each child the store's and the .npy's pages
are dropped from the page cache (``POSIX_FADV_DONTNEED``), so both sides read from disk.
The tests in ``tests/reliability/test_paged_hard_limit.py`` run the same children, small.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks._timing import Result, Table, TextRow, format_mib, format_seconds
from testkit.cgroup import CgroupUnavailable, memory_cgroup

MiB = 1 << 20
GiB = 1 << 30
COLUMNS = 64
ROW_BYTES = COLUMNS * 4
CHUNK_ROWS = 16384  # 4 MiB chunks of (N, 64) float32
WRITE_CHUNKS = 16  # chunks generated and written at a time (64 MiB)
LATENT = 8
COMPONENTS = 8
QUANTILES = (1.0, 50.0, 99.0)
PCA_BATCH_ROWS = 8192
FILTER_BATCH_ROWS = 65536
SIGMA = 2.0
TRUNCATE = 4.0
HALO = int(TRUNCATE * SIGMA + 0.5)  # gaussian_filter1d's radius
REFERENCE_COLUMNS = 8
ROOT = Path(__file__).resolve().parent.parent
STEPS = ("mean", "percentile", "pca", "filter")
WORKLOADS = (*STEPS, "percentile-whole", "load")


# ---- data ----


@dataclass(frozen=True, slots=True)
class Data:
    """The store, the raw copy and the reference of one size, under ``directory``."""

    directory: str

    @property
    def store(self) -> str:
        return os.path.join(self.directory, "x.zarr")

    @property
    def npy(self) -> str:
        return os.path.join(self.directory, "x.npy")

    @property
    def reference_path(self) -> str:
        return os.path.join(self.directory, "reference.json")

    @property
    def spill_dir(self) -> str:
        return os.path.join(self.directory, "spill")

    def rows(self) -> int:
        return int(np.load(self.npy, mmap_mode="r").shape[0])

    def reference(self) -> dict[str, Any]:
        return dict(json.loads(Path(self.reference_path).read_text()))


def _latent() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Periods (rows), phases, amplitude-scaled orthonormal loadings (LATENT, 64), offsets."""
    rng = np.random.default_rng(20261122)
    periods = np.geomspace(4_000, 2_000_000, LATENT)
    phases = rng.uniform(0, 2 * np.pi, LATENT)
    amplitudes = np.geomspace(4.0, 0.6, LATENT)
    q, _ = np.linalg.qr(rng.standard_normal((COLUMNS, LATENT)))
    loadings = amplitudes[:, None] * q.T
    offsets = rng.uniform(-5.0, 5.0, COLUMNS)
    return periods, phases, loadings, offsets


def block(start: int, stop: int) -> np.ndarray:
    """Rows ``start:stop`` of the data (``start`` a multiple of CHUNK_ROWS): the same values
    whatever blocks they are made in."""
    periods, phases, loadings, offsets = _latent()
    out = np.empty((stop - start, COLUMNS), np.float32)
    for lo in range(start, stop, CHUNK_ROWS):
        hi = min(stop, lo + CHUNK_ROWS)
        t = np.arange(lo, hi, dtype=np.float64)[:, None]
        signals = np.sin(2 * np.pi * t / periods + phases)
        rng = np.random.default_rng([20261122, lo // CHUNK_ROWS])
        noise = rng.standard_normal((hi - lo, COLUMNS), dtype=np.float32) * np.float32(0.3)
        values = signals @ loadings + offsets + noise
        out[lo - start : hi - start] = np.round(values, 2)
    return out


def make_data(directory: str, size_bytes: int) -> tuple[Data, float]:
    """Write the zstd zarr store and the raw .npy of ``size_bytes`` under ``directory``; the
    data and the seconds it took.  The reference is computed by :func:`compute_reference`."""
    import oocarray as oc

    start = time.perf_counter()
    data = Data(directory)
    rows = size_bytes // ROW_BYTES
    os.makedirs(data.spill_dir, exist_ok=True)
    x = oc.create(data.store, (rows, COLUMNS), np.float32, chunks=(CHUNK_ROWS, COLUMNS), mode="w")
    raw = np.lib.format.open_memmap(data.npy, mode="w+", dtype=np.float32, shape=(rows, COLUMNS))
    step = CHUNK_ROWS * WRITE_CHUNKS
    for lo in range(0, rows, step):
        hi = min(rows, lo + step)
        values = block(lo, hi)
        x[lo:hi] = values
        raw[lo:hi] = values
    raw.flush()
    del raw
    x.close()
    os.sync()  # written back, so that dropping the files from the page cache drops them
    return data, time.perf_counter() - start


def drop_page_cache(data: Data) -> None:
    """Drop the store's and the .npy's clean pages from the page cache (POSIX_FADV_DONTNEED,
    these files only), so that every child reads them from disk, counted in its cgroup."""
    paths = [data.npy] + [os.path.join(d, f) for d, _, files in os.walk(data.store) for f in files]
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def dir_bytes(path: str) -> int:
    if os.path.isfile(path):
        return os.path.getsize(path)
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(path) for f in files)


# ---- the incremental PCA ----


class NumpyIncrementalPCA:
    """The incremental PCA of :class:`sklearn.decomposition.IncrementalPCA` (Ross et al.,
    2008: an SVD of the previous components scaled by their singular values, the centred
    batch and a mean-correction row; means and variances combined exactly), written with
    NumPy for machines without scikit-learn.  Only what the benchmark compares:
    ``partial_fit``, ``components_``, ``singular_values_``, ``explained_variance_``,
    ``mean_``, ``var_``, ``n_samples_seen_``."""

    def __init__(self, n_components: int) -> None:
        self.n_components = n_components
        self.n_samples_seen_ = 0
        self.mean_ = np.zeros(0)
        self.var_ = np.zeros(0)
        self.components_: np.ndarray | None = None
        self.singular_values_ = np.zeros(0)
        self.explained_variance_ = np.zeros(0)

    def partial_fit(self, x: np.ndarray) -> NumpyIncrementalPCA:
        batch = np.array(x, dtype=x.dtype if x.dtype.kind == "f" else np.float64)
        n = batch.shape[0]
        batch_mean = batch.mean(axis=0, dtype=np.float64)
        batch_var = batch.var(axis=0, dtype=np.float64)
        seen = self.n_samples_seen_
        total = seen + n
        if seen == 0:
            mean, var = batch_mean, batch_var
        else:
            delta = batch_mean - self.mean_
            mean = self.mean_ + delta * (n / total)
            var = (self.var_ * seen + batch_var * n + delta**2 * (seen * n / total)) / total
        batch -= batch_mean.astype(batch.dtype)
        if seen:
            assert self.components_ is not None
            correction = np.sqrt(seen * n / total) * (self.mean_ - batch_mean)
            stacked = np.vstack(
                (
                    self.singular_values_[:, None] * self.components_,
                    batch,
                    correction.astype(batch.dtype),
                )
            )
        else:
            stacked = batch
        _, s, vt = np.linalg.svd(stacked, full_matrices=False)
        biggest = np.argmax(np.abs(vt), axis=1)
        vt *= np.sign(vt[np.arange(len(vt)), biggest])[:, None]
        k = self.n_components
        self.n_samples_seen_ = total
        self.mean_, self.var_ = mean, var
        self.components_ = vt[:k]
        self.singular_values_ = s[:k]
        self.explained_variance_ = s[:k] ** 2 / (total - 1)
        return self


def incremental_pca() -> tuple[Any, str]:
    """scikit-learn's IncrementalPCA where it is installed, else :class:`NumpyIncrementalPCA`;
    and which it is."""
    try:
        import sklearn
        from sklearn.decomposition import IncrementalPCA
    except ImportError:
        return NumpyIncrementalPCA(COMPONENTS), "NumPy IncrementalPCA (no scikit-learn here)"
    return IncrementalPCA(n_components=COMPONENTS), f"scikit-learn {sklearn.__version__}"


# ---- the computations, shared by the reference and the children ----


def pca_fit(a: np.ndarray) -> tuple[dict[str, Any], str]:
    """The partial_fit loop over row batches of ``a``; the fitted values and the PCA used."""
    pca, which = incremental_pca()
    for lo in range(0, a.shape[0], PCA_BATCH_ROWS):
        hi = min(a.shape[0], lo + PCA_BATCH_ROWS)
        if hi - lo >= COMPONENTS:
            pca.partial_fit(a[lo:hi])
    fitted = {
        "components": np.asarray(pca.components_).tolist(),
        "singular_values": np.asarray(pca.singular_values_).tolist(),
        "explained_variance": np.asarray(pca.explained_variance_).tolist(),
        "mean": np.asarray(pca.mean_).tolist(),
        "n_samples_seen": int(np.asarray(pca.n_samples_seen_).ravel()[0]),
    }
    return fitted, which


def filter_batch_rows(budget_bytes: int) -> int:
    """Rows per filter batch: a batch, its output and the output's transpose (and the
    chunks under the batch's halo) must fit the budget together, else every column of the
    batch faults its chunks in again (scipy filters one column at a time)."""
    rows = budget_bytes // (6 * ROW_BYTES) // CHUNK_ROWS * CHUNK_ROWS
    return max(CHUNK_ROWS, min(FILTER_BATCH_ROWS, rows))


def filter_digests(a: np.ndarray, batch_rows: int = FILTER_BATCH_ROWS) -> dict[str, Any]:
    """``gaussian_filter1d(a, SIGMA, axis=0)`` in row batches with a halo, digested per
    column: the SHA-256 of each column's float32 output and its float64 sum."""
    from scipy.ndimage import gaussian_filter1d

    rows = a.shape[0]
    digests = [hashlib.sha256() for _ in range(COLUMNS)]
    sums = np.zeros(COLUMNS)
    for r0 in range(0, rows, batch_rows):
        r1 = min(rows, r0 + batch_rows)
        lo, hi = max(0, r0 - HALO), min(rows, r1 + HALO)
        out = gaussian_filter1d(a[lo:hi], SIGMA, axis=0, truncate=TRUNCATE)[r0 - lo : r1 - lo]
        columns = np.ascontiguousarray(out.T)
        for j in range(COLUMNS):
            digests[j].update(columns[j])
        sums += out.sum(axis=0, dtype=np.float64)
    return {"sha256": [d.hexdigest() for d in digests], "sum": sums.tolist()}


def percentile_blocks(a: np.ndarray, width: int) -> list[list[float]]:
    """``np.percentile`` of ``a``'s column blocks of ``width`` columns, joined: (3, 64)."""
    parts = [
        np.percentile(a[:, j : j + width], QUANTILES, axis=0) for j in range(0, COLUMNS, width)
    ]
    return np.concatenate(parts, axis=1).tolist()


def have_scipy() -> bool:
    """Whether SciPy is installed (it is no dependency of oocarray's tests)."""
    import importlib.util

    return importlib.util.find_spec("scipy") is not None


def compute_reference(data: Data) -> dict[str, Any]:
    """The reference results from ``np.load(npy, mmap_mode="r")``, never holding the whole
    array: streaming means, then column blocks for percentiles and the whole-column filter
    (without SciPy, none), then the PCA loop.  Run outside any cgroup (``--reference``)."""
    m = np.load(data.npy, mmap_mode="r")
    rows = m.shape[0]
    seconds: dict[str, float] = {}
    start = time.perf_counter()
    mean32 = np.mean(m, axis=0)
    mean64_numpy = np.mean(m, axis=0, dtype=np.float64)
    total = np.zeros(COLUMNS)
    for lo in range(0, rows, CHUNK_ROWS * WRITE_CHUNKS):
        total += m[lo : lo + CHUNK_ROWS * WRITE_CHUNKS].sum(axis=0, dtype=np.float64)
    seconds["mean"] = time.perf_counter() - start
    start = time.perf_counter()
    percentiles = np.empty((len(QUANTILES), COLUMNS))
    digests: list[str] = []
    filtered_sums = np.empty(COLUMNS)
    for j in range(0, COLUMNS, REFERENCE_COLUMNS):
        columns = np.array(m[:, j : j + REFERENCE_COLUMNS])
        percentiles[:, j : j + REFERENCE_COLUMNS] = np.percentile(columns, QUANTILES, axis=0)
        if not have_scipy():
            continue
        from scipy.ndimage import gaussian_filter1d

        out = gaussian_filter1d(columns, SIGMA, axis=0, truncate=TRUNCATE)
        del columns
        for k in range(out.shape[1]):
            digests.append(hashlib.sha256(np.ascontiguousarray(out[:, k])).hexdigest())
        filtered_sums[j : j + REFERENCE_COLUMNS] = out.sum(axis=0, dtype=np.float64)
        del out
    seconds["percentile+filter"] = time.perf_counter() - start
    start = time.perf_counter()
    pca, which = pca_fit(m)
    seconds["pca"] = time.perf_counter() - start
    return {
        "rows": rows,
        "mean32": mean32.tolist(),
        "mean64_numpy": mean64_numpy.tolist(),
        "mean64": (total / rows).tolist(),
        "percentile": percentiles.tolist(),
        "filter": {"sha256": digests, "sum": filtered_sums.tolist()} if digests else None,
        "pca": pca,
        "pca_which": which,
        "seconds": seconds,
    }


# ---- the child ----


def _status_bytes(key: str) -> int:
    with open("/proc/self/status", encoding="ascii") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    return 0


def run_step(step: str, a: np.ndarray, data: Data, budget: int, columns: int) -> Any:
    """One step of plain NumPy/SciPy code on ``a``; its JSON-able result."""
    if step == "mean":
        return np.mean(a, axis=0).tolist()
    if step == "mean64":
        return np.mean(a, axis=0, dtype=np.float64).tolist()
    if step == "percentile":
        return percentile_blocks(a, columns)
    if step == "percentile-whole":
        return np.percentile(a, QUANTILES, axis=0).tolist()
    if step == "pca":
        return pca_fit(a)
    if step == "filter":
        return filter_digests(a, filter_batch_rows(budget))
    if step == "load":
        return np.mean(np.load(data.npy), axis=0).tolist()
    raise ValueError(f"unknown step {step!r}")


def child(
    workloads: Sequence[str],
    side: str,
    directory: str,
    budget: int,
    spill: str,
    percentile_columns: int,
) -> dict[str, Any]:
    """Run ``workloads`` on one side in this process; a JSON-able report."""
    data = Data(directory)
    report: dict[str, Any] = {"seconds": {}, "results": {}}
    with contextlib.ExitStack() as stack:
        if side == "oc":
            import oocarray as oc

            manager = stack.enter_context(oc.Manager("w11-hard", max_bytes=budget, spill=spill))
            on_disk = stack.enter_context(spill_sampler(manager))
            x = oc.open(data.store)
            a = x.as_ndarray()
        elif side == "numpy":
            a = np.load(data.npy, mmap_mode="r")
        else:
            raise ValueError(f"side must be 'oc' or 'numpy', got {side!r}")
        for workload in workloads:
            for step in ("mean", "mean64") if workload == "mean" else (workload,):
                start = time.perf_counter()
                got = run_step(step, a, data, budget, percentile_columns)
                report["seconds"][step] = time.perf_counter() - start
                if step == "pca":
                    got, report["pca_which"] = got
                report["results"][step] = got
                print(f"{step}: {report['seconds'][step]:.1f} s", file=sys.stderr, flush=True)
        if side == "oc":
            report["paging"] = x.paging_stats()
            stats = manager.stats()
            report["manager"] = {
                "peak_bytes": stats.peak_bytes,
                "total_bytes": stats.total_bytes,
                "spills": stats.spills,
                "spill_moved_bytes": stats.spill_moved_bytes,
                "disk_peak_bytes": on_disk[0],
            }
        del a
    report["hwm"] = _status_bytes("VmHWM")
    report["io"] = proc_io("self")
    return report


@contextlib.contextmanager
def spill_sampler(manager: Any, interval: float = 0.02) -> Iterator[list[int]]:
    """Samples ``manager.stats()`` while the block runs: the peak bytes it had in files
    (``mmap_bytes + spilled_bytes``, compressed chunks counted at their disk size)."""
    peak = [0]
    stop = threading.Event()

    def on_disk() -> int:
        s = manager.stats()
        return int(s.mmap_bytes + s.spilled_bytes - s.compressed_bytes + s.compressed_disk_bytes)

    def sample() -> None:
        while not stop.wait(interval):
            peak[0] = max(peak[0], on_disk())

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    try:
        yield peak
    finally:
        stop.set()
        thread.join()


def proc_io(pid: int | str) -> dict[str, int]:
    """``/proc/PID/io``: bytes the process made the kernel read from and write to storage."""
    out: dict[str, int] = {}
    try:
        with open(f"/proc/{pid}/io", encoding="ascii") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key in ("read_bytes", "write_bytes"):
                    out[key] = int(value)
    except OSError:
        pass
    return out


# ---- the parent ----


@dataclass(frozen=True, slots=True)
class Outcome:
    """One child under a limit: killed or not, its report, what the cgroup and disk saw."""

    workloads: tuple[str, ...]
    side: str
    returncode: int
    killed: bool
    timed_out: bool
    oom_kills: int | None
    peak_bytes: int | None
    io: dict[str, int]
    seconds: float
    report: dict[str, Any] | None
    stderr: str


@contextlib.contextmanager
def io_sampler(pid: int, interval: float = 0.5) -> Iterator[dict[str, int]]:
    """Samples ``/proc/PID/io`` while the block runs; the dict holds the last values seen
    (the storage reads and writes of a child that is killed or stopped, too)."""
    last: dict[str, int] = {}
    stop = threading.Event()

    def sample() -> None:
        while True:
            seen = proc_io(pid)
            if seen:
                last.update(seen)
            if stop.wait(interval):
                return

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    try:
        yield last
    finally:
        stop.set()
        thread.join()


def child_env(data: Data) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OOCARRAY_")}
    env["OOCARRAY_SPILL_DIR"] = data.spill_dir
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env["OMP_NUM_THREADS"] = "1"  # the children and the reference: the same BLAS threads
    env["OPENBLAS_NUM_THREADS"] = "1"
    return env


def run_reference(data: Data, timeout: float = 3600) -> dict[str, Any]:
    """Compute the reference in a separate process (no cgroup), with the children's
    environment; cached in ``reference.json``."""
    if not os.path.exists(data.reference_path):
        cmd = [sys.executable, "-m", "benchmarks.w11_hard", "--reference", data.directory]
        subprocess.run(cmd, cwd=ROOT, env=child_env(data), check=True, timeout=timeout)
    return data.reference()


def run_limited(
    data: Data,
    workloads: Sequence[str],
    side: str,
    *,
    limit_bytes: int,
    budget_bytes: int,
    spill: str = "mmap",
    percentile_columns: int = 4,
    timeout: float = 3600,
) -> Outcome:
    """Run ``workloads`` on ``side`` in one child in a new memory cgroup of ``limit_bytes``,
    the store and the .npy dropped from the page cache first.  Raises CgroupUnavailable."""
    drop_page_cache(data)
    args = [",".join(workloads), side, data.directory, str(budget_bytes), spill]
    python = [sys.executable, "-m", "benchmarks.w11_hard", "--child", *args]
    python.append(str(percentile_columns))
    timed_out = False
    with memory_cgroup(limit_bytes) as group:
        start = time.perf_counter()
        proc = subprocess.Popen(
            group.command(python),
            cwd=ROOT,
            env=child_env(data),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        with io_sampler(proc.pid) as io:
            try:
                stdout, stderr = proc.communicate(timeout=timeout)
            except subprocess.TimeoutExpired:
                timed_out = True
                proc.kill()
                stdout, stderr = proc.communicate()
        seconds = time.perf_counter() - start
        peak, kills = group.peak_bytes(), group.oom_kills()
    killed = proc.returncode in (-9, 137) and not timed_out
    report = None
    if proc.returncode == 0 and stdout.strip():
        report = json.loads(stdout.strip().splitlines()[-1])
    return Outcome(
        tuple(workloads),
        side,
        proc.returncode,
        killed,
        timed_out,
        kills,
        peak,
        dict(io),
        seconds,
        report,
        stderr,
    )


# ---- checks ----


def _exact(got: Any, want: Any) -> bool:
    return bool(np.array_equal(np.asarray(got, np.float64), np.asarray(want, np.float64)))


def _max_rel(got: Any, want: Any) -> float:
    g, w = np.asarray(got, np.float64), np.asarray(want, np.float64)
    return float(np.max(np.abs(g - w) / np.maximum(np.abs(w), 1e-30)))


def check(step: str, got: Any, ref: dict[str, Any]) -> tuple[bool, str]:
    """Whether one step's result is the reference's (exactly, or to the stated tolerance),
    and a line saying how it compares."""
    if step == "mean":
        exact = _exact(got, ref["mean32"])
        drift = _max_rel(got, ref["mean64"])
        return exact, (
            f"{'==' if exact else '!='} np.mean of the raw .npy bit for bit; NumPy's float32 "
            f"accumulation is {drift:.2g} (max rel.) off the float64 mean on both"
        )
    if step == "mean64":
        exact = _exact(got, ref["mean64_numpy"])
        rel = _max_rel(got, ref["mean64"])
        ok = exact and rel <= 1e-7
        return ok, (
            f"{'==' if exact else '!='} the same call on the raw .npy; {rel:.2g} max rel. off "
            "an independent float64 sum of row blocks (tolerance 1e-7)"
        )
    if step in ("percentile", "percentile-whole", "load"):
        want = ref["percentile"] if step != "load" else ref["mean32"]
        exact = _exact(got, want)
        what = "np.percentile of the raw .npy's column blocks" if step != "load" else "mean"
        return exact, f"{'==' if exact else '!='} {what}, exactly"
    if step == "pca":
        want = ref["pca"]
        c, w = np.asarray(got["components"]), np.asarray(want["components"])
        signs = np.sign(np.sum(c * w, axis=1))[:, None]
        comp = float(np.max(np.abs(c * signs - w)))
        var = _max_rel(got["explained_variance"], want["explained_variance"])
        mean = _max_rel(got["mean"], want["mean"])
        same_n = got["n_samples_seen"] == want["n_samples_seen"]
        exact = comp == 0 and var == 0 and mean == 0
        ok = same_n and comp <= 1e-4 and var <= 1e-5 and mean <= 1e-9
        return ok, (
            f"components up to sign max abs diff {comp:.2g} (tol. 1e-4), explained variance "
            f"{var:.2g} rel. (1e-5), mean {mean:.2g} rel. (1e-9)"
            + ("; bit-identical" if exact else "")
        )
    if step == "filter":
        if ref["filter"] is None:
            return False, "no reference: SciPy was not installed when it was computed"
        same = sum(g == w for g, w in zip(got["sha256"], ref["filter"]["sha256"], strict=True))
        rel = _max_rel(got["sum"], ref["filter"]["sum"])
        return same == COLUMNS, (
            f"{same}/{COLUMNS} columns bit-identical to gaussian_filter1d of the whole raw "
            f"columns (SHA-256); column sums {rel:.2g} max rel. off"
        )
    raise ValueError(f"unknown step {step!r}")


def check_outcome(outcome: Outcome, ref: dict[str, Any]) -> dict[str, tuple[bool, str]]:
    """Each step's check, for a child that completed."""
    assert outcome.report is not None
    return {step: check(step, got, ref) for step, got in outcome.report["results"].items()}


# ---- the benchmark ----


def _load() -> str:
    one, five, _ = os.getloadavg()
    return f"{one:.2f}/{five:.2f}"


def _status(o: Outcome) -> str:
    if o.timed_out:
        return f"**stopped** after the {format_seconds(o.seconds)} time limit"
    if o.killed:
        return f"**killed** (SIGKILL, OOM kills {o.oom_kills})"
    if o.report is None:
        lines = o.stderr.strip().splitlines()
        return f"**failed** rc {o.returncode}: {lines[-1] if lines else ''}"
    return "completed"


def run_benchmark(
    size_bytes: int,
    limit_bytes: int,
    budget_bytes: int,
    directory: str | None,
    keep: bool,
    spill: str,
    workloads: Sequence[str],
    percentile_columns: int,
    timeout: float,
    whole_timeout: float,
) -> Result:
    from oocarray._storage._paged import paging_available

    ok, why = paging_available()
    if not ok:
        return Result(rows=[], tables=[], notes=[f"W11-hard not run: {why}"])
    try:
        with memory_cgroup(limit_bytes):
            pass
    except CgroupUnavailable as error:
        return Result(rows=[], tables=[], notes=[f"W11-hard not run: {error}"])
    made = directory is None
    if directory is None:
        directory = tempfile.mkdtemp(prefix="oocarray-w11-hard-")
    os.makedirs(directory, exist_ok=True)
    notes: list[str] = []
    try:
        data = Data(directory)
        if os.path.exists(data.npy) and data.rows() == size_bytes // ROW_BYTES:
            notes.append(f"data reused from {directory}")
        else:
            for stale in (data.reference_path,):
                with contextlib.suppress(FileNotFoundError):
                    os.remove(stale)
            _, seconds = make_data(directory, size_bytes)
            notes.append(f"data written in {format_seconds(seconds)} (load {_load()})")
        start = time.perf_counter()
        ref = run_reference(data)
        parts = {k: round(v, 1) for k, v in ref["seconds"].items()}
        notes.append(
            f"reference ({ref['pca_which']}) in {format_seconds(time.perf_counter() - start)}"
            f" outside the cgroup, seconds: {json.dumps(parts)}"
        )
        stored = dir_bytes(data.store)
        notes.append(
            f"store: {ref['rows']:,} x {COLUMNS} float32 = {format_mib(ref['rows'] * ROW_BYTES)}"
            f", zstd in {CHUNK_ROWS}-row chunks, {format_mib(stored)} on disk "
            f"({stored / (ref['rows'] * ROW_BYTES):.2f} of raw)"
        )
        outcomes: list[tuple[Outcome, str]] = []
        if "filter" in workloads and not have_scipy():
            workloads = [w for w in workloads if w != "filter"]
            notes.append("filter not run: SciPy is not installed")
        for workload in workloads:
            sides = ["numpy"] if workload == "load" else ["oc", "numpy"]
            for side in sides:
                load = _load()
                print(f"running {workload} on {side} (load {load}) ...", file=sys.stderr)
                o = run_limited(
                    data,
                    [workload],
                    side,
                    limit_bytes=limit_bytes,
                    budget_bytes=budget_bytes,
                    spill=spill,
                    percentile_columns=percentile_columns,
                    timeout=whole_timeout if workload == "percentile-whole" else timeout,
                )
                print(f"  {_status(o)} in {format_seconds(o.seconds)}", file=sys.stderr)
                outcomes.append((o, load))
        table = []
        rows: list[TextRow] = []
        for o, load in outcomes:
            checks = check_outcome(o, ref) if o.report is not None else {}
            steps = list(checks) or list(o.workloads)
            spilled, decoded = "—", "—"
            if o.report is not None and o.side == "oc":
                spilled = format_mib(o.report["manager"]["disk_peak_bytes"])
                decoded = format_mib(sum(p["decoded_bytes"] for p in o.report["paging"]))
            written = format_mib(o.io["write_bytes"]) if "write_bytes" in o.io else "—"
            for step in steps:
                secs = "—" if o.report is None else format_seconds(o.report["seconds"][step])
                ok, detail = checks.get(step, (False, _status(o)))
                table.append(
                    [
                        step,
                        "oocarray" if o.side == "oc" else "NumPy on np.load(npy, mmap_mode='r')",
                        _status(o),
                        secs,
                        format_seconds(o.seconds),
                        "—" if o.peak_bytes is None else format_mib(o.peak_bytes),
                        "—" if o.oom_kills is None else str(o.oom_kills),
                        spilled,
                        written,
                        decoded,
                        load,
                        ("same" if ok else "**differs**") + f": {detail}"
                        if o.report is not None
                        else "—",
                    ]
                )
            if o.side == "oc":
                met = o.report is not None and all(ok for ok, _ in checks.values())
                rows.append(
                    TextRow(
                        id="W11H",
                        workload=f"{'+'.join(o.workloads)} on as_ndarray() of the "
                        f"{format_mib(ref['rows'] * ROW_BYTES)} zstd store, cgroup "
                        f"{format_mib(limit_bytes)}, Manager(max_bytes="
                        f"{format_mib(budget_bytes)}, spill={spill!r})",
                        oocarray=f"{_status(o)} in {format_seconds(o.seconds)}",
                        peer="see the table",
                        ratio="—",
                        target="completes, same results as on the raw data, no OOM kill",
                        met="yes" if met else "**no**",
                    )
                )
        return Result(
            rows=rows,
            tables=[
                Table(
                    title=(
                        f"W11-hard: {format_mib(ref['rows'] * ROW_BYTES)} (N, 64) float32, "
                        f"cgroup limit {format_mib(limit_bytes)} (page cache counted), "
                        f"budget {format_mib(budget_bytes)}, spill={spill!r}, percentile "
                        f"column blocks of {percentile_columns}"
                    ),
                    headers=(
                        "step",
                        "side",
                        "outcome",
                        "step time",
                        "child wall",
                        "cgroup peak",
                        "OOM kills",
                        "spill files (peak)",
                        "written to disk",
                        "chunks decoded",
                        "load 1/5 min",
                        "result",
                    ),
                    rows=table,
                )
            ],
            notes=notes,
        )
    finally:
        if made and not keep:
            shutil.rmtree(directory, ignore_errors=True)
        elif not keep:
            for name in ("x.zarr", "x.npy", "reference.json", "spill"):
                path = os.path.join(directory, name)
                if os.path.isdir(path):
                    shutil.rmtree(path, ignore_errors=True)
                else:
                    with contextlib.suppress(FileNotFoundError):
                        os.remove(path)


def run(quick: bool = False) -> Result:
    """``python -m benchmarks --large --only W11H``: 8 GiB in 1 GiB (``--quick``: 256 MiB in
    128 MiB), every workload."""
    if quick:
        return run_benchmark(
            256 * MiB, 128 * MiB, 32 * MiB, None, False, "mmap", WORKLOADS, 4, 600, 600
        )
    return run_benchmark(8 * GiB, GiB, 768 * MiB, None, False, "mmap", WORKLOADS, 4, 3600, 420)


def _size(text: str) -> int:
    from oocarray._memory._units import parse_size

    value = parse_size(text)
    assert value is not None
    return value


def main(argv: list[str]) -> int:
    if argv[:1] == ["--child"]:
        workloads, side, directory, budget, spill, columns = argv[1:7]
        report = child(workloads.split(","), side, directory, int(budget), spill, int(columns))
        print(json.dumps(report))
        return 0
    if argv[:1] == ["--reference"]:
        data = Data(argv[1])
        ref = compute_reference(data)
        Path(data.reference_path).write_text(json.dumps(ref))
        return 0
    parser = argparse.ArgumentParser(prog="python -m benchmarks.w11_hard", description=__doc__)
    parser.add_argument("--size", type=_size, default=8 * GiB, help="logical bytes (8G)")
    parser.add_argument("--limit", type=_size, default=GiB, help="cgroup memory limit (1G)")
    parser.add_argument("--budget", type=_size, help="Manager(max_bytes=...) (3/4 of the limit)")
    parser.add_argument("--dir", help="where the data goes (default: a new temporary dir)")
    parser.add_argument("--keep", action="store_true", help="keep the data afterwards")
    parser.add_argument("--spill", default="mmap", choices=("mmap", "evict", "zarr"))
    parser.add_argument(
        "--only", default=",".join(WORKLOADS), help=f"workloads, of {','.join(WORKLOADS)}"
    )
    parser.add_argument("--percentile-columns", type=int, default=4)
    parser.add_argument("--timeout", type=float, default=3600, help="seconds per child")
    parser.add_argument(
        "--whole-timeout", type=float, default=420, help="seconds for percentile-whole"
    )
    args = parser.parse_args(argv)
    workloads = [w for w in args.only.split(",") if w]
    unknown = set(workloads) - set(WORKLOADS)
    if unknown:
        parser.error(f"unknown workloads {sorted(unknown)}; known: {', '.join(WORKLOADS)}")
    if COLUMNS % args.percentile_columns:
        parser.error(f"--percentile-columns must divide {COLUMNS}")
    result = run_benchmark(
        args.size,
        args.limit,
        args.budget if args.budget is not None else args.limit * 3 // 4,
        args.dir,
        args.keep,
        args.spill,
        workloads,
        args.percentile_columns,
        args.timeout,
        args.whole_timeout,
    )
    from benchmarks._timing import ROW_HEADERS, markdown_table

    print(f"python -m benchmarks.w11_hard {' '.join(argv)}")
    print(markdown_table(ROW_HEADERS, [r.cells() for r in result.rows]))
    for t in result.tables:
        print()
        print(t.render())
    print()
    for note in result.notes:
        print(f"- {note}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
