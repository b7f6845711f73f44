"""W11-hard's data: the (N, 64) float32 signal, written as a zstd zarr store and a raw .npy,
and the constants the workloads share."""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

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
ROOT = Path(__file__).resolve().parent.parent.parent  # the repository
STEPS = ("mean", "percentile", "pca", "filter")
WORKLOADS = (*STEPS, "percentile-whole", "load")


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
