"""W9 (by hand, ``python -m benchmarks --large``): W5 and W6 on a 32 GiB array, larger than RAM.

The input is W5's (N, 64) float32 noisy array (:mod:`datasets.w5_data`), 32 GiB uncompressed,
zstd zarr with 4 MiB chunks, written untimed by oocarray's writer.  It does not fit the page
cache of the machine it was made for (23.5 GiB), so every side reads from disk.  Each side runs
in a fresh process (so its peak RSS is its own), once per order, oocarray first then dask, then
the reverse; the figures are the mean of the two runs.  Sides:

- W5: oocarray ``oc.compute(x.mean(axis=0, compute=False), x.std(axis=0, compute=False))`` in
  ``oc.Manager(max_bytes="2G")`` against dask ``from_zarr`` mean and std by ``dask.compute``
  (threads);
- W6: oocarray ``((x - m) / s).astype("f4").to_zarr(out, codec=...)`` in the same manager
  against dask's ``to_zarr`` into a zarr-python array with the same codec: zstd level 3, then
  Blosc LZ4 clevel 5 with byte shuffle (``codec="lz4"``), as in W6.

Targets (PERFORMANCE.md): completes; peak RSS <= 2 GiB + 256 MiB; >= 1.3x faster than dask.
Needs about 2 x 29 GiB of free disk (the input and one output at a time) plus 4 GiB slack;
without it the benchmark stops and says so.  ``--quick`` runs the same on 256 MiB.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile

import numpy as np

from benchmarks import _compute_data as cd
from benchmarks._disk import free_bytes
from benchmarks._timing import Result, Table, TextRow, format_bytes, format_mib, format_seconds
from datasets import w5_data

MiB = 1 << 20
GiB = 1 << 30
FULL_BYTES = 32 * GiB
QUICK_BYTES = 256 * MiB
BUDGET = 2 * GiB
QUICK_BUDGET = 256 * MiB
RSS_SLACK = 256 * MiB
FASTER = 1.3
STORED_FRACTION = 0.92  # zstd keeps about 0.88 of this data; a little margin


def _code(
    side: str,
    workload: str,
    path: str,
    out: str,
    budget: int,
    m: np.ndarray | None,
    s: np.ndarray | None,
    codec: str = "zstd",
) -> str:
    head = f"""
import time, json, numpy as np
from benchmarks import _compute_data as cd
path, out, budget = {path!r}, {out!r}, {budget}
"""
    if m is not None and s is not None:
        head += (
            f"m = np.array({m.tolist()!r}, dtype=np.float32)\n"
            f"s = np.array({s.tolist()!r}, dtype=np.float32)\n"
        )
    if side == "oocarray":
        head += "import oocarray as oc\nx = oc.open(path)\n"
        if workload == "W5":
            body = (
                "with oc.Manager(max_bytes=budget):\n"
                "    got = oc.compute(x.mean(axis=0, compute=False), "
                "x.std(axis=0, compute=False), progress=False)\n"
            )
        else:
            body = (
                "with oc.Manager(max_bytes=budget):\n"
                f"    ((x - m) / s).astype('f4').to_zarr(out, codec={codec!r}, chunks=x.chunks, "
                "progress=False)\n    got = None\n"
            )
    else:
        head += (
            "import dask, dask.array as da, zarr\n"
            "from benchmarks.w6_fused import _zarr_compressor\n"
            "y = da.from_zarr(path)\n"
        )
        if workload == "W5":
            body = "got = dask.compute(y.mean(axis=0), y.std(axis=0), scheduler='threads')\n"
        else:
            body = (
                "t = zarr.create_array(out, shape=y.shape, chunks=y.chunksize, dtype='f4', "
                f"compressors=_zarr_compressor({codec!r}), overwrite=True)\n"
                "((y - m) / s).astype('f4').to_zarr(t, compute=True)\ngot = None\n"
            )
    tail = """
seconds = time.perf_counter() - start
print("END " + cd.status_json(), flush=True)
if got is not None:
    print("GOT " + json.dumps([np.asarray(g, dtype=float).tolist() for g in got]), flush=True)
print("TIME " + repr(seconds), flush=True)
"""
    return (
        head
        + 'print("BASE " + cd.status_json(), flush=True)\nstart = time.perf_counter()\n'
        + body
        + tail
    )


def _run_side(code: str) -> tuple[float, cd.Peak, list[list[float]] | None]:
    lines: list[str] = []
    peak = cd.run_child(code, lines_out=lines)
    seconds = None
    got = None
    for line in lines:
        if line.startswith("TIME "):
            seconds = float(line[5:])
        elif line.startswith("GOT "):
            got = json.loads(line[4:])
    if seconds is None:
        raise RuntimeError("W9: a side printed no time")
    return seconds, peak, got


def run(quick: bool = False) -> Result:
    nbytes = QUICK_BYTES if quick else FULL_BYTES
    budget = QUICK_BUDGET if quick else BUDGET
    parent = tempfile.gettempdir()
    need = int(2 * STORED_FRACTION * nbytes) + 4 * GiB
    if free_bytes(parent) < need:
        raise SystemExit(
            f"W9 needs {format_bytes(need)} free in {parent}, has "
            f"{free_bytes(parent) / GiB:.1f} GiB: not run"
        )
    directory = tempfile.mkdtemp(prefix="oocarray-w9-")
    try:
        return _run_in(directory, nbytes, budget)
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def _run_in(directory: str, nbytes: int, budget: int) -> Result:
    data, made_s = cd.make_data(directory, nbytes, npy=False)
    mean, std = w5_data.expected_moments(data.n_rows)
    m, s = mean.astype(np.float32), std.astype(np.float32)
    out = os.path.join(directory, "out.zarr")
    rows: list[TextRow] = []
    detail: list[list[str]] = []
    limit = budget + RSS_SLACK
    for workload, codec in (("W5", "zstd"), ("W6", "zstd"), ("W6", "lz4")):
        runs: dict[str, list[tuple[float, cd.Peak]]] = {"oocarray": [], "dask": []}
        for order in (("oocarray", "dask"), ("dask", "oocarray")):
            for side in order:
                shutil.rmtree(out, ignore_errors=True)
                seconds, peak, got = _run_side(
                    _code(side, workload, data.zarr_path, out, budget, m, s, codec)
                )
                if got is not None:
                    cd.moments_close(
                        (np.array(got[0]), np.array(got[1])), (mean, std), f"W9 {workload} {side}"
                    )
                runs[side].append((seconds, peak))
                detail.append(
                    [
                        workload if workload == "W5" else f"{workload}, output {codec}",
                        side,
                        format_seconds(seconds),
                        format_mib(peak.vmhwm),
                        format_mib(peak.sampled_anon_file),
                    ]
                )
        shutil.rmtree(out, ignore_errors=True)
        ooc = sum(t for t, _ in runs["oocarray"]) / 2
        dsk = sum(t for t, _ in runs["dask"]) / 2
        ooc_peak = max(max(p.vmhwm, p.sampled_anon_file) for _, p in runs["oocarray"])
        dsk_peak = max(max(p.vmhwm, p.sampled_anon_file) for _, p in runs["dask"])
        ratio = ooc / dsk
        what = (
            "mean+std axis 0"
            if workload == "W5"
            else f"`((x - m) / s).astype('f4')` to zarr, output codec {codec!r} on both sides"
        )
        rows.append(
            TextRow(
                "W9",
                f"{workload} at {nbytes / GiB:.3g} GiB ({what}), "
                f"`Manager(max_bytes={format_bytes(budget)})`",
                f"{format_seconds(ooc)}; peak RSS {format_mib(ooc_peak)}",
                f"{format_seconds(dsk)} (dask, threads); peak RSS {format_mib(dsk_peak)}",
                f"{ratio:.2f}x",
                f"<= {1 / FASTER:.2f}x; RSS <= {format_mib(limit)}",
                ("yes" if ratio <= 1 / FASTER else "**no**")
                + " / "
                + ("yes" if ooc_peak <= limit else "**no**"),
            )
        )
    table = Table(
        "W9 runs (each a fresh process)",
        ("workload", "side", "time", "VmHWM", "sampled anon+file+shmem"),
        detail,
    )
    notes = [
        f"W9: input written untimed in {made_s:.0f} s, "
        f"{format_mib(cd.dir_bytes(data.zarr_path))} on disk."
    ]
    return Result(rows, [table], notes)
