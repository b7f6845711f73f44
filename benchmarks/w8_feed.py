"""W8: a training feed.  One epoch of shuffled batches of 1024 rows from a (N, 256) float32
zstd zarr array (4 GiB; 256 MiB with ``--quick``) of noisy data, oocarray against the torch
DataLoader recipes, and the ingest that writes such an array.

Sides, each one epoch unless said (rows/s, resident memory of the process and its workers
sampled every 0.1 s, and a check that every row came exactly once, from column 0 = row id):

- ``oc.batches(x, 1024, shuffle="chunks")`` in the process, and its ``.torch()`` dataset in a
  ``DataLoader(batch_size=None)`` with 0 and 2 workers (fork);
- (b) the expert recipe: an ``IterableDataset`` reading whole chunks through zarr-python in a
  random order (chunks split over the workers), shuffling rows within a window of 8 chunks,
  yielding 1024-row tensors; ``DataLoader(batch_size=None)``, 0 and 2 workers;
- (a) a map-style dataset of single rows through zarr-python, ``BatchSampler(RandomSampler)``
  of 1024; every row decodes a whole chunk, so a fixed number of batches is timed and the
  rate extrapolated to the epoch (said in the table).

Ingest: the same blocks (16384 rows, in memory) written by ``oc.from_batches`` and by
zarr-python (``z[a:b] = block`` into an array of the same chunks and codec), alternating.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import statistics
import tempfile
import threading
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import psutil

import oocarray as oc
from benchmarks._compute_data import warm
from benchmarks._harness import evict_page_cache, marked_cold
from benchmarks._timing import Result, Table, TextRow, clock, format_mib
from datasets import w8_data

BATCH = 1024
WINDOW = 8


class _Rss:
    """Resident memory of this process and its children, sampled every 0.1 s."""

    def __init__(self) -> None:
        self.samples: list[int] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        me = psutil.Process()
        while not self._stop.wait(0.1):
            total = 0
            for p in [me, *me.children(recursive=True)]:
                with contextlib.suppress(psutil.Error):  # a worker that just exited
                    total += p.memory_info().rss
            self.samples.append(total)

    def __enter__(self) -> _Rss:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def summary(self) -> str:
        s = self.samples or [psutil.Process().memory_info().rss]
        tenth = max(1, len(s) // 10)
        first, last = statistics.median(s[:tenth]), statistics.median(s[-tenth:])
        return f"{format_mib(int(first))} -> {format_mib(int(last))} (max {format_mib(max(s))})"


def _epoch(
    batches: Iterator[Any], n_rows: int, limit: int | None = None
) -> tuple[float, int, bool]:
    """Seconds, rows and whether every row came once (None limit: the whole epoch)."""
    counts = np.zeros(n_rows, dtype=np.int32)
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


def _feed_sides(path: str) -> dict[str, Callable[[], Any]]:
    import torch
    from torch.utils.data import BatchSampler, DataLoader, RandomSampler

    x = oc.open(path)

    def ours() -> Iterator[Any]:
        return iter(oc.batches(x, BATCH, shuffle="chunks", seed=1, prefetch=4))

    def ours_torch(workers: int) -> Callable[[], Iterator[Any]]:
        def make() -> Iterator[Any]:
            ds = oc.batches(x, BATCH, shuffle="chunks", seed=1, prefetch=4).torch()
            return iter(DataLoader(ds, batch_size=None, num_workers=workers))

        return make

    def expert(workers: int) -> Callable[[], Iterator[Any]]:
        def make() -> Iterator[Any]:
            ds = _expert_dataset(path, 1)
            return iter(DataLoader(ds, batch_size=None, num_workers=workers))

        return make

    def rows(workers: int) -> Callable[[], Iterator[Any]]:
        def make() -> Iterator[Any]:
            ds = _row_dataset(path)
            sampler = BatchSampler(
                RandomSampler(ds, generator=torch.Generator().manual_seed(1)), BATCH, False
            )
            return iter(DataLoader(ds, batch_sampler=sampler, num_workers=workers))

        return make

    return {
        "oc.batches, in process": ours,
        "oc .torch(), 0 workers": ours_torch(0),
        "oc .torch(), 2 workers": ours_torch(2),
        "(b) chunk-shuffle IterableDataset, 0 workers": expert(0),
        "(b) chunk-shuffle IterableDataset, 2 workers": expert(2),
        "(a) random rows + BatchSampler, 0 workers": rows(0),
        "(a) random rows + BatchSampler, 2 workers": rows(2),
    }


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


def run(quick: bool = False, cold: bool = False) -> Result:
    nbytes = (256 << 20) if quick else (4 << 30)
    n_rows = w8_data.rows_for(nbytes)
    directory = tempfile.mkdtemp(prefix="oocarray-w8-", dir=os.environ.get("W8_DIR"))
    notes = []
    try:
        path = os.path.join(directory, "x.zarr")
        start = clock()
        w8_data.write_zarr(path, n_rows)
        made = clock() - start
        stored = sum(
            os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(path) for f in files
        )
        if not cold:
            warm(path)
        ingest_rows = min(n_rows, w8_data.rows_for(1 << 30))
        ours_s, theirs_s, ingest_bytes = _ingest(directory, ingest_rows, 2 if quick else 3)
        sides = _feed_sides(path)
        rounds = 1 if quick else 2
        results: dict[str, list[tuple[float, int, bool, str, bool]]] = {k: [] for k in sides}
        for r in range(rounds):
            for name, make in sides.items():
                if r and name.startswith("(a)"):
                    continue
                limit = None
                if name.startswith("(a)"):
                    limit = 1 if "0 workers" in name else 4
                if cold:
                    evict_page_cache([path])
                with _Rss() as rss:
                    seconds, rows, once = _epoch(make(), n_rows, limit)
                results[name].append((seconds, rows, once, rss.summary(), limit is not None))
        table_rows = []
        rate: dict[str, float] = {}
        for name, runs in results.items():
            seconds, rows, once, memory, extrapolated = min(runs, key=lambda t: t[0] / t[1])
            rate[name] = rows / seconds
            epoch_s = n_rows / rate[name]
            what = f"{rows} rows of {n_rows}, extrapolated" if extrapolated else "one epoch"
            table_rows.append(
                [
                    name,
                    f"{rate[name]:,.0f}",
                    f"{epoch_s:,.1f} s" + (" (est.)" if extrapolated else ""),
                    what,
                    "yes" if once else "**no**",
                    memory,
                ]
            )
        best_b = max(v for k, v in rate.items() if k.startswith("(b)"))
        best_a = max(v for k, v in rate.items() if k.startswith("(a)"))
        mine = rate["oc.batches, in process"]
        best_ours = max(v for k, v in rate.items() if k.startswith("oc"))
        rows_out = [
            TextRow(
                "W8",
                'shuffle="chunks" batches vs best (b) chunk-shuffle DataLoader, rows/s',
                f"{mine:,.0f}/s",
                f"{best_b:,.0f}/s",
                f"{mine / best_b:.2f}x",
                ">= 1.50x",
                "yes" if mine / best_b >= 1.5 else "**no**",
            ),
            TextRow(
                "W8",
                'shuffle="chunks" batches vs best (a) random-row DataLoader, rows/s',
                f"{mine:,.0f}/s",
                f"{best_a:,.0f}/s",
                f"{mine / best_a:,.0f}x",
                ">= 100x",
                "yes" if mine / best_a >= 100 else "**no**",
            ),
            TextRow(
                "W8i",
                f"ingest {format_mib(ingest_bytes)} in 16384-row blocks, from_batches vs "
                "zarr-python",
                f"{ingest_bytes / ours_s / 2**20:,.0f} MiB/s",
                f"{ingest_bytes / theirs_s / 2**20:,.0f} MiB/s",
                f"{theirs_s / ours_s:.2f}x",
                "—",
                "n/a",
            ),
        ]
        notes.append(
            f"W8: {format_mib(n_rows * w8_data.ROW_BYTES)} array ({n_rows} rows, chunks "
            f"{w8_data.CHUNK_ROWS}x256, zstd level 3, {format_mib(stored)} on disk) written by "
            f"oc.from_batches in {made:.1f} s; "
            + ("evicted from the page cache before each epoch" if cold else "page cache warm")
            + "; best oc side "
            f"{best_ours:,.0f} rows/s; load average before the feed "
            f"{' '.join(f'{v:.2f}' for v in os.getloadavg())}"
        )
        table = Table(
            "W8 feed: one epoch of 1024-row shuffled batches (rows/s; RSS of the process and "
            "its workers, first tenth -> last tenth of the epoch, and the max)",
            ("side", "rows/s", "epoch", "measured", "each row once", "RSS"),
            table_rows,
        )
        result = Result(rows_out, [table], notes)
        return marked_cold(result, ids=["W8"]) if cold else result  # (W8i writes: no reads)
    finally:
        shutil.rmtree(directory, ignore_errors=True)
