"""W16: the Gram matrix ``X.T @ X`` of a tall (N, 512) float32 zarr array.

The array (256 MiB; ``--quick``: 64 MiB; ``--size 2G`` as the issue names) is written once,
untimed, by oocarray's writer in chunks of 2048 x 512 (4 MiB) with the codec ``--codec`` names
(``zstd``, level 3, the project's default and this benchmark's; ``lz4``, Blosc LZ4 with byte
shuffle; ``none``, uncompressed), with a raw ``.npy``
of the same values: per-column offsets plus Gaussian noise rounded to 3 decimals (values that
compress like measurements, by a modest factor). Every file is read once before timing (a warm
page cache). Each side runs in a fresh process (its peak RSS is its own), three times, in
alternating order; a process times its call three times and keeps the best (a shared host's load
comes and goes); figures are the median of the processes:

- **numpy**: the ``.npy`` loaded into RAM (untimed), then ``X.T @ X`` timed: the in-memory
  target (OpenBLAS ``ssyrk``, every core);
- **oocarray**: ``x.T @ x`` of ``oc.open(zarr)``, one pass over row blocks (decode, then one
  ``block.T @ block`` per block, partials added in float64), inside
  ``oc.Manager(max_bytes=...)`` with a budget a quarter of the data (at least 128 MiB: the
  engine runs a worker per core from about 32 MiB per core with these chunks); and without a
  manager;
- **dask**: ``da.from_zarr(zarr)``, ``(y.T @ y).compute()`` on the threaded scheduler;
- **floors**: each half of oocarray's pass alone, to show what bounds it: the *decode floor*
  reads every block of rows through oocarray's reader (chunks decoded on every core) and
  computes nothing; the *syrk floor* makes the same blocks' products from RAM, two workers of
  one BLAS thread each.  The pass keeps both cores busy, so its floor is their sum, and NumPy's
  time over that sum is the best ratio a store of that codec allows on this machine.

Every result is checked against NumPy's (``|G - G_numpy| <= 1e-4 * max|G_numpy|``).
Target (issue 24): oocarray >= 0.7x NumPy's speed on the same data in RAM (time ratio <= 1.43).

``python -m benchmarks.w16_gram [--quick | --size 2G] [--codec zstd|lz4|none]`` prints the
table.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile

import numpy as np

from benchmarks import _compute_data as cd
from benchmarks._timing import (
    Result,
    Table,
    TextRow,
    format_bytes,
    format_mib,
    format_seconds,
)
from oocarray._memory import parse_size

MiB = 1 << 20
FULL_BYTES = 256 * MiB
QUICK_BYTES = 64 * MiB
COLUMNS = 512
CHUNK_ROWS = 2048  # 4 MiB chunks
BLOCK_ROWS = 16 * CHUNK_ROWS  # generation unit: 64 MiB
SEED = 16
CODECS = ("zstd", "lz4", "none")  # oc.create's names: zstd level 3; Blosc LZ4 + shuffle; raw
TARGET = 1 / 0.7  # oocarray's time / NumPy's
# The engine gives a worker a quarter of the budget per block it holds (W16's blocks: 8 MiB
# counted, 4 MiB read): below about 32 MiB per core it runs fewer workers than cores.
MIN_BUDGET = 128 * MiB
ROUNDS = 3  # fresh processes per side
REPEATS = 3  # timed calls in each (the best is its time: this host's load comes and goes)


def _block(index: int, n_rows: int) -> np.ndarray:
    """Rows ``index * BLOCK_ROWS`` onwards: column offsets plus noise, 3 decimals."""
    start = index * BLOCK_ROWS
    stop = min(start + BLOCK_ROWS, n_rows)
    offsets = np.random.default_rng(SEED).uniform(-5.0, 5.0, COLUMNS).astype(np.float32)
    noise = np.random.default_rng([SEED, index]).standard_normal(
        (stop - start, COLUMNS), dtype=np.float32
    )
    return np.round(noise + offsets, 3)


def make_data(directory: str, nbytes: int, codec: str = "zstd") -> tuple[str, str, int]:
    """The zarr store (``codec`` as :func:`oocarray.create` names it) and the .npy of the
    same values; their rows."""
    import oocarray as oc

    n_rows = max(1, nbytes // (COLUMNS * 4 * BLOCK_ROWS)) * BLOCK_ROWS
    zarr_path = os.path.join(directory, "x.zarr")
    npy_path = os.path.join(directory, "x.npy")
    x = oc.create(
        zarr_path, (n_rows, COLUMNS), "float32", chunks=(CHUNK_ROWS, COLUMNS), codec=codec
    )
    raw = np.lib.format.open_memmap(npy_path, "w+", np.float32, (n_rows, COLUMNS))
    for index in range((n_rows + BLOCK_ROWS - 1) // BLOCK_ROWS):
        values = _block(index, n_rows)
        x[index * BLOCK_ROWS : index * BLOCK_ROWS + len(values)] = values
        raw[index * BLOCK_ROWS : index * BLOCK_ROWS + len(values)] = values
    raw.flush()
    del raw
    return zarr_path, npy_path, n_rows


def _code(side: str, zarr_path: str, npy_path: str, out: str, budget: int) -> str:
    head = "import time, numpy as np\nfrom benchmarks import _compute_data as cd\n"
    if side == "numpy":
        head += f"x = np.load({npy_path!r})\n"  # loaded untimed: NumPy's data is in RAM
        work = "g = x.T @ x\n"
    elif side.startswith("oocarray"):
        head += f"import oocarray as oc\nx = oc.open({zarr_path!r})\n"
        if side == "oocarray":
            head += f"manager = oc.Manager('w16', max_bytes={budget})\nmanager.__enter__()\n"
        work = "g = x.T @ x\n"
    elif side == "decode floor":
        # oocarray's reader alone: every block of rows decoded (on every core), nothing computed
        head += f"import oocarray as oc\nx = oc.open({zarr_path!r})\n"
        head += f"block = np.empty(({FLOOR_ROWS}, {COLUMNS}), np.float32)\ng = np.zeros(1)\n"
        work = (
            f"for i in range(0, x.shape[0], {FLOOR_ROWS}):\n"
            f"    block[...] = x[i : i + {FLOOR_ROWS}]\n"
        )
    elif side == "syrk floor":
        # the products alone, from RAM: the engine's blocks, two workers of one BLAS thread each
        head += f"x = np.load({npy_path!r})\n" + _SYRK_FLOOR
        work = "g = sum(pool.map(gram, range(0, x.shape[0], half)))\n"
    else:
        head += f"import dask.array as da\ny = da.from_zarr({zarr_path!r})\n"
        work = "g = (y.T @ y).compute(scheduler='threads')\n"
    return (
        head
        + 'print("BASE " + cd.status_json(), flush=True)\n'
        + "seconds = float('inf')\n"
        + f"for _ in range({REPEATS}):\n"
        + "    start = time.perf_counter()\n"
        + "".join(f"    {line}\n" for line in work.splitlines())
        + "    seconds = min(seconds, time.perf_counter() - start)\n"
        + 'print("END " + cd.status_json(), flush=True)\n'
        + f"np.save({out!r}, np.asarray(g))\n"
        + 'print("TIME " + repr(seconds), flush=True)\n'
    )


FLOOR_ROWS = 8192  # the engine's blocks for W16 (16 MiB of rows)
_SYRK_FLOOR = f"""import concurrent.futures
from threadpoolctl import threadpool_limits
half = -(-x.shape[0] // 2)
def gram(start):
    acc = np.zeros(({COLUMNS}, {COLUMNS}))
    with threadpool_limits(1, "blas"):
        for i in range(start, min(start + half, x.shape[0]), {FLOOR_ROWS}):
            block = x[i : i + {FLOOR_ROWS}]
            acc += block.T @ block
    return acc
pool = concurrent.futures.ThreadPoolExecutor(2)
"""


def _run_side(code: str) -> tuple[float, cd.Peak]:
    lines: list[str] = []
    peak = cd.run_child(code, lines_out=lines)
    for line in lines:
        if line.startswith("TIME "):
            return float(line[5:]), peak
    raise RuntimeError("W16: a side printed no time")


def run(quick: bool = False, nbytes: int | None = None, codec: str = "zstd") -> Result:
    if codec not in CODECS:
        raise ValueError(f"W16: codec must be one of {CODECS}, got {codec!r}")
    directory = tempfile.mkdtemp(prefix="oocarray-w16-")
    try:
        return _run_in(directory, nbytes or (QUICK_BYTES if quick else FULL_BYTES), codec)
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def _run_in(directory: str, nbytes: int, codec: str) -> Result:
    zarr_path, npy_path, n_rows = make_data(directory, nbytes, codec)
    for path in (zarr_path, npy_path):
        cd.warm(path)
    data_bytes = n_rows * COLUMNS * 4
    budget = max(data_bytes // 4, MIN_BUDGET)
    sides = ["numpy", "oocarray", "oocarray (no manager)", "decode floor", "syrk floor"]
    if cd.version("dask") is not None:
        sides.append("dask")
    runs: dict[str, list[tuple[float, cd.Peak]]] = {side: [] for side in sides}
    results: dict[str, np.ndarray] = {}
    for round_number in range(ROUNDS):
        for side in sides if round_number % 2 == 0 else sides[::-1]:
            out = os.path.join(directory, f"{len(runs[side])}-{side.split()[0]}.npy")
            runs[side].append(_run_side(_code(side, zarr_path, npy_path, out, budget)))
            results[side] = np.load(out)
    reference = results["numpy"]
    scale = float(np.max(np.abs(reference)))
    for side, got in results.items():
        if side == "decode floor":
            continue
        error = float(np.max(np.abs(got.astype(np.float64) - reference)))
        if got.shape != reference.shape or error > 1e-4 * scale:
            raise RuntimeError(f"W16: {side}'s X.T @ X differs from NumPy's by {error}")
    mean = {side: statistics.median(t for t, _ in r) for side, r in runs.items()}
    peak = {side: max(max(p.vmhwm, p.sampled_anon_file) for _, p in r) for side, r in runs.items()}
    what = f"X.T @ X, X ({n_rows}, {COLUMNS}) float32, {format_bytes(data_bytes)}"
    ratio = mean["oocarray"] / mean["numpy"]
    codec_text = f"{codec} zarr" + (" (the default codec)" if codec == "zstd" else "")
    rows = [
        TextRow(
            "W16",
            f"{what}, {codec_text}, `Manager(max_bytes={format_bytes(budget)})`",
            f"{format_seconds(mean['oocarray'])}; peak RSS {format_mib(peak['oocarray'])}",
            f"{format_seconds(mean['numpy'])} (NumPy, data in RAM); "
            f"peak RSS {format_mib(peak['numpy'])}",
            f"{ratio:.2f}x",
            f"<= {TARGET:.2f}x (>= 0.7x NumPy's speed)",
            "yes" if ratio <= TARGET else "**no**",
        )
    ]
    if "dask" in mean:
        rows.append(
            TextRow(
                "W16",
                f"{what}, {codec_text}",
                f"{format_seconds(mean['oocarray'])}",
                f"{format_seconds(mean['dask'])} (dask {cd.version('dask')}, threads); "
                f"peak RSS {format_mib(peak['dask'])}",
                f"{mean['oocarray'] / mean['dask']:.2f}x",
                "—",
                "n/a",
            )
        )
    # Both cores are busy through the pass: its floor is the two halves' work added.
    floor = mean["decode floor"] + mean["syrk floor"]
    rows.append(
        TextRow(
            "W16",
            f"{what}, {codec_text}: floor on this machine, decode alone + products alone",
            f"{format_seconds(floor)} ({format_seconds(mean['decode floor'])} + "
            f"{format_seconds(mean['syrk floor'])})",
            f"{format_seconds(mean['numpy'])} (NumPy, data in RAM)",
            f"{floor / mean['numpy']:.2f}x",
            f"oocarray at {mean['oocarray'] / floor:.2f}x the floor",
            "n/a",
        )
    )
    detail = [
        [side, format_seconds(t), format_mib(p.vmhwm), format_mib(p.sampled_anon_file)]
        for side, r in runs.items()
        for t, p in r
    ]
    table = Table(
        "W16 runs (each a fresh process)", ("side", "time", "VmHWM", "sampled anon+file"), detail
    )
    stored = cd.dir_bytes(zarr_path)
    notes = [
        f"W16: zarr {format_mib(stored)} on disk for {format_mib(data_bytes)} of data; "
        f"{os.cpu_count()} CPUs; NumPy's time excludes loading the .npy."
    ]
    return Result(rows, [table], notes)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.w16_gram")
    parser.add_argument("--quick", action="store_true", help=f"{format_bytes(QUICK_BYTES)}")
    parser.add_argument(
        "--size", help=f"the array's size, e.g. 2G (default {format_bytes(FULL_BYTES)})"
    )
    parser.add_argument(
        "--codec",
        choices=CODECS,
        default="zstd",
        help="the store's codec: zstd (level 3, the default), lz4 (Blosc LZ4 + shuffle), none",
    )
    args = parser.parse_args()
    print(run(args.quick, parse_size(args.size) if args.size else None, args.codec).render())


if __name__ == "__main__":
    main()
