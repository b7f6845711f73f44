"""Shape and indexing functions over a chunked array, against NumPy in memory and dask.

``x`` is a (rows, 256) float32 zarr array (default 64 MiB; ``python -m
benchmarks.shapes_rearrange 8`` for 8 MiB) in chunks of (4096, 64).  Each operation is
reduced to a number (so every side does the whole work and nothing is kept) and timed in a
fresh process per side and operation, best of three, warm page cache:

- ``oocarray``: the lazy function of the chunked array, evaluated by the streaming engine;
- ``numpy``: the same on the ndarray already in memory (the floor: no reading at all);
- ``dask``: ``da.from_zarr`` of the same store, threaded scheduler (when dask is installed;
  it refuses reshapes across its chunks and asks for a rechunk: "-" in the table).

One reshape is also forced onto the streamed path (written once into a temporary chunked
array, then summed), which a reshape takes when its blocks do not line up with the input's.

Run: ``python -m benchmarks.shapes_rearrange [MiB]``; prints a table of seconds per side.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np

COLUMNS = 256
CHUNKS = (4096, 64)
OPERATIONS = {
    "flip(x, 0).sum(axis=1)": "np.flip(x, 0).sum(axis=1)",
    "roll(x, 1000, 0).max()": "np.roll(x, 1000, 0).max()",
    "pad(x, 8, 'reflect').sum()": "np.pad(x, 8, mode='reflect').sum()",
    "x.T.sum(axis=0)": "x.T.sum(axis=0)",
    "reshape(-1, 128).sum(0) (lazy)": "x.reshape(-1, 128).sum(axis=0)",
    "reshape(512, -1).sum(0) (lazy)": "x.reshape(512, -1).sum(axis=0)",
    "reshape(512, -1).sum(0) (streamed into a temporary)": "STREAMED",
    "take(x, idx, 0).sum()": "np.take(x, idx, axis=0).sum()",
    "flatnonzero(x > 0.9)": "np.flatnonzero(x > 0.9)",
    "x[x > 0.9] (mask)": "MASK",
}
SETUP = {
    "oocarray": "import oocarray as oc; from oocarray._compute import _reshape; x = oc.open(PATH)",
    "numpy": "import oocarray as oc; x = oc.open(PATH)[...]",
    "dask": "import dask.array as da, dask; dask.config.set(scheduler='threads'); "
    "x = da.from_zarr(PATH)",
}
# The same reshape made to take the streamed path (its lazy blocks capped at 64 KiB).
STREAMED = {
    "oocarray": "(setattr(_reshape, 'LAZY_BLOCK_BYTES', 1 << 16), x.reshape(512, -1))[1]"
    ".sum(axis=0)",
    "numpy": "x.reshape(512, -1).sum(axis=0)",
    "dask": "x.reshape(512, -1).sum(axis=0)",
}
MASK = {
    "oocarray": "(x * 1)[x > 0.9]",
    "numpy": "x[x > 0.9]",
    "dask": "x[x > 0.9].compute()",
}
TIMER = """
import time, numpy as np
PATH = {path!r}
{setup}
idx = np.random.default_rng(0).integers(0, x.shape[0], 2000)
best = float("inf")
for _ in range(3):
    t = time.perf_counter()
    r = {expression}
    r = np.asarray(r.compute() if hasattr(r, "dask") else r)
    best = min(best, time.perf_counter() - t)
print(best)
"""


def _time(side: str, expression: str, path: str) -> str:
    if expression in ("MASK", "STREAMED"):
        expression = {"MASK": MASK, "STREAMED": STREAMED}[expression][side]
    elif side == "dask":
        expression = f"({expression})"
    code = TIMER.format(path=path, setup=SETUP[side], expression=expression)
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False, timeout=600
    )
    if done.returncode:
        last = (done.stderr.strip().splitlines() or ["failed"])[-1]
        return f"- ({last[:40]})"
    return f"{float(done.stdout.split()[-1]):.3f}"


def main() -> None:
    import oocarray as oc

    mib = int(sys.argv[1]) if len(sys.argv) > 1 else 64
    rows = (mib << 20) // (4 * COLUMNS)
    directory = tempfile.mkdtemp(prefix="oocarray-shapes-")
    try:
        path = os.path.join(directory, "x.zarr")
        x = oc.create(path, (rows, COLUMNS), np.float32, chunks=CHUNKS)
        rng = np.random.default_rng(1)
        for start in range(0, rows, CHUNKS[0]):
            stop = min(rows, start + CHUNKS[0])
            x[start:stop] = rng.random((stop - start, COLUMNS), dtype=np.float32)
        sides = ["oocarray", "numpy"]
        try:
            import dask  # noqa: F401

            sides.append("dask")
        except ImportError:
            pass
        print(f"x: ({rows}, {COLUMNS}) float32, {mib} MiB, chunks {CHUNKS}; seconds, best of 3")
        print("| operation | " + " | ".join(sides) + " |")
        print("|---|" + "---|" * len(sides))
        for name, expression in OPERATIONS.items():
            cells = [_time(side, expression, path) for side in sides]
            print(f"| {name} | " + " | ".join(cells) + " |", flush=True)
    finally:
        shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    main()
