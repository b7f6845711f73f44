"""W6: fused elementwise to disk, ``((x - m) / s).astype("f4")`` from zarr to a new zarr.

The input is W5's array (4 GiB in PERFORMANCE.md; ``--quick``: 64 MiB): (N, 64) float32 noisy
measurements from :mod:`datasets.w5_data`, written once untimed by oocarray's writer, chunks of
16384 x 64 (4 MiB), zstd level 3.  ``m`` and ``s`` are the per-column float32 mean and std (a
(64,) array each, computed untimed).  Every side writes a fresh output each round (deleted
untimed afterwards); every input file is read once before timing (warm page cache); no side
syncs its output to disk.  Sides, interleaved round by round with the order rotated:

The output is written twice over, each time with every side using the same codec: zstd level 3
(the input's codec), then Blosc LZ4 clevel 5 with byte shuffle (oocarray's ``codec="lz4"``: as
compact as zstd on these floats and several times faster to write).

- **oocarray**: ``((x - m) / s).astype("f4").to_zarr(out, codec=..., chunks=x.chunks)``,
  inside ``oc.Manager(max_bytes=BUDGET)`` (entered untimed);
- **dask**: ``((y - m) / s).astype("f4")`` on ``da.from_zarr``, stored by ``to_zarr`` into a
  zarr array created by zarr-python with the same chunks and the same codec, threads
  scheduler;
- **blosc2** (when importable): the same data converted once (untimed) to blosc2's own format
  (``.b2nd``, the same chunks, ZSTD clevel 3 with blosc2's default shuffle), the lazy
  expression ``(b - m) / s`` computed to a new ``.b2nd`` (ZSTD clevel 3, or LZ4 clevel 5; with
  shuffle); its result is already float32, so no cast is needed;
- **numexpr on numpy.memmap** (no target, a reference for uncompressed data): the raw ``.npy``
  through ``numexpr.evaluate("(x - m) / s", out=...)`` in 16 MiB blocks into a new ``.npy``.

Targets: oocarray >= 1.5x faster than dask (ratio <= 0.67) and at least as fast as blosc2
(ratio <= 1.0).  Each side's output is checked on its first and last blocks.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable

import numpy as np

import oocarray as oc
from benchmarks import _compute_data as cd
from benchmarks._harness import Peer, Run, Sides, scratch
from benchmarks._timing import (
    Result,
    Row,
    Table,
    TextRow,
    clock,
    format_bytes,
    format_mib,
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
    path: str, out: str, m: np.ndarray, s: np.ndarray, budget: int, codec: str
) -> tuple[Side, Reader]:
    x = oc.open(path)

    def side() -> float:
        _remove(out)
        with oc.Manager(max_bytes=budget):
            start = clock()
            ((x - m) / s).astype("f4").to_zarr(out, codec=codec, chunks=x.chunks, progress=False)
            return clock() - start

    return side, lambda a, b: oc.open(out)[a:b]


def _zarr_compressor(codec: str) -> object:
    """zarr-python's codec for what oocarray's ``codec=`` writes."""
    import zarr

    if codec == "zstd":
        return zarr.codecs.ZstdCodec(level=3)
    return zarr.codecs.BloscCodec(cname="lz4", clevel=5, shuffle="shuffle", typesize=4)


def dask_side(path: str, out: str, m: np.ndarray, s: np.ndarray, codec: str) -> tuple[Side, Reader]:
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
            compressors=_zarr_compressor(codec),
            overwrite=True,
        )
        ((y - m) / s).astype("f4").to_zarr(target, compute=True)  # threads scheduler (default)
        return clock() - start

    return side, lambda a, b: zarr.open_array(out, mode="r")[a:b]


def blosc2_input(path: str, directory: str, n_rows: int) -> tuple[str, float]:
    """W6's input converted (untimed) to blosc2's own format: the same chunks, ZSTD clevel 3
    with blosc2's default shuffle, as the zarr input is zstd."""
    import blosc2

    start = clock()
    source = os.path.join(directory, "x.b2nd")
    x = oc.open(path)
    b = blosc2.empty(
        (n_rows, w5_data.COLUMNS),
        dtype=np.float32,
        chunks=x.chunks,
        urlpath=source,
        mode="w",
        cparams={"codec": blosc2.Codec.ZSTD, "clevel": 3},
    )
    for a in range(0, n_rows, LOOP_ROWS):
        b[a : min(a + LOOP_ROWS, n_rows)] = x[a : min(a + LOOP_ROWS, n_rows)]
    return source, clock() - start


def blosc2_side(
    source: str, directory: str, m: np.ndarray, s: np.ndarray, codec: str
) -> tuple[Side, Reader]:
    """The lazy expression ``(b - m) / s`` computed to a new ``.b2nd``: ZSTD clevel 3 or LZ4
    clevel 5, blosc2's default shuffle either way (oocarray's ``"lz4"`` is Blosc LZ4 clevel 5
    with byte shuffle)."""
    import blosc2

    cparams = (
        {"codec": blosc2.Codec.ZSTD, "clevel": 3}
        if codec == "zstd"
        else {"codec": blosc2.Codec.LZ4, "clevel": 5}
    )
    out = os.path.join(directory, f"w6-blosc2-{codec}.b2nd")
    b = blosc2.open(source, mode="r")
    mb = blosc2.asarray(m)
    sb = blosc2.asarray(s)

    def side() -> float:
        _remove(out)
        start = clock()
        expr = (b - mb) / sb
        expr.compute(urlpath=out, mode="w", chunks=b.chunks, cparams=cparams)
        return clock() - start

    return side, lambda a, b_: blosc2.open(out, mode="r")[a:b_]


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
    with scratch("oocarray-w6-") as directory:
        return _run_in(directory, quick)


def _run_of(pair: tuple[Side, Reader]) -> Run:
    """A side for the harness: its seconds, and the reader of what it wrote (to check)."""
    side, reader = pair
    return lambda: (side(), reader)


def _check(name: str, read: Reader, n_rows: int, m: np.ndarray, s: np.ndarray) -> None:
    last = (n_rows - 1) // w5_data.BLOCK_ROWS
    for index in sorted({0, last}):
        a = index * w5_data.BLOCK_ROWS
        expected = (w5_data.block(index, n_rows) - m) / s
        got = np.asarray(read(a, a + len(expected)))
        if got.dtype != np.float32 or not np.allclose(got, expected, rtol=1e-5, atol=1e-5):
            raise RuntimeError(f"W6 {name}: output block {index} differs from NumPy's")


CODECS = ("zstd", "lz4")
CODEC_LABELS = {
    "zstd": "zstd level 3",
    "lz4": "Blosc lz4 clevel 5 + byte shuffle (`codec='lz4'`)",
}


def _disk_need(nbytes: int) -> int:
    return 7 * nbytes + GiB  # input zarr + .npy + blosc2 copy + the outputs of one round


def _size_that_fits(directory: str, nbytes: int, notes: list[str]) -> int:
    """``nbytes``, or where the disk is too full for it the largest half, quarter, ... of it
    (down to 512 MiB) that fits, said in the notes: a smaller run beats none."""
    size = nbytes
    while not cd.enough_disk(directory, _disk_need(size)) and size > 512 * MiB:
        size //= 2
    if not cd.enough_disk(directory, _disk_need(size)):
        raise SystemExit(f"W6 needs {format_bytes(_disk_need(size))} free in {directory}")
    if size != nbytes:
        notes.append(
            f"W6: run at {format_bytes(size)}, not {format_bytes(nbytes)}: the disk had room "
            f"for {format_bytes(_disk_need(size))} (inputs and one round's outputs), not "
            f"{format_bytes(_disk_need(nbytes))}."
        )
    return size


def _run_in(directory: str, quick: bool) -> Result:
    nbytes = QUICK_BYTES if quick else FULL_BYTES
    budget = QUICK_BUDGET if quick else BUDGET
    notes: list[str] = []
    nbytes = _size_that_fits(directory, nbytes, notes)
    data, made_s = cd.make_data(directory, nbytes)
    assert data.npy_path is not None
    mean, std = w5_data.expected_moments(data.n_rows)
    m = mean.astype(np.float32)
    s = std.astype(np.float32)
    n = data.n_rows
    try:
        b2_source: str | None
        b2_source, convert_s = blosc2_input(data.zarr_path, directory, n)
    except ImportError as error:
        b2_source, convert_s = None, 0.0
        notes.append(f"W6: blosc2 is not installed ({error}): its sides are missing.")
    for p in (data.zarr_path, data.npy_path, b2_source):
        if p is not None and os.path.exists(p):
            cd.warm(p)

    rows: list[Row | TextRow] = []
    tables: list[Table] = []
    gib = data.nbytes / GiB
    for codec in CODECS:
        what = (
            f"`((x - m) / s).astype('f4')` zarr zstd -> new zarr, {CODEC_LABELS[codec]}, "
            f"({n:,}, 64) f32, {gib:.3g} GiB, `Manager(max_bytes={format_bytes(budget)})`"
        )
        peers, outputs = _peers(directory, data, b2_source, m, s, budget, codec)
        sides = Sides.discover("W6", peers)
        if codec == CODECS[0]:
            notes += sides.notes()

        def verify(name: str, reader: object) -> None:
            _check(name, reader, n, m, s)  # type: ignore[arg-type]

        sides.check(verify)  # one untimed round checks every side's output
        out_bytes = {k: cd.dir_bytes(p) for k, p in outputs.items() if os.path.exists(p)}
        timings = sides.time(rounds=3, files=(data.zarr_path, data.npy_path))
        rows += [
            timings.row(
                what,
                "oocarray",
                "dask",
                DASK_TARGET,
                label="vs dask, the same output codec (>= 1.5x faster)",
            ),
            timings.row(
                what,
                "oocarray",
                "blosc2",
                BLOSC2_TARGET,
                label="vs blosc2 lazy expression, the same codec (>= blosc2)",
            ),
        ]
        if "numexpr" in timings.times:
            rows.append(
                timings.row(
                    what,
                    "oocarray",
                    "numexpr",
                    None,
                    label="vs numexpr on numpy.memmap, uncompressed .npy -> .npy",
                )
            )
        tables.append(
            timings.by_side(
                f"W6 time by side, output {CODEC_LABELS[codec]} after one checked round; "
                f"{gib:.3g} GiB; GB/s of uncompressed input",
                data.nbytes,
                {
                    "output on disk": lambda k, sizes=out_bytes: (  # type: ignore[misc]
                        format_mib(sizes[k]) if k in sizes else "raw .npy"
                    )
                },
            )
        )
        for p in (*outputs.values(), os.path.join(directory, "w6-ne.npy")):
            _remove(p)
    for codec in CODECS:
        out = os.path.join(directory, "w6-rss.zarr")
        peak = _peak_rss(data.zarr_path, out, m, s, budget, codec)
        _remove(out)
        limit = budget + RSS_SLACK
        rows.append(
            TextRow(
                "W6",
                f"peak RSS of the oocarray side in a fresh process, output {CODEC_LABELS[codec]}, "
                f"`Manager(max_bytes={format_bytes(budget)})`",
                f"VmHWM {format_mib(peak.vmhwm)} (before the pass "
                f"{format_mib(peak.baseline_rss)}); sampled anon+file+shmem "
                f"{format_mib(peak.sampled_anon_file)}",
                "—",
                "—",
                f"<= {format_mib(limit)}",
                "yes" if max(peak.vmhwm, peak.sampled_anon_file) <= limit else "**no**",
            )
        )
    notes.append(
        f"W6: data written untimed in {made_s:.0f} s"
        + (f", converted to blosc2 untimed in {convert_s:.0f} s" if b2_source else "")
        + "; input files read once before timing (warm page cache); outputs are not synced."
    )
    return Result(rows, tables, notes)


def _peers(
    directory: str,
    data: cd.Data,
    b2_source: str | None,
    m: np.ndarray,
    s: np.ndarray,
    budget: int,
    codec: str,
) -> tuple[dict[str, Peer], dict[str, str]]:
    """The sides writing one output codec, and where each writes: oocarray, dask, blosc2 (when
    its input could be made) and, with zstd, numexpr over the raw .npy."""
    outputs = {
        "oocarray": os.path.join(directory, f"w6-oc-{codec}.zarr"),
        "dask": os.path.join(directory, f"w6-dask-{codec}.zarr"),
        "blosc2": os.path.join(directory, f"w6-blosc2-{codec}.b2nd"),
    }
    peers = {
        "oocarray": Peer(
            f"oocarray `to_zarr(codec={codec!r})`",
            lambda: _run_of(
                oocarray_side(data.zarr_path, outputs["oocarray"], m, s, budget, codec)
            ),
        ),
        "dask": Peer(
            f"dask {cd.version('dask')} `to_zarr`, threads",
            lambda: _run_of(dask_side(data.zarr_path, outputs["dask"], m, s, codec)),
        ),
    }
    if b2_source is not None:
        peers["blosc2"] = Peer(
            f"blosc2 {cd.version('blosc2')} lazy expr, .b2nd",
            lambda: _run_of(blosc2_side(b2_source, directory, m, s, codec)),
        )
    if codec == CODECS[0]:
        assert data.npy_path is not None
        npy_path = data.npy_path
        peers["numexpr"] = Peer(
            f"numexpr {cd.version('numexpr')} on numpy.memmap (.npy)",
            lambda: _run_of(
                numexpr_side(npy_path, os.path.join(directory, "w6-ne.npy"), data.n_rows, m, s)
            ),
        )
    return peers, outputs


def _peak_rss(
    path: str, out: str, m: np.ndarray, s: np.ndarray, budget: int, codec: str
) -> cd.Peak:
    code = f"""
import numpy as np, oocarray as oc
from benchmarks import _compute_data as cd
x = oc.open({path!r})
m = np.array({m.tolist()!r}, dtype=np.float32)
s = np.array({s.tolist()!r}, dtype=np.float32)
print("BASE " + cd.status_json(), flush=True)
with oc.Manager(max_bytes={budget}):
    ((x - m) / s).astype("f4").to_zarr({out!r}, codec={codec!r}, chunks=x.chunks, progress=False)
print("END " + cd.status_json(), flush=True)
"""
    return cd.run_child(code)
