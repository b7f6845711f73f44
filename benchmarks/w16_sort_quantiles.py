"""W16: sorting and exact percentiles of chunked arrays in a budget smaller than the data.

Inputs, written untimed by oocarray's writer (zstd zarr, 4 MiB chunks) with a raw ``.npy``
of the same values:

- **sort**: a 1-d float32 array of normal noise (2 GiB; ``--quick``: 64 MiB);
- **percentile**: an (N, 256) float32 array of noisy measurements, chunks of 4096 rows
  (2 GiB; ``--quick``: 64 MiB); the same array is sorted along its chunked axis 0.

Every side runs in a fresh process (its peak RSS is its own), once per order, oocarray first
then the peer, then the reverse; times are the mean of the two runs.  Sides:

- sort: oocarray ``np.sort(x)`` inside ``oc.Manager(max_bytes=BUDGET)`` (an eighth of the
  data: the external merge sort, result a temporary chunked array) against ``np.sort(a)`` of
  the array loaded in RAM (load untimed, no budget);
- sort along axis 0: oocarray ``np.sort(x, axis=0)`` of the (N, 256) array in the same
  budget (blocks of whole columns sorted in RAM, the input staged once by block; result a
  temporary chunked array) against ``np.sort(a, axis=0)`` in RAM;
- percentile: oocarray ``np.percentile(x, [1, 50, 99], axis=0)`` in the same budget (exact:
  counting passes) against dask (``da.percentile`` of each column of ``da.from_zarr``, all
  computed together on threads; dask's percentile is approximate: it merges per-chunk
  percentiles) and against NumPy's ``np.percentile`` on ``x.as_ndarray()`` (pages of the
  store filled on touch) in the same budget, stopped after ``PAGED_LIMIT_S`` seconds.

oocarray's results are checked: the sorts at 1000 positions against NumPy's sorts, the
percentiles exactly against NumPy's on the loaded array (dask's are reported, not checked).

``--paged-hard`` measures the last as the issue says: the percentile of W5's store (4 GiB)
against ``np.percentile`` on ``x.as_ndarray()``, both in the same budget *and* a hard memory
cgroup of the budget + 64 MiB (needs root), the paged side stopped at 50x oocarray's time,
with each side's page faults and bytes read and written (``benchmarks/_w16_paged_hard.py``).

Targets (issue 24): sort >= 0.5x the speed of ``np.sort`` in RAM (2 GiB in a 256 MiB
budget); percentile >= 3x faster than dask and >= 50x faster than paged NumPy.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
from typing import Any

import numpy as np

import oocarray as oc
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
GiB = 1 << 30
FULL_BYTES = 2 * GiB
QUICK_BYTES = 64 * MiB
BUDGET_FRACTION = 8  # the budget is an eighth of the data
COLUMNS = 256
CHUNK_BYTES = 4 * MiB
QUANTILES = [1, 50, 99]
PAGED_LIMIT_S = 600
SORT_SPEED = 0.5
DASK_FASTER = 3.0
PAGED_FASTER = 50.0
SAMPLES = 1000


def _write(directory: str, name: str, shape: tuple[int, ...], seed: int) -> tuple[str, str]:
    """A zstd zarr and a .npy of the same float32 values (normal noise, rounded to 3
    decimals; columns of different scales)."""
    rng = np.random.default_rng(seed)
    zarr_path = os.path.join(directory, f"{name}.zarr")
    npy_path = os.path.join(directory, f"{name}.npy")
    row_items = int(np.prod(shape[1:])) if len(shape) > 1 else 1
    chunk_rows = max(1, CHUNK_BYTES // (4 * row_items))
    x = oc.create(zarr_path, shape, np.float32, chunks=(chunk_rows, *shape[1:]), codec="zstd")
    out = np.lib.format.open_memmap(npy_path, mode="w+", dtype=np.float32, shape=shape)
    scale = np.linspace(0.5, 50, row_items, dtype=np.float32).reshape(shape[1:] or ())
    step = 16 * chunk_rows
    for start in range(0, shape[0], step):
        rows = min(step, shape[0] - start)
        block = rng.normal(size=(rows, *shape[1:])).astype(np.float32) * scale
        block = np.round(block, 3)
        x[start : start + rows] = block
        out[start : start + rows] = block
    out.flush()
    del out
    return zarr_path, npy_path


def _code(
    side: str,
    workload: str,
    path: str,
    budget: int,
    positions: list[Any],
    alarm_s: int = PAGED_LIMIT_S,
) -> str:
    head = f"""
import json, signal, time, numpy as np
from benchmarks import _compute_data as cd
path, budget, positions = {path!r}, {budget}, {positions!r}
def stop(*_):
    raise TimeoutError
signal.signal(signal.SIGALRM, stop)
signal.alarm({alarm_s})
got = None
"""
    if side == "oocarray":
        head += "import oocarray as oc\nx = oc.open(path)\n"
        if workload == "sort":
            body = (
                "with oc.Manager(max_bytes=budget):\n"
                "    s = np.sort(x)\n"
                "    got = [float(s[i]) for i in positions]\n"
            )
        elif workload == "sort0":
            body = (
                "with oc.Manager(max_bytes=budget):\n"
                "    s = np.sort(x, axis=0)\n"
                "    got = [float(s[i, j]) for i, j in positions]\n"
            )
        else:
            body = (
                "with oc.Manager(max_bytes=budget):\n"
                f"    got = np.percentile(x, {QUANTILES!r}, axis=0).tolist()\n"
            )
    elif side == "numpy":
        head += "a = np.load(path.replace('.zarr', '.npy'))\n"
        body = "s = np.sort(a, axis=0)\n" if workload == "sort0" else "s = np.sort(a)\n"
    elif side == "paged":
        head += "import oocarray as oc\nx = oc.open(path)\n"
        body = (
            "try:\n"
            "    with oc.Manager(max_bytes=budget):\n"
            f"        got = np.percentile(x.as_ndarray(), {QUANTILES!r}, axis=0).tolist()\n"
            "except TimeoutError:\n"
            "    got = 'timeout'\n"
        )
    else:
        head += "import dask, dask.array as da\ny = da.from_zarr(path)\n"
        body = (
            f"parts = [da.percentile(y[:, j], {QUANTILES!r}) for j in range(y.shape[1])]\n"
            "got = np.stack(dask.compute(*parts, scheduler='threads'), axis=1).tolist()\n"
        )
    tail = """
seconds = time.perf_counter() - start
print("END " + cd.status_json(), flush=True)
print("GOT " + json.dumps(got), flush=True)
print("TIME " + repr(seconds), flush=True)
"""
    return (
        head
        + 'print("BASE " + cd.status_json(), flush=True)\nstart = time.perf_counter()\n'
        + body
        + tail
    )


def _run_side(code: str) -> tuple[float, cd.Peak, object]:
    lines: list[str] = []
    peak = cd.run_child(code, lines_out=lines)
    seconds, got = None, None
    for line in lines:
        if line.startswith("TIME "):
            seconds = float(line[5:])
        elif line.startswith("GOT "):
            got = json.loads(line[4:])
    if seconds is None:
        raise RuntimeError("W16: a side printed no time")
    return seconds, peak, got


def run(quick: bool = False, nbytes: int | None = None) -> Result:
    nbytes = nbytes or (QUICK_BYTES if quick else FULL_BYTES)
    directory = tempfile.mkdtemp(prefix="oocarray-w16-")
    try:
        return _run_in(directory, nbytes, nbytes // BUDGET_FRACTION)
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def _pair(
    workload: str, path: str, budget: int, peers: tuple[str, ...], positions: list[Any]
) -> tuple[dict[str, list[tuple[float, cd.Peak, object]]], list[list[str]]]:
    """Each side twice, in both orders; the runs and their table lines."""
    runs: dict[str, list[tuple[float, cd.Peak, object]]] = {s: [] for s in ("oocarray", *peers)}
    detail = []
    for order in (("oocarray", *peers), (*peers, "oocarray")):
        for side in order:
            seconds, peak, got = _run_side(_code(side, workload, path, budget, positions))
            runs[side].append((seconds, peak, got))
            timed_out = got == "timeout"
            detail.append(
                [
                    workload,
                    side,
                    f"> {PAGED_LIMIT_S} s (stopped)" if timed_out else format_seconds(seconds),
                    format_mib(peak.vmhwm),
                ]
            )
    return runs, detail


def _mean(runs: list[tuple[float, cd.Peak, object]]) -> float:
    return sum(t for t, _, _ in runs) / len(runs)


def _run_in(directory: str, nbytes: int, budget: int) -> Result:
    rows: list[TextRow] = []
    detail: list[list[str]] = []
    budget_text = f"`Manager(max_bytes={format_bytes(budget)})`"

    # -- sort ------------------------------------------------------------------------------
    length = nbytes // 4
    sort_path, sort_npy = _write(directory, "sort", (length,), seed=16)
    positions = sorted(np.random.default_rng(0).integers(0, length, SAMPLES).tolist())
    expected = np.sort(np.load(sort_npy))[positions]
    runs, lines = _pair("sort", sort_path, budget, ("numpy",), positions)
    detail += lines
    for _, _, got in runs["oocarray"]:
        np.testing.assert_array_equal(np.asarray(got, np.float32), expected, "W16 sort")
    ooc, peer = _mean(runs["oocarray"]), _mean(runs["numpy"])
    speed = peer / ooc
    rows.append(
        TextRow(
            "W16",
            f"np.sort of {format_bytes(nbytes)} float32 (zstd zarr), {budget_text}",
            format_seconds(ooc),
            f"{format_seconds(peer)} (np.sort in RAM)",
            f"{speed:.2f}x the speed",
            f">= {SORT_SPEED}x the speed",
            "yes" if speed >= SORT_SPEED else "**no**",
        )
    )
    os.remove(sort_npy)
    shutil.rmtree(sort_path, ignore_errors=True)

    # -- percentile ------------------------------------------------------------------------
    shape = (nbytes // (4 * COLUMNS), COLUMNS)
    path, npy = _write(directory, "columns", shape, seed=61)
    rng = np.random.default_rng(1)
    cells = [
        [int(i), int(j)]
        for i, j in zip(
            rng.integers(0, shape[0], SAMPLES), rng.integers(0, COLUMNS, SAMPLES), strict=True
        )
    ]
    loaded = np.load(npy)
    picked = np.sort(loaded, axis=0)[tuple(np.array(cells).T)]
    expected_q = np.percentile(loaded, QUANTILES, axis=0)
    del loaded
    runs, lines = _pair("sort0", path, budget, ("numpy",), cells)
    detail += lines
    for _, _, got in runs["oocarray"]:
        np.testing.assert_array_equal(np.asarray(got, np.float32), picked, "W16 sort axis 0")
    ooc, peer = _mean(runs["oocarray"]), _mean(runs["numpy"])
    rows.append(
        TextRow(
            "W16",
            f"np.sort(x, axis=0) of {shape} float32 zstd (chunks of 4096 rows), {budget_text}",
            format_seconds(ooc),
            f"{format_seconds(peer)} (np.sort(a, axis=0) in RAM)",
            f"{peer / ooc:.2f}x the speed",
            "(no target)",
            "",
        )
    )
    percentile_rows, lines, dask_error = _percentile(path, expected_q, budget, f"{shape}")
    rows += percentile_rows
    detail += lines
    table = Table(
        "W16 runs (each a fresh process; VmHWM is the child's peak RSS)",
        ("workload", "side", "time", "VmHWM"),
        detail,
    )
    notes = [
        f"dask's percentiles differ from NumPy's by up to {dask_error:.3g} (it merges "
        "per-chunk percentiles); oocarray's equal NumPy's exactly.",
        f"Data written by oocarray's writer, untimed; budget {format_bytes(budget)}.",
    ]
    return Result(rows, [table], notes)


def _percentile(
    path: str, expected_q: np.ndarray, budget: int, shape_text: str
) -> tuple[list[TextRow], list[list[str]], float]:
    """The percentile rows against dask and paged NumPy, their runs, dask's largest error."""
    budget_text = f"`Manager(max_bytes={format_bytes(budget)})`"
    rows: list[TextRow] = []
    runs, lines = _pair("percentile", path, budget, ("dask", "paged"), [])
    for _, _, got in runs["oocarray"]:
        np.testing.assert_array_equal(np.asarray(got, np.float64), expected_q, "W16 percentile")
    dask_error = max(
        float(np.max(np.abs(np.asarray(got) - expected_q))) for _, _, got in runs["dask"]
    )
    ooc = _mean(runs["oocarray"])
    what = f"np.percentile(x, {QUANTILES}, axis=0) of {shape_text} float32 zstd, {budget_text}"
    for peer_name, target, label in (
        ("dask", DASK_FASTER, "dask, threads, approximate"),
        ("paged", PAGED_FASTER, "NumPy on x.as_ndarray(), same budget"),
    ):
        peer_runs = runs[peer_name]
        stopped = any(got == "timeout" for _, _, got in peer_runs)
        peer = _mean(peer_runs)
        faster = peer / ooc
        rows.append(
            TextRow(
                "W16",
                what,
                format_seconds(ooc),
                f"{'> ' if stopped else ''}{format_seconds(peer)} ({label})",
                f"{'> ' if stopped else ''}{faster:.1f}x faster",
                f">= {target:g}x faster",
                "yes" if faster >= target else "**no**",
            )
        )
    return rows, lines, dask_error


def run_w5_store(nbytes: int) -> Result:
    """The percentile workload on W5's store (the issue's wording): (N, 64) float32 zstd, chunks
    of 16384 rows, in a budget of an eighth of it."""
    from datasets import w5_data

    directory = tempfile.mkdtemp(prefix="oocarray-w16-")
    try:
        n_rows = w5_data.rows_for(nbytes)
        path = os.path.join(directory, "w5.zarr")
        w5_data.write_zarr(path, n_rows)
        loaded = np.concatenate([w5_data.block(i, n_rows) for i in w5_data.blocks(n_rows)])
        expected_q = np.percentile(loaded, QUANTILES, axis=0)
        del loaded
        cd.warm(path)
        budget = n_rows * w5_data.ROW_BYTES // BUDGET_FRACTION
        rows, lines, dask_error = _percentile(
            path, expected_q, budget, f"W5's store ({n_rows}, {w5_data.COLUMNS})"
        )
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    table = Table(
        "W16 runs (each a fresh process; VmHWM is the child's peak RSS)",
        ("workload", "side", "time", "VmHWM"),
        lines,
    )
    notes = [
        f"dask's percentiles differ from NumPy's by up to {dask_error:.3g}; oocarray's equal "
        "NumPy's exactly.",
        f"W5's data (datasets/w5_data.py), written untimed; budget {format_bytes(budget)}.",
    ]
    return Result(rows, [table], notes)


def run_w5_paged_hard(
    nbytes: int, directory: str | None = None, max_paged_s: float | None = None
) -> Result:
    """The percentile on W5's store against NumPy on ``x.as_ndarray()``, both in the same
    budget (an eighth of the data) and a hard memory cgroup of the budget + 64 MiB: see
    :func:`benchmarks._w16_paged_hard.run_paged_hard`."""
    from benchmarks._w16_paged_hard import run_paged_hard

    def code_for(side: str, path: str, budget: int) -> str:
        return _code(side, "percentile", path, budget, [], alarm_s=0)

    return run_paged_hard(
        nbytes,
        directory,
        max_paged_s,
        code_for=code_for,
        quantiles=QUANTILES,
        target=PAGED_FASTER,
        budget_fraction=BUDGET_FRACTION,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="64 MiB inputs instead of 2 GiB")
    parser.add_argument("--size", help="the inputs' size, e.g. 512M (default 2G)")
    parser.add_argument(
        "--w5-store",
        action="store_true",
        help="only the percentile, on W5's store (default size 4G, as the issue names)",
    )
    parser.add_argument(
        "--paged-hard",
        action="store_true",
        help="the percentile on W5's store against paged NumPy, both in a hard cgroup of the "
        "budget + 64 MiB (needs root; default size 4G)",
    )
    parser.add_argument("--dir", help="with --paged-hard: keep (and reuse) the data here")
    parser.add_argument(
        "--max-paged-s",
        type=float,
        help="with --paged-hard: stop the paged side at this many seconds if sooner than 50x",
    )
    args = parser.parse_args()
    size = parse_size(args.size) if args.size else None
    if args.paged_hard:
        print(run_w5_paged_hard(size or 4 * GiB, args.dir, args.max_paged_s).render())
    elif args.w5_store:
        print(run_w5_store(size or 4 * GiB).render())
    else:
        print(run(args.quick, size).render())


if __name__ == "__main__":
    main()
