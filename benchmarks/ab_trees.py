"""``python -m benchmarks.ab_trees OLD NEW [--size 1G] [--rounds 3]``: the core steps of W2,
W5, W6, W7 and W8 for two source trees of oocarray (two checkouts, each with its extension built
in place), in alternating fresh processes, to measure what a change costs.

Each process imports the tree it is given, writes its own inputs with that tree's writers
(so that what a writer now adds, such as a checksum, is in the reads it times), and prints one
JSON line of timings:

- W2: 200,000 ``np.empty(100)`` inside a manager (ns each, the best of 5 loops);
- W5: ``oc.compute(x.mean(axis=0), x.std(axis=0))`` of W5's zstd array, in a 1 GiB budget;
- W6: ``((x - m) / s).astype("f4").to_zarr(...)`` from W5's zstd array to zstd and to lz4;
- W7: 2,000 random single rows and 500 random 256-row batches of W7's array, zstd and
  uncompressed;
- W8: one epoch of 1024-row ``shuffle="chunks"`` batches of W8's zstd array.

The table gives each step's median over the rounds per tree and the median of the paired
ratios (new / old; below 1 is faster).  Several rounds alternate the order of the trees.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

from oocarray._memory._units import parse_size

_CHILD = r"""
import json, os, sys, time
import numpy as np
import oocarray as oc
from datasets import w5_data, w7_data, w8_data

work, nbytes = sys.argv[1], int(sys.argv[2])
out = {}
with oc.Manager("w2"):
    loops = []
    for _ in range(5):
        t = time.perf_counter()
        for _ in range(200_000):
            np.empty(100)
        loops.append((time.perf_counter() - t) / 200_000 * 1e9)
out["W2 np.empty(100) in a manager (ns each)"] = min(loops)
w5 = os.path.join(work, "w5.zarr")
w5_data.write_zarr(w5, w5_data.rows_for(nbytes))
x = oc.open(w5)
with oc.Manager("w5", max_bytes="1G"):
    t = time.perf_counter()
    oc.compute(x.mean(axis=0, compute=False), x.std(axis=0, compute=False), progress=False)
    out["W5 mean+std (s)"] = time.perf_counter() - t
m, s = np.float32(0.5), np.float32(2.0)
with oc.Manager("w6", max_bytes="1G"):
    for codec in ("zstd", "lz4"):
        t = time.perf_counter()
        ((x - m) / s).astype("f4").to_zarr(
            os.path.join(work, f"w6-{codec}.zarr"), codec=codec, chunks=x.chunks, progress=False
        )
        out[f"W6 to_zarr {codec} (s)"] = time.perf_counter() - t
n7 = max(2048, nbytes // (4 * w7_data.COLUMNS))  # W7's 2 MiB chunks: 512 rows
for codec in ("zstd", "none"):
    w7 = os.path.join(work, f"w7-{codec}.zarr")
    w7_data.write_zarr(w7, n7, 512, codec)
    y = oc.open(w7)
    rng = np.random.default_rng(7)
    for rows, count in ((1, 2000), (256, 500)):
        starts = rng.integers(0, n7 - rows, count)
        t = time.perf_counter()
        for a in starts:
            y[a] if rows == 1 else y[a : a + rows]
        out[f"W7 {codec} {rows}-row reads (us each)"] = (time.perf_counter() - t) / count * 1e6
w8 = os.path.join(work, "w8.zarr")
n8 = w8_data.rows_for(nbytes)
w8_data.write_zarr(w8, n8)
z = oc.open(w8)
seen = 0
t = time.perf_counter()
for batch in oc.batches(z, 1024, shuffle="chunks", seed=1, prefetch=4):
    seen += len(batch)
out["W8 epoch (s)"] = time.perf_counter() - t
assert seen == n8
print(json.dumps(out))
"""


def _run(tree: str, nbytes: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="oc-ab-") as work:
        env = {**os.environ, "PYTHONPATH": tree}
        done = subprocess.run(
            [sys.executable, "-c", _CHILD, work, str(nbytes)],
            cwd=tree,
            env=env,
            capture_output=True,
            text=True,
        )
    if done.returncode != 0:
        raise SystemExit(f"{tree}: the run failed:\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("old")
    parser.add_argument("new")
    parser.add_argument("--size", default="1G", help="bytes of each input array (default 1G)")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    nbytes = parse_size(args.size, "--size")
    assert nbytes is not None
    runs: dict[str, list[dict[str, float]]] = {"old": [], "new": []}
    for r in range(args.rounds):
        for side in ("old", "new") if r % 2 == 0 else ("new", "old"):
            started = time.perf_counter()
            runs[side].append(_run(getattr(args, side), nbytes))
            print(
                f"round {r + 1} {side}: {time.perf_counter() - started:.0f} s, load "
                f"{os.getloadavg()[0]:.1f}",
                file=sys.stderr,
                flush=True,
            )
    print(f"| step ({args.size} inputs, {args.rounds} rounds) | old | new | new/old |")
    print("|---|---|---|---|")
    for step in runs["old"][0]:
        old = [run[step] for run in runs["old"]]
        new = [run[step] for run in runs["new"]]
        paired = statistics.median(b / a for a, b in zip(old, new, strict=True))
        print(
            f"| {step} | {statistics.median(old):.4g} | {statistics.median(new):.4g} | "
            f"{paired:.3f} [{min(b / a for a, b in zip(old, new, strict=True)):.2f}-"
            f"{max(b / a for a, b in zip(old, new, strict=True)):.2f}] |"
        )


if __name__ == "__main__":
    main()
