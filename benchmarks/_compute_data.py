"""Shared setup of the compute benchmarks (W5, W6, W9): the noisy (N, 64) float32 data on disk,
peak resident memory of a side run in a fresh process, and the peers' availability."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass

import numpy as np

from benchmarks._disk import free_bytes
from benchmarks._harness import checkout_env, files_under
from datasets import w5_data

MiB = 1 << 20
GiB = 1 << 30
CHUNK_ROWS = 16_384  # 4 MiB chunks of (16384, 64) float32


@dataclass(frozen=True, slots=True)
class Data:
    """The input of W5/W6: one zstd zarr array and a raw .npy of the same values."""

    directory: str
    n_rows: int
    zarr_path: str
    npy_path: str | None

    @property
    def nbytes(self) -> int:
        return self.n_rows * w5_data.ROW_BYTES


def make_data(directory: str, nbytes: int, npy: bool = True) -> tuple[Data, float]:
    """Writes the zarr (oocarray's own writer, zstd) and, with ``npy``, the raw .npy; returns
    them and the seconds it took (untimed by the benchmarks)."""
    n_rows = w5_data.rows_for(nbytes)
    start = time.perf_counter()
    zarr_path = os.path.join(directory, "x.zarr")
    w5_data.write_zarr(zarr_path, n_rows, CHUNK_ROWS, "zstd")
    npy_path = None
    if npy:
        npy_path = os.path.join(directory, "x.npy")
        w5_data.write_npy(npy_path, n_rows)
    return Data(directory, n_rows, zarr_path, npy_path), time.perf_counter() - start


def dir_bytes(path: str) -> int:
    return sum(os.path.getsize(p) for p in files_under([path]))


def warm(path: str) -> None:
    """Reads every file under ``path`` once, so every side starts from a warm page cache."""
    for p in files_under([path]):
        with open(p, "rb", buffering=0) as f:
            while f.read(64 * MiB):
                pass


def enough_disk(directory: str, need: int) -> bool:
    return free_bytes(directory) >= need


def version(module: str) -> str | None:
    """The module's version, or None when it cannot be imported (the peer is missing)."""
    try:
        mod = __import__(module)
    except ImportError:
        return None
    found = getattr(mod, "__version__", None)
    if found is None:
        from importlib import metadata

        try:
            found = metadata.version(module)
        except metadata.PackageNotFoundError:
            found = "?"
    return str(found)


def moments_close(
    got: tuple[np.ndarray, np.ndarray], expected: tuple[np.ndarray, np.ndarray], who: str
) -> None:
    for name, g, e in zip(("mean", "std"), got, expected, strict=True):
        g = np.asarray(g, dtype=np.float64)
        if g.shape != e.shape or not np.allclose(g, e, rtol=1e-4, atol=1e-4):
            raise RuntimeError(
                f"{who}: {name} differs from the float64 reference by "
                f"{np.max(np.abs(g - e)) if g.shape == e.shape else g.shape}"
            )


# ---- peak resident memory of a side, in a fresh process --------------------------------

_FIELDS = ("VmHWM", "VmRSS", "RssAnon", "RssFile", "RssShmem")


def _status(pid: int | str = "self") -> dict[str, int]:
    out: dict[str, int] = {}
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key in _FIELDS:
                    out[key] = int(value.split()[0]) * 1024
    except (OSError, ValueError):
        pass
    return out


def status_json() -> str:
    """For the child: its memory figures as one JSON line."""
    return json.dumps(_status())


@dataclass(frozen=True, slots=True)
class Peak:
    baseline_rss: int  # VmRSS after imports and opening, before the work
    vmhwm: int  # the child's own high-water mark (anon + file + shmem)
    sampled_anon_file: int  # highest RssAnon + RssFile + RssShmem the parent saw
    seconds: float


def run_child(
    code: str, env_extra: dict[str, str] | None = None, lines_out: list[str] | None = None
) -> Peak:
    """Runs ``code`` in ``python -c``; the code prints ``BASE <json>`` before the work and
    ``END <json>`` after it.  The parent samples the child's status every 5 ms meanwhile."""
    env = checkout_env()
    env.update(env_extra or {})
    start = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-c", code],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        text=True,
    )
    peak = 0
    stop = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not stop.is_set():
            s = _status(proc.pid)
            peak = max(peak, s.get("RssAnon", 0) + s.get("RssFile", 0) + s.get("RssShmem", 0))
            time.sleep(0.005)

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    out, err = proc.communicate()
    stop.set()
    thread.join()
    seconds = time.perf_counter() - start
    if proc.returncode != 0:
        raise RuntimeError(f"memory child failed ({proc.returncode}):\n{err[-4000:]}")
    base = end = None
    if lines_out is not None:
        lines_out.extend(out.splitlines())
    for line in out.splitlines():
        if line.startswith("BASE "):
            base = json.loads(line[5:])
        elif line.startswith("END "):
            end = json.loads(line[4:])
    if base is None or end is None:
        raise RuntimeError(f"memory child printed no figures:\n{out[-2000:]}\n{err[-2000:]}")
    return Peak(base["VmRSS"], end["VmHWM"], peak, seconds)
