"""W7s: random-row reads from a sharded zstd zarr array, oocarray vs zarr-python.

The W7 layout that favours random rows: shards of 512 rows holding inner chunks of 16 rows
(64 KiB), zstd, written by zarr-python.  oocarray reads one inner chunk per row (the shard's
index entry, then the chunk's bytes); zarr-python reads the same through its codec pipeline.
Single rows and 256-row batches at random, p50 latency per side, sides alternating per round.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import numpy as np
import zarr
import zarr.codecs

import oocarray as oc
from benchmarks._timing import Ratio, Result, Row, clock

COLUMNS = 1024
INNER_ROWS = 16
SHARD_ROWS = 512


def _p50(read: object, keys: list[int]) -> float:
    times = []
    for k in keys:
        start = clock()
        read(k)  # type: ignore[operator]
        times.append(clock() - start)
    return float(np.median(times))


def run(quick: bool = False) -> Result:
    rows = 65_536 if quick else 262_144  # 256 MiB / 1 GiB of float32
    reads, rounds = (200, 3) if quick else (1_000, 7)
    directory = Path(tempfile.mkdtemp(prefix="oocarray-w7s-"))
    try:
        path = directory / "sharded.zarr"
        z = zarr.create_array(
            store=path,
            shape=(rows, COLUMNS),
            chunks=(INNER_ROWS, COLUMNS),
            shards=(SHARD_ROWS, COLUMNS),
            dtype="f4",
            compressors=zarr.codecs.ZstdCodec(level=3),
        )
        rng = np.random.default_rng(7)
        block = 16_384
        for start in range(0, rows, block):
            data = rng.standard_normal((min(block, rows - start), COLUMNS), dtype=np.float32)
            data[:, 0] = np.arange(start, start + len(data))
            z[start : start + len(data)] = data
        ours = oc.open(path)
        theirs = zarr.open_array(path, mode="r")
        for k in (0, rows // 2, rows - 1):
            assert ours[k][0] == k
            assert theirs[k][0] == k
        single = {"oocarray": [], "zarr": []}  # type: dict[str, list[float]]
        batch = {"oocarray": [], "zarr": []}  # type: dict[str, list[float]]
        for r in range(rounds):
            keys = [int(k) for k in rng.integers(0, rows, reads)]
            starts = [int(k) for k in rng.integers(0, rows - 256, reads // 4)]
            order = ["oocarray", "zarr"] if r % 2 == 0 else ["zarr", "oocarray"]
            for side in order:
                reader = ours if side == "oocarray" else theirs
                single[side].append(_p50(lambda k, a=reader: a[k], keys))
                batch[side].append(_p50(lambda s, a=reader: a[s : s + 256], starts))
        result_rows = [
            Row(
                id="W7s",
                workload=f"random single rows, p50, sharded zstd zarr ({SHARD_ROWS}-row shards "
                f"of {INNER_ROWS}-row chunks), {rows * COLUMNS * 4 >> 20} MiB: vs zarr-python "
                "(>= 10x faster)",
                oocarray_s=float(np.median(single["oocarray"])),
                peer=f"zarr-python {zarr.__version__}",
                peer_s=float(np.median(single["zarr"])),
                ratio=Ratio.paired(single["oocarray"], single["zarr"]),
                target=0.10,
            ),
            Row(
                id="W7s",
                workload="random 256-row batches, p50, same store: vs zarr-python (>= 10x faster)",
                oocarray_s=float(np.median(batch["oocarray"])),
                peer=f"zarr-python {zarr.__version__}",
                peer_s=float(np.median(batch["zarr"])),
                ratio=Ratio.paired(batch["oocarray"], batch["zarr"]),
                target=0.10,
            ),
        ]
        notes = [
            f"W7s: {rows:,} x {COLUMNS} float32 written by zarr-python with shards of "
            f"{SHARD_ROWS} rows and inner chunks of {INNER_ROWS} rows (64 KiB), zstd level 3; "
            f"{reads:,} single rows and {reads // 4:,} batches per side per round, {rounds} "
            "rounds, sides alternating; files read from a warm page cache."
        ]
        return Result(rows=result_rows, tables=[], notes=notes)
    finally:
        shutil.rmtree(directory, ignore_errors=True)
