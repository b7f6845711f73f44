"""W8: a training feed.  One epoch of shuffled batches of 1024 rows from a (N, 256) float32
zstd zarr array (4 GiB; 256 MiB with ``--quick``) of noisy data, oocarray against the torch
DataLoader recipes and litdata, and the ingest that writes such an array.

Sides, each one epoch unless said, each run in a fresh process (so that one side's resident
memory is not left to the next) with no network (a network namespace of its own where the
system allows one, and a check that refuses any socket to another machine): rows/s, resident
memory of the process and its workers sampled every 0.05 s, and a check that every row came
exactly once, from column 0 = row id:

- ``oc.batches(x, 1024, shuffle="chunks")`` in the process, and its ``.torch()`` dataset in a
  ``DataLoader(batch_size=None)`` with 0 and 2 workers (fork);
- (b) the expert recipe: an ``IterableDataset`` reading whole chunks through zarr-python in a
  random order (chunks split over the workers), shuffling rows within a window of 8 chunks,
  yielding 1024-row tensors; ``DataLoader(batch_size=None)``, 0 and 2 workers; and the same
  with zarr-python decoding through the zarrs (Rust) codec pipeline, where zarrs installs;
- (a) a map-style dataset of single rows through zarr-python, ``BatchSampler(RandomSampler)``
  of 1024; every row decodes a whole chunk, so a fixed number of batches is timed and the
  rate extrapolated to the epoch (said in the table);
- litdata: the same rows written once by ``litdata.optimize`` (untimed, next to the zarr
  array, its time reported apart) into chunks of 64 MB, litdata's documented default, without
  compression (litdata's default; its zstd needs a package not installed here), then
  ``StreamingDataLoader(StreamingDataset(dir), batch_size=1024, shuffle=True)`` with 0 and 2
  workers.  Its files are evicted with the zarr array's in ``--cold`` runs.

Resident memory: each side's process starts with numpy, torch, zarr and oocarray imported
(the baseline every side carries); the table gives its RSS when the epoch starts, the peak of
the process and its workers together (RSS, and PSS, which counts pages the forked workers
share with their parent once), and first tenth -> last tenth of the epoch (flat or not).

Ingest: the same blocks (16384 rows, in memory) written by ``oc.from_batches`` and by
zarr-python (``z[a:b] = block`` into an array of the same chunks and codec), alternating.
"""

from __future__ import annotations

import contextlib
import gc
import importlib.util
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

import oocarray as oc
from benchmarks._compute_data import warm
from benchmarks._harness import Peer, Sides, checkout_env, marked_cold
from benchmarks._processes import descendants
from benchmarks._timing import Result, Table, TextRow, clock, format_mib
from datasets import w8_data

BATCH = 1024
WINDOW = 8
LITDATA_CHUNK_BYTES = "64MB"  # litdata's documented default chunk size
# litdata asks PyPI for a newer version unless told not to; it must not reach the network.
_NO_PHONING_HOME = {"LITDATA_DISABLE_VERSION_CHECK": "1", "LITDATA_CHECK_UPDATES": "0"}
_SAMPLE_SECONDS = 0.05
_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# ---- in the side's own process ----


def _memory(pid: int) -> tuple[int, int]:
    """RSS and PSS bytes of process ``pid`` (0, 0 once it has exited)."""
    rss = pss = 0
    with contextlib.suppress(OSError), open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            if line.startswith("Rss:"):
                rss = int(line.split()[1]) * 1024
            elif line.startswith("Pss:"):
                pss = int(line.split()[1]) * 1024
    return rss, pss


def _peak_of_this_process() -> int:
    """The kernel's high-water mark of this process's RSS (every page fault counted)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return 0


class _Sampler:
    """Resident memory of this process and its workers, every 0.05 s, from the start of the
    epoch (the kernel's high-water mark of this process reset there, and read at the end)."""

    def __init__(self) -> None:
        self.rss: list[int] = []
        self.pss: list[int] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _sample(self) -> None:
        pids = [os.getpid(), *descendants(os.getpid())]
        rss = pss = 0
        for pid in pids:
            r, p = _memory(pid)
            rss, pss = rss + r, pss + p
        self.rss.append(rss)
        self.pss.append(pss)

    def _run(self) -> None:
        while not self._stop.wait(_SAMPLE_SECONDS):
            self._sample()

    def __enter__(self) -> _Sampler:
        with contextlib.suppress(OSError), open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # resets VmHWM to the current RSS
        self.start_rss = _memory(os.getpid())[0]
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._sample()
        self.peak_rss = max(max(self.rss), _peak_of_this_process())
        self.peak_pss = max(self.pss)
        tenth = max(1, len(self.rss) // 10)
        self.first = int(statistics.median(self.rss[:tenth]))
        self.last = int(statistics.median(self.rss[-tenth:]))


def _refuse_network() -> None:
    """Any socket towards another machine, from this process or its forked workers, raises
    (an audit hook: the workers inherit it)."""

    def hook(event: str, args: tuple[Any, ...]) -> None:
        if event == "socket.getaddrinfo" and args[0] not in (None, "localhost", "127.0.0.1"):
            raise RuntimeError(f"W8 sides must not reach the network: getaddrinfo{args[:2]}")
        if event == "socket.connect":
            address = args[1]
            if isinstance(address, tuple) and address[0] not in ("127.0.0.1", "::1", "localhost"):
                raise RuntimeError(f"W8 sides must not reach the network: connect to {address}")

    sys.addaudithook(hook)


def _epoch(
    batches: Iterator[Any], counts: np.ndarray, limit: int | None = None
) -> tuple[float, int, bool]:
    """Seconds, rows and whether every row came once (None limit: the whole epoch), counted in
    ``counts`` (zeros, one per row)."""
    rows = 0
    start = clock()
    for i, batch in enumerate(batches):
        ids = np.asarray(batch[:, 0]).astype(np.int64)
        counts[ids] += 1
        rows += len(ids)
        del batch
        if limit is not None and i + 1 == limit:
            break
    seconds = clock() - start
    once = bool((counts == 1).all()) if limit is None else bool(counts.max() <= 1)
    return seconds, rows, once


def _expert_dataset(path: str, seed: int) -> Any:
    import torch
    import zarr
    from torch.utils.data import IterableDataset, get_worker_info

    class ChunkShuffle(IterableDataset[Any]):
        """Whole chunks in a random order, rows shuffled within windows of 8 chunks."""

        def __iter__(self) -> Iterator[Any]:
            z = zarr.open_array(path, mode="r")
            per = z.chunks[0]
            n_chunks = -(-z.shape[0] // per)
            info = get_worker_info()
            worker, workers = (0, 1) if info is None else (info.id, info.num_workers)
            rng = np.random.default_rng(seed)
            mine = rng.permutation(n_chunks)[worker::workers]
            for w in range(0, len(mine), WINDOW):
                data = np.concatenate([z[c * per : (c + 1) * per] for c in mine[w : w + WINDOW]])
                data = data[rng.permutation(len(data))]
                for i in range(0, len(data), BATCH):
                    yield torch.from_numpy(data[i : i + BATCH])

    return ChunkShuffle()


def _row_dataset(path: str) -> Any:
    import torch
    import zarr
    from torch.utils.data import Dataset

    class Rows(Dataset[Any]):
        def __init__(self) -> None:
            self.z: Any = None

        def __len__(self) -> int:
            return int(zarr.open_array(path, mode="r").shape[0])

        def __getitem__(self, i: int) -> Any:
            if self.z is None:
                self.z = zarr.open_array(path, mode="r")
            return torch.from_numpy(self.z[i])

    return Rows()


def _litdata_rows(block: int, n_rows: int) -> Iterator[np.ndarray]:
    """``litdata.optimize``'s function: the rows of one W8 block, one item each."""
    yield from w8_data.block(block, n_rows)


def _optimize(lit_dir: str, n_rows: int) -> None:
    import functools

    import litdata

    litdata.optimize(
        fn=functools.partial(_litdata_rows, n_rows=n_rows),
        inputs=list(range(-(-n_rows // w8_data.BLOCK_ROWS))),
        output_dir=lit_dir,
        chunk_bytes=LITDATA_CHUNK_BYTES,
        num_workers=2,
        reorder_files=False,
        start_method="fork",  # the workers inherit the network check
        verbose=False,
    )


def _batches_of(side: str, path: str, lit_dir: str) -> Callable[[], Iterator[Any]]:
    """How side ``side`` makes the iterator of one epoch (its objects built here, untimed)."""
    import torch
    from torch.utils.data import BatchSampler, DataLoader, RandomSampler

    workers = 2 if "2 workers" in side else 0
    if side == "oc.batches, in process":
        x = oc.open(path)
        return lambda: iter(oc.batches(x, BATCH, shuffle="chunks", seed=1, prefetch=4))
    if side.startswith("oc .torch()"):
        ds = oc.batches(oc.open(path), BATCH, shuffle="chunks", seed=1, prefetch=4).torch()
        return lambda: iter(DataLoader(ds, batch_size=None, num_workers=workers))
    if side.startswith("(b)"):
        if "zarrs" in side:  # (set in this fresh process: its forked workers inherit it)
            import zarr

            zarr.config.set({"codec_pipeline.path": "zarrs.ZarrsCodecPipeline"})
        expert = _expert_dataset(path, 1)
        return lambda: iter(DataLoader(expert, batch_size=None, num_workers=workers))
    if side.startswith("(a)"):
        rows = _row_dataset(path)
        sampler = BatchSampler(
            RandomSampler(rows, generator=torch.Generator().manual_seed(1)), BATCH, False
        )
        return lambda: iter(DataLoader(rows, batch_sampler=sampler, num_workers=workers))
    if side.startswith("litdata"):
        import litdata

        streamed = litdata.StreamingDataset(
            lit_dir, shuffle=True, seed=1, cache_dir=os.path.join(lit_dir, "cache")
        )
        return lambda: iter(
            litdata.StreamingDataLoader(
                streamed, batch_size=BATCH, shuffle=True, num_workers=workers
            )
        )
    raise ValueError(f"no W8 side {side!r}")


@dataclass(frozen=True, slots=True)
class _Measured:
    """One epoch of one side, as its process reports it."""

    seconds: float
    rows: int
    once: bool
    limited: bool
    start_rss: int
    peak_rss: int
    peak_pss: int
    first_rss: int
    last_rss: int


def _limit(side: str) -> int | None:
    if side.startswith("(a)"):
        return 1 if "0 workers" in side else 4
    return None


def side_process() -> None:
    """The entry of a side's process: ``argv[1]`` says what to do; one JSON line out."""
    task = json.loads(sys.argv[1])
    _refuse_network()
    import torch  # noqa: F401  (the baseline every side carries)
    import zarr  # noqa: F401

    if task["side"] == "baseline":
        print(json.dumps({"rss": _memory(os.getpid())[0]}))
        return
    if task["side"] == "optimize":
        start = clock()
        _optimize(task["lit_dir"], task["n_rows"])
        print(json.dumps({"seconds": clock() - start}))
        return
    make = _batches_of(task["side"], task["path"], task["lit_dir"])
    limit = _limit(task["side"])
    # The check's counts are resident before the epoch starts: its memory is not the side's.
    counts = np.zeros(task["n_rows"], dtype=np.int32)
    counts[:] = 0
    gc.collect()
    with _Sampler() as memory:
        seconds, rows, once = _epoch(make(), counts, limit)
    measured = _Measured(
        seconds,
        rows,
        once,
        limit is not None,
        memory.start_rss,
        memory.peak_rss,
        memory.peak_pss,
        memory.first,
        memory.last,
    )
    print(json.dumps(asdict(measured)))


# ---- in the runner's process ----


def _no_network_prefix() -> list[str]:
    """``unshare --net``: a network namespace with nothing but a loopback that is down, where
    the system allows it (root); otherwise only the audit hook guards."""
    unshare = shutil.which("unshare")
    if unshare is None:
        return []
    probe = subprocess.run([unshare, "--net", "true"], capture_output=True, check=False)
    return [unshare, "--net"] if probe.returncode == 0 else []


def _in_fresh_process(prefix: list[str], task: dict[str, Any]) -> dict[str, Any]:
    env = checkout_env({**os.environ, **_NO_PHONING_HOME})
    code = "import benchmarks.w8_feed as w; w.side_process()"
    done = subprocess.run(
        [*prefix, sys.executable, "-c", code, json.dumps(task)],
        capture_output=True,
        text=True,
        env=env,
        cwd=_ROOT,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"W8 side {task['side']!r} failed:\n{done.stderr[-4000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


SIDES = {
    "oc.batches, in process": None,
    "oc .torch(), 0 workers": None,
    "oc .torch(), 2 workers": None,
    "(b) chunk-shuffle IterableDataset, 0 workers": None,
    "(b) chunk-shuffle IterableDataset, 2 workers": None,
    "(b) chunk-shuffle IterableDataset over zarrs, 0 workers": "zarrs",
    "(b) chunk-shuffle IterableDataset over zarrs, 2 workers": "zarrs",
    "(a) random rows + BatchSampler, 0 workers": None,
    "(a) random rows + BatchSampler, 2 workers": None,
    "litdata StreamingDataLoader, 0 workers": "litdata",
    "litdata StreamingDataLoader, 2 workers": "litdata",
}


def _peers(
    prefix: list[str], path: str, lit_dir: str, n_rows: int, out: dict[str, list[_Measured]]
) -> dict[str, Peer]:
    """Every side as a peer of the harness; a side whose library is missing is missing."""

    def maker(side: str, library: str | None) -> Callable[[], Callable[[], tuple[float, object]]]:
        def make() -> Callable[[], tuple[float, object]]:
            for name in ("torch", "zarr", library):
                if name is not None and importlib.util.find_spec(name) is None:
                    raise ImportError(f"No module named {name!r}")
            out[side] = []

            def run() -> tuple[float, object]:
                task = {"side": side, "path": path, "lit_dir": lit_dir, "n_rows": n_rows}
                measured = _Measured(**_in_fresh_process(prefix, task))
                out[side].append(measured)
                # seconds of a whole epoch at this rate (extrapolated for the (a) sides)
                return n_rows * measured.seconds / measured.rows, measured

            return run

        return make

    return {side: Peer(side, maker(side, library)) for side, library in SIDES.items()}


def _ingest(directory: str, n_rows: int, rounds: int) -> tuple[float, float, int]:
    """Seconds per write of ``n_rows`` rows by from_batches and by zarr-python, and bytes."""
    import zarr
    import zarr.codecs

    held = list(w8_data.blocks(n_rows))
    ours_t, theirs_t = [], []
    for r in range(rounds):
        order = ("ours", "theirs") if r % 2 == 0 else ("theirs", "ours")
        for side in order:
            path = os.path.join(directory, f"ingest-{side}.zarr")
            shutil.rmtree(path, ignore_errors=True)
            start = clock()
            if side == "ours":
                oc.from_batches(iter(held), path, chunks=(w8_data.CHUNK_ROWS, w8_data.COLUMNS))
                ours_t.append(clock() - start)
            else:
                z = zarr.create_array(
                    store=path,
                    shape=(n_rows, w8_data.COLUMNS),
                    chunks=(w8_data.CHUNK_ROWS, w8_data.COLUMNS),
                    dtype="f4",
                    compressors=zarr.codecs.ZstdCodec(level=3),
                    fill_value=0,
                )
                at = 0
                for block in held:
                    z[at : at + len(block)] = block
                    at += len(block)
                theirs_t.append(clock() - start)
            shutil.rmtree(path, ignore_errors=True)
    return min(ours_t), min(theirs_t), sum(b.nbytes for b in held)


def _disk_bytes(path: str) -> int:
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(path) for f in files)


def _side_row(name: str, runs: list[_Measured], n_rows: int) -> list[str]:
    rate = statistics.median(m.rows / m.seconds for m in runs)
    limited = runs[0].limited
    what = f"{runs[0].rows} rows of {n_rows}, extrapolated" if limited else "one epoch"
    peak = int(statistics.median(m.peak_rss for m in runs))
    start = int(statistics.median(m.start_rss for m in runs))
    return [
        name,
        f"{rate:,.0f}",
        f"{n_rows / rate:,.1f} s" + (" (est.)" if limited else ""),
        what,
        "yes" if all(m.once for m in runs) else "**no**",
        f"{format_mib(start)} -> {format_mib(peak)} (+{format_mib(peak - start)})",
        format_mib(int(statistics.median(m.peak_pss for m in runs))),
        " ; ".join(f"{format_mib(m.first_rss)} -> {format_mib(m.last_rss)}" for m in runs),
    ]


def run(quick: bool = False, cold: bool = False) -> Result:
    nbytes = (256 << 20) if quick else (4 << 30)
    n_rows = w8_data.rows_for(nbytes)
    directory = tempfile.mkdtemp(prefix="oocarray-w8-", dir=os.environ.get("W8_DIR"))
    notes = []
    try:
        path = os.path.join(directory, "x.zarr")
        lit_dir = os.path.join(directory, "litdata")
        start = clock()
        w8_data.write_zarr(path, n_rows)
        made = clock() - start
        stored = _disk_bytes(path)
        ingest_rows = min(n_rows, w8_data.rows_for(1 << 30))
        ours_s, theirs_s, ingest_bytes = _ingest(directory, ingest_rows, 2 if quick else 3)
        prefix = _no_network_prefix()
        measured: dict[str, list[_Measured]] = {}
        sides = Sides.discover("W8", _peers(prefix, path, lit_dir, n_rows, measured))
        notes += sides.notes()
        files = [path]
        if any(name.startswith("litdata") for name in sides.runs):
            task = {"side": "optimize", "lit_dir": lit_dir, "n_rows": n_rows}
            optimized = _in_fresh_process(prefix, task)["seconds"]
            files.append(lit_dir)
            notes.append(
                f"W8: litdata.optimize wrote the same {n_rows} rows (one item a row) in "
                f"{optimized:.1f} s, untimed, into {LITDATA_CHUNK_BYTES} chunks, uncompressed "
                f"({format_mib(_disk_bytes(lit_dir))} on disk)"
            )
        if not cold:
            for f in files:
                warm(f)
        baseline = _in_fresh_process(prefix, {"side": "baseline"})["rss"]
        load = " ".join(f"{v:.2f}" for v in os.getloadavg())
        sides.time(1 if quick else 2, files, cold=cold)

        rate = {k: statistics.median(m.rows / m.seconds for m in v) for k, v in measured.items()}
        peak = {k: statistics.median(m.peak_rss for m in v) for k, v in measured.items()}
        mine = rate["oc.batches, in process"]
        rows_out = []
        for prefix_, what, target in (
            ("(b)", "best (b) chunk-shuffle DataLoader", 1.5),
            ("(a)", "best (a) random-row DataLoader", 100.0),
            ("litdata", "best litdata StreamingDataLoader", 1.0),
        ):
            theirs = [v for k, v in rate.items() if k.startswith(prefix_)]
            if not theirs:
                continue
            ratio = mine / max(theirs)
            met = ratio > target if target == 1.0 else ratio >= target
            rows_out.append(
                TextRow(
                    "W8",
                    f'shuffle="chunks" batches vs {what}, rows/s',
                    f"{mine:,.0f}/s",
                    f"{max(theirs):,.0f}/s",
                    f"{ratio:,.2f}x" if ratio < 100 else f"{ratio:,.0f}x",
                    f">= {target:,.2f}x" if target != 1.0 else "> 1.00x",
                    "yes" if met else "**no**",
                )
            )
        loaders = {k: v for k, v in peak.items() if k.startswith(("(b)", "litdata"))}
        lowest = min(loaders, key=lambda k: loaders[k])
        ours_peak = peak["oc.batches, in process"]
        rows_out.append(
            TextRow(
                "W8",
                "peak RSS of the epoch (process and workers), oc.batches vs the lowest of "
                f"the chunk-shuffle and litdata loaders ({lowest})",
                format_mib(int(ours_peak)),
                format_mib(int(loaders[lowest])),
                f"{ours_peak / loaders[lowest]:.2f}x",
                "<= 1.00x",
                "yes" if ours_peak <= loaders[lowest] else "**no**",
            )
        )
        rows_out.append(
            TextRow(
                "W8i",
                f"ingest {format_mib(ingest_bytes)} in 16384-row blocks, from_batches vs "
                "zarr-python",
                f"{ingest_bytes / ours_s / 2**20:,.0f} MiB/s",
                f"{ingest_bytes / theirs_s / 2**20:,.0f} MiB/s",
                f"{theirs_s / ours_s:.2f}x",
                "—",
                "n/a",
            )
        )
        notes.append(
            f"W8: {format_mib(n_rows * w8_data.ROW_BYTES)} array ({n_rows} rows, chunks "
            f"{w8_data.CHUNK_ROWS}x256, zstd level 3, {format_mib(stored)} on disk) written by "
            f"oc.from_batches in {made:.1f} s; "
            + ("evicted from the page cache before each epoch" if cold else "page cache warm")
            + "; each side's epoch in a fresh process "
            + ("in a network namespace of its own" if prefix else "(no network namespace)")
            + f"; the interpreter with numpy, torch, zarr and oocarray imported: "
            f"{format_mib(baseline)} RSS; load average before the feed {load}"
        )
        table_rows = [_side_row(name, runs, n_rows) for name, runs in measured.items() if runs]
        table = Table(
            "W8 feed: one epoch of 1024-row shuffled batches, each side in a fresh process "
            "(median rows/s of the rounds; RSS of the process and its workers: at the start of "
            "the epoch -> its peak, the peak's PSS, and first tenth -> last tenth of each round)",
            ("side", "rows/s", "epoch", "measured", "each row once", "RSS", "PSS", "RSS flat"),
            table_rows,
        )
        result = Result(rows_out, [table], notes)
        return marked_cold(result, ids=["W8"]) if cold else result  # (W8i writes: no reads)
    finally:
        shutil.rmtree(directory, ignore_errors=True)
