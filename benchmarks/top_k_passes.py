"""The k largest values of a chunked array: ``oc.top_k``'s one pass against the alternatives.

``x`` is an (N, 64) float32 zstd zarr array (default 256 MiB; ``python -m
benchmarks.top_k_passes 64`` for 64 MiB) in chunks of (16384, 64), written once untimed.  Each
side runs in a fresh process (opening untimed), best of three, warm page cache, and its result
is checked against NumPy's sort of the array in RAM:

- ``oocarray top_k``: ``oc.top_k(x, 10, axis=0)`` in ``oc.Manager(max_bytes="64M")``;
- ``oocarray partition``: ``np.partition(x, N - 10, axis=0)[-10:]`` in the same budget (exact
  selection by counting passes; what a NumPy user types without a top-k function);
- ``dask topk``: ``da.topk(da.from_zarr(path), 10, axis=0)``, threaded scheduler;
- ``numpy``: ``np.partition(a, N - 10, axis=0)`` of the array already in RAM (no budget).

Run: ``python -m benchmarks.top_k_passes [MiB]``; prints seconds per side.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np

COLUMNS = 64
ROWS_PER_CHUNK = 16384
K = 10
BUDGET = "64M"

_PRELUDE = """
import time, numpy as np, oocarray as oc
path, k = {path!r}, {k}
x = oc.open(path)
rows = x.shape[0]
"""

SIDES = {
    "oocarray top_k": """
with oc.Manager(max_bytes={budget!r}):
    start = time.perf_counter()
    values = oc.top_k(x, k, axis=0, progress=False)[0]
    seconds = time.perf_counter() - start
""",
    "oocarray partition": """
with oc.Manager(max_bytes={budget!r}):
    start = time.perf_counter()
    values = np.sort(np.asarray(np.partition(x, rows - k, axis=0)[rows - k :]), axis=0)[::-1]
    seconds = time.perf_counter() - start
""",
    "dask topk": """
import dask.array as da
y = da.from_zarr(path)
start = time.perf_counter()
values = da.topk(y, k, axis=0).compute(scheduler="threads")
seconds = time.perf_counter() - start
""",
    "numpy": """
a = x[...]
start = time.perf_counter()
values = np.sort(np.partition(a, rows - k, axis=0)[rows - k :], axis=0)[::-1]
seconds = time.perf_counter() - start
""",
}

_CHECK = """
expected = np.load({expected!r})
assert np.array_equal(np.asarray(values), expected), "wrong values"
print(seconds)
"""


def _write(path: str, rows: int) -> np.ndarray:
    """The array, and its K largest values per column (best first)."""
    import oocarray as oc

    x = oc.create(path, (rows, COLUMNS), "float32", chunks=(ROWS_PER_CHUNK, COLUMNS), codec="zstd")
    rng = np.random.default_rng(0)
    best = np.full((0, COLUMNS), -np.inf, np.float32)
    step = 1 << 18
    for start in range(0, rows, step):
        block = rng.standard_normal((min(step, rows - start), COLUMNS)).astype(np.float32)
        x[start : start + len(block)] = block
        best = np.sort(np.concatenate([best, block]), axis=0)[-K:]
    return best[::-1]


def _time(side: str, path: str, expected: str) -> float:
    code = _PRELUDE.format(path=path, k=K) + SIDES[side].format(budget=BUDGET)
    code += _CHECK.format(expected=expected)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=root
    )
    return float(out.stdout.strip().splitlines()[-1])


def main(mib: int = 256) -> None:
    rows = (mib << 20) // (4 * COLUMNS)
    folder = tempfile.mkdtemp(prefix="oc-top-k-")
    try:
        path = os.path.join(folder, "x.zarr")
        expected = os.path.join(folder, "expected.npy")
        np.save(expected, _write(path, rows))
        print(f"top {K} of each column of ({rows}, {COLUMNS}) float32, {mib} MiB, zstd")
        for side in SIDES:
            try:
                best = min(_time(side, path, expected) for _ in range(3))
            except subprocess.CalledProcessError as error:
                print(f"{side:20s} failed: {error.stderr.strip().splitlines()[-1:]}")
                continue
            print(f"{side:20s} {best:8.2f} s")
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 256)
