"""W6: fused elementwise to disk, ``((x - m) / s).astype("f4")`` from zarr to a new zarr.

The input is W5's array (4 GiB in PERFORMANCE.md; ``--quick``: 64 MiB): (N, 64) float32 noisy
measurements from :mod:`datasets.w5_data`, written once untimed by oocarray's writer, chunks of
16384 x 64 (4 MiB), zstd level 3.  ``m`` and ``s`` are the per-column float32 mean and std (a
(64,) array each, computed untimed).  Every side writes a fresh output each round (deleted
untimed afterwards); every input file is read once before timing (warm page cache); no side
syncs its output to disk.  Sides, interleaved round by round with the order rotated:

- **oocarray**: ``((x - m) / s).astype("f4").to_zarr(out, codec="zstd", chunks=x.chunks)``,
  inside ``oc.Manager(max_bytes=BUDGET)`` (entered untimed);
- **dask**: ``((y - m) / s).astype("f4")`` on ``da.from_zarr``, stored by ``to_zarr`` into a
  zarr array created by zarr-python with the same chunks and ``ZstdCodec(level=3)``, threads
  scheduler;
- **blosc2** (when importable): the same data converted once (untimed) to blosc2's own format
  (``.b2nd``, the same chunks, ZSTD clevel 3 with blosc2's default shuffle), the lazy
  expression ``(b - m) / s`` computed to a new ``.b2nd`` (ZSTD clevel 3); its result is already
  float32, so no cast is needed;
- **numexpr on numpy.memmap** (no target, a reference for uncompressed data): the raw ``.npy``
  through ``numexpr.evaluate("(x - m) / s", out=...)`` in 16 MiB blocks into a new ``.npy``.

Targets: oocarray >= 1.5x faster than dask (ratio <= 0.67) and at least as fast as blosc2
(ratio <= 1.0).  Each side's output is checked on its first and last blocks.
"""

from __future__ import annotations

import os
import shutil
import statistics
import tempfile
from collections.abc import Callable

import numpy as np

import oocarray as oc
from benchmarks import _compute_data as cd
from benchmarks._timing import (
    Ratio,
    Result,
    Row,
    Table,
    TextRow,
    clock,
    format_bytes,
    format_mib,
    format_seconds,
    interleave,
)
from datasets import w5_data

MiB = 1 << 20
GiB = 1 << 30
FULL_BYTES = 4 * GiB
QUICK_BYTES = 64 * MiB
BUDGET = GiB
QUICK_BUDGET = 256 * MiB
DASK_TARGET = 1 / 1.5
BLOSC2_TARGET = 1.0
RSS_SLACK = 128 * MiB
LOOP_ROWS = 4 * cd.CHUNK_ROWS

Side = Callable[[], float]
Reader = Callable[[int, int], np.ndarray]  # rows a:b of a side's output


def _remove(path: str) -> None:
    if os.path.isdir(path):
        shutil.rmtree(path, ignore_errors=True)
    elif os.path.exists(path):
        os.unlink(path)


def oocarray_side(
    path: str, out: str, m: np.ndarray, s: np.ndarray, budget: int
) -> tuple[Side, Reader]:
    x = oc.open(path)

    def side() -> float:
        _remove(out)
        with oc.Manager(max_bytes=budget):
            start = clock()
            ((x - m) / s).astype("f4").to_zarr(out, codec="zstd", chunks=x.chunks, progress=False)
            return clock() - start

    return side, lambda a, b: oc.open(out)[a:b]


def dask_side(path: str, out: str, m: np.ndarray, s: np.ndarray) -> tuple[Side, Reader]:
    import dask.array as da
    import zarr

    def side() -> float:
        _remove(out)
        start = clock()
        y = da.from_zarr(path)
        target = zarr.create_array(
            out,
            shape=y.shape,
            chunks=y.chunksize,
            dtype="f4",
            compressors=zarr.codecs.ZstdCodec(level=3),
            overwrite=True,
        )
        ((y - m) / s).astype("f4").to_zarr(target, compute=True)  # threads scheduler (default)
        return clock() - start

    return side, lambda a, b: zarr.open_array(out, mode="r")[a:b]


def blosc2_side(
    path: str, directory: str, n_rows: int, m: np.ndarray, s: np.ndarray
) -> tuple[Side, Reader, float]:
    import blosc2

    cparams = {"codec": blosc2.Codec.ZSTD, "clevel": 3}
    source = os.path.join(directory, "x.b2nd")
    out = os.path.join(directory, "w6-blosc2.b2nd")
    start = clock()
    x = oc.open(path)
    b = blosc2.empty(
        (n_rows, w5_data.COLUMNS),
        dtype=np.float32,
        chunks=x.chunks,
        urlpath=source,
        mode="w",
        cparams=cparams,
    )
    for a in range(0, n_rows, LOOP_ROWS):
        b[a : min(a + LOOP_ROWS, n_rows)] = x[a : min(a + LOOP_ROWS, n_rows)]
    convert_s = clock() - start
    b = blosc2.open(source, mode="r")
    mb = blosc2.asarray(m)
    sb = blosc2.asarray(s)

    def side() -> float:
        _remove(out)
        start = clock()
        expr = (b - mb) / sb
        expr.compute(urlpath=out, mode="w", chunks=b.chunks, cparams=cparams)
        return clock() - start

    return side, lambda a, b_: blosc2.open(out, mode="r")[a:b_], convert_s


def numexpr_side(
    npy: str, out: str, n_rows: int, m: np.ndarray, s: np.ndarray
) -> tuple[Side, Reader]:
    import numexpr as ne

    def side() -> float:
        _remove(out)
        start = clock()
        x = np.load(npy, mmap_mode="r")
        y = np.lib.format.open_memmap(out, mode="w+", dtype=np.float32, shape=x.shape)
        for a in range(0, n_rows, LOOP_ROWS):
            b = min(a + LOOP_ROWS, n_rows)
            ne.evaluate("(x - m) / s", local_dict={"x": x[a:b], "m": m, "s": s}, out=y[a:b])
        y.flush()
        del x, y
        return clock() - start

    return side, lambda a, b: np.load(out, mmap_mode="r")[a:b]


def run(quick: bool = False) -> Result:
    parent = tempfile.mkdtemp(prefix="oocarray-w6-")
    try:
        return _run_in(parent, quick)
    finally:
        shutil.rmtree(parent, ignore_errors=True)


def _check(name: str, read: Reader, n_rows: int, m: np.ndarray, s: np.ndarray) -> None:
    last = (n_rows - 1) // w5_data.BLOCK_ROWS
    for index in sorted({0, last}):
        a = index * w5_data.BLOCK_ROWS
        expected = (w5_data.block(index, n_rows) - m) / s
        got = np.asarray(read(a, a + len(expected)))
        if got.dtype != np.float32 or not np.allclose(got, expected, rtol=1e-5, atol=1e-5):
            raise RuntimeError(f"W6 {name}: output block {index} differs from NumPy's")


def _run_in(directory: str, quick: bool) -> Result:
    nbytes = QUICK_BYTES if quick else FULL_BYTES
    budget = QUICK_BUDGET if quick else BUDGET
    notes: list[str] = []
    need = 6 * nbytes + GiB  # input zarr + .npy + blosc2 copy + the outputs of one round
    if not cd.enough_disk(directory, need):
        raise SystemExit(f"W6 needs {format_bytes(need)} free in {directory}")
    data, made_s = cd.make_data(directory, nbytes)
    assert data.npy_path is not None
    mean, std = w5_data.expected_moments(data.n_rows)
    m = mean.astype(np.float32)
    s = std.astype(np.float32)
    n = data.n_rows

    sides: dict[str, Side] = {}
    readers: dict[str, Reader] = {}
    labels: dict[str, str] = {}
    missing: list[str] = []
    sides["oocarray"], readers["oocarray"] = oocarray_side(
        data.zarr_path, os.path.join(directory, "w6-oc.zarr"), m, s, budget
    )
    labels["oocarray"] = "oocarray `to_zarr`"
    try:
        sides["dask"], readers["dask"] = dask_side(
            data.zarr_path, os.path.join(directory, "w6-dask.zarr"), m, s
        )
        labels["dask"] = f"dask {cd.version('dask')} `to_zarr`, threads"
    except ImportError as error:
        missing.append("dask")
        notes.append(f"W6: dask is not installed ({error}): its side is missing.")
    convert_s = None
    try:
        sides["blosc2"], readers["blosc2"], convert_s = blosc2_side(
            data.zarr_path, directory, n, m, s
        )
        labels["blosc2"] = f"blosc2 {cd.version('blosc2')} lazy expr, .b2nd"
    except ImportError as error:
        missing.append("blosc2")
        notes.append(f"W6: blosc2 is not installed ({error}): its side is missing.")
    try:
        sides["numexpr"], readers["numexpr"] = numexpr_side(
            data.npy_path, os.path.join(directory, "w6-ne.npy"), n, m, s
        )
        labels["numexpr"] = f"numexpr {cd.version('numexpr')} on numpy.memmap (.npy)"
    except ImportError as error:
        missing.append("numexpr")
        notes.append(f"W6: numexpr is not installed ({error}): its side is missing.")
    for p in (data.zarr_path, data.npy_path, os.path.join(directory, "x.b2nd")):
        if os.path.exists(p):
            cd.warm(p)

    # One untimed round checks every side's output.
    for name, side in sides.items():
        side()
        _check(name, readers[name], n, m, s)
    out_bytes = {
        name: cd.dir_bytes(p)
        for name, p in (
            ("oocarray", os.path.join(directory, "w6-oc.zarr")),
            ("dask", os.path.join(directory, "w6-dask.zarr")),
            ("blosc2", os.path.join(directory, "w6-blosc2.b2nd")),
        )
        if os.path.exists(p)
    }
    rounds = 3
    times = interleave(sides, rounds=rounds, warmup=0)
    med = {name: statistics.median(t) for name, t in times.items()}
    gib = data.nbytes / GiB
    what = (
        f"`((x - m) / s).astype('f4')` zarr zstd -> new zarr zstd, ({n:,}, 64) f32, "
        f"{gib:.3g} GiB, `Manager(max_bytes={format_bytes(budget)})`"
    )
    ooc = med["oocarray"]
    rows: list[Row | TextRow] = []
    for peer, target, label in (
        ("dask", DASK_TARGET, "vs dask (>= 1.5x faster)"),
        ("blosc2", BLOSC2_TARGET, "vs blosc2 lazy expression (>= blosc2)"),
        ("numexpr", None, "vs numexpr on numpy.memmap, uncompressed .npy -> .npy"),
    ):
        if peer in missing:
            rows.append(Row("W6", f"{what}: {label}", ooc, peer, None, None, target))
        else:
            rows.append(
                Row(
                    "W6",
                    f"{what}: {label}",
                    ooc,
                    labels[peer],
                    med[peer],
                    Ratio.paired(times["oocarray"], times[peer]),
                    target,
                )
            )
    peak = _peak_rss(data.zarr_path, os.path.join(directory, "w6-rss.zarr"), m, s, budget)
    _remove(os.path.join(directory, "w6-rss.zarr"))
    limit = budget + RSS_SLACK
    rows.append(
        TextRow(
            "W6",
            f"peak RSS of the oocarray side in a fresh process, {what}",
            f"VmHWM {format_mib(peak.vmhwm)} (before the pass {format_mib(peak.baseline_rss)}); "
            f"sampled anon+file+shmem {format_mib(peak.sampled_anon_file)}",
            "—",
            "—",
            f"<= {format_mib(limit)}",
            "yes" if max(peak.vmhwm, peak.sampled_anon_file) <= limit else "**no**",
        )
    )
    detail = Table(
        f"W6 time by side ({rounds} interleaved rounds after one checked round; {gib:.3g} GiB; "
        "GB/s of uncompressed input)",
        ("side", "median", "min", "max", "GB/s", "output on disk"),
        [
            [
                labels[k],
                format_seconds(med[k]),
                format_seconds(min(times[k])),
                format_seconds(max(times[k])),
                f"{data.nbytes / med[k] / 1e9:.2f}",
                format_mib(out_bytes[k]) if k in out_bytes else "raw .npy",
            ]
            for k in times
        ],
    )
    notes.append(
        f"W6: data written untimed in {made_s:.0f} s"
        + (f", converted to blosc2 untimed in {convert_s:.0f} s" if convert_s else "")
        + "; input files read once before timing (warm page cache); outputs are not synced."
    )
    for suffix in ("oc.zarr", "dask.zarr", "blosc2.b2nd", "ne.npy"):
        _remove(os.path.join(directory, f"w6-{suffix}"))
    return Result(rows, [detail], notes)


def _peak_rss(path: str, out: str, m: np.ndarray, s: np.ndarray, budget: int) -> cd.Peak:
    code = f"""
import numpy as np, oocarray as oc
from benchmarks import _compute_data as cd
x = oc.open({path!r})
m = np.array({m.tolist()!r}, dtype=np.float32)
s = np.array({s.tolist()!r}, dtype=np.float32)
print("BASE " + cd.status_json(), flush=True)
with oc.Manager(max_bytes={budget}):
    ((x - m) / s).astype("f4").to_zarr({out!r}, codec="zstd", chunks=x.chunks, progress=False)
print("END " + cd.status_json(), flush=True)
"""
    return cd.run_child(code)
