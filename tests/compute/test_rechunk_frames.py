"""The scatter pass as appended frames (oocarray/_compute/_rechunk/_frames.py): target chunks
that are runs of rows supplied strip by strip are written as zstd frames appended to their
files, no scatter buffer; the output equals the input for oocarray, zarr-python and xarray,
each chunk file is the frames and one CRC-32C, and failures and kill -9 leave no partial
chunk behind."""

from __future__ import annotations

import contextlib
import os
import subprocess
from pathlib import Path
from unittest import mock

import numcodecs
import numpy as np
import pytest
import xarray as xr
import zarr
from hypothesis import given
from hypothesis import strategies as st

import oocarray as oc
from oocarray._compute._rechunk import _frames, _passes
from oocarray._compute._rechunk._resume import MARKER, units
from oocarray._storage._zarr._zstd_write import ZstdChunkWriter
from oocarray.errors import CorruptChunkError, MemoryBudgetError
from tests.compute._rechunk_kill import killed_mid_rechunk
from tests.compute.strategies import examples

ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"


def _source(path: Path, values: np.ndarray, chunks: tuple[int, ...], codec: str = "zstd"):
    x = oc.create(path, values.shape, values.dtype, chunks=chunks, codec=codec)
    x[...] = values
    return x


def _leftovers(out: Path) -> list[str]:
    return [p.name for p in out.rglob("*") if p.name.startswith(_frames.PARTIAL_PREFIX)]


def test_series_to_time_steps_appends_a_frame_per_strip_and_reads_back_everywhere(tmp_path):
    # (T, Y, X) chunked (T, 128, 128) -> (1, Y, X): each time step is 4 strips of 128 rows,
    # 256 KiB each: four frames per target chunk.
    values = np.random.default_rng(1).random((8, 512, 512)).astype("f4")  # 8 MiB
    x = _source(tmp_path / "src.zarr", values, (8, 128, 128))
    plan = oc.rechunk(x, (1, -1, -1), tmp_path / "out.zarr", max_mem="8M", dry_run=True)
    work = plan.passes[0]
    assert (plan.strategy, work.frames, work.block) == ("scatter", 2, (8, 128, 512))
    assert "as zstd frames" in str(plan) and not work.scatter_bytes
    assert work.peak_bytes <= 8 << 20
    y = oc.rechunk(x, (1, -1, -1), tmp_path / "out.zarr", max_mem="8M", progress=False)
    assert y.chunks == (1, 512, 512)
    np.testing.assert_array_equal(y[...], values)
    z = zarr.open_array(tmp_path / "out.zarr", mode="r")  # checks every chunk's CRC-32C
    np.testing.assert_array_equal(z[...], values)
    stored = (tmp_path / "out.zarr" / "c" / "5" / "0" / "0").read_bytes()
    assert stored.count(ZSTD_MAGIC) == 4
    assert MARKER not in z.attrs and not _leftovers(tmp_path / "out.zarr")


def test_xarray_reads_a_dataset_variable_written_as_frames(tmp_path):
    values = np.random.default_rng(4).random((8, 512, 512)).astype("f4")
    x = _source(tmp_path / "src.zarr", values, (8, 128, 128))
    oc.rechunk(
        x,
        (1, -1, -1),
        tmp_path / "ds.zarr",
        max_mem="8M",
        out_dataset="t",
        dimension_names=("time", "y", "x"),
        progress=False,
    )
    ds = xr.open_zarr(tmp_path / "ds.zarr", consolidated=False)
    np.testing.assert_array_equal(ds["t"].values, values)


@pytest.mark.parametrize("streamed", [False, True])
def test_rows_to_columns_gathers_each_frame_and_pads_the_last_chunk(tmp_path, streamed):
    # (N, 64) in row blocks -> (512, 16) column blocks with N not a whole number of them:
    # each target chunk gathers its 16 columns from a strip, the last ones end with fill rows.
    # Streamed: each source chunk decoded 3 rows at a time (large chunks are, in a budget),
    # each slab straight into the strip (a strip is one source chunk, in C order).
    values = np.arange(1000 * 64, dtype="i4").reshape(1000, 64)
    x = _source(tmp_path / "src.zarr", values, (8, 64))
    streams = {"STREAM_FROM_BYTES": 0} if streamed else {}
    with (
        mock.patch.multiple(_passes, MIN_FRAME_BYTES=0, **streams),
        mock.patch.object(_frames, "SLAB_BYTES", 3 * 64 * 4),
        mock.patch.object(_frames, "copy_runs", wraps=_frames.copy_runs) as copies,
    ):
        # Streamed decoding's contexts take more than a direct pass here: scatter asked.
        asked = {"max_mem": "64M", "strategy": "scatter"}
        plan = oc.rechunk(x, (512, 16), tmp_path / "out.zarr", dry_run=True, **asked)
        assert plan.passes[0].frames >= 1 and plan.passes[0].stream_reads == streamed
        y = oc.rechunk(x, (512, 16), tmp_path / "out.zarr", progress=False, **asked)
    assert (copies.call_count == 0) == streamed  # whole chunks: copied into the strip
    np.testing.assert_array_equal(y[...], values)
    np.testing.assert_array_equal(zarr.open_array(tmp_path / "out.zarr", mode="r")[...], values)
    assert not _leftovers(tmp_path / "out.zarr")


@st.composite
def _frame_cases(draw):
    ndim = draw(st.integers(1, 3))
    axis = draw(st.integers(0, ndim - 1))
    shape = [draw(st.integers(1, 40)) for _ in range(ndim)]
    shape[axis] = draw(st.integers(4, 40))
    source = [draw(st.integers(1, n)) for n in shape]
    source[axis] = draw(st.integers(1, shape[axis] // 2))
    target = []
    for i in range(ndim):
        if i < axis:
            target.append(1)
        elif i == axis:  # a whole number of source chunks, within the axis
            target.append(source[i] * draw(st.integers(2, shape[i] // source[i])))
        else:
            target.append(draw(st.integers(1, 48)))
    dtype = draw(st.sampled_from(["f4", "f8", "i2", "u1", "c8", "?", "M8[s]"]))
    codec = draw(st.sampled_from(["zstd", "lz4", "none"]))
    budget = draw(st.sampled_from(["64K", "256K", None]))
    streamed = draw(st.booleans())  # source chunks decoded as streams, a few rows at a time
    least = draw(st.sampled_from([0, 64, 512, 4096]))  # frames this long: strips that deep
    return tuple(shape), tuple(source), tuple(target), dtype, codec, budget, streamed, least


@examples(1.0, ci=25)
@given(case=_frame_cases())
def test_frames_equal_the_input_for_any_shape_chunks_and_dtype(tmp_path_factory, case):
    shape, source, target, dtype, codec, budget, streamed, least = case
    tmp = tmp_path_factory.mktemp("f")
    values = (np.arange(int(np.prod(shape))) % 251).astype(dtype).reshape(shape)
    x = _source(tmp / "src.zarr", values, source, codec)
    asked = {"max_mem": budget, "strategy": "scatter"}  # direct would fit most of these
    streams = {"STREAM_FROM_BYTES": 0} if streamed else {}
    with (
        mock.patch.multiple(_passes, MIN_FRAME_BYTES=least, **streams),
        mock.patch.object(_frames, "SLAB_BYTES", 64),  # slabs that cut the pieces
    ):
        try:
            plan = oc.rechunk(x, target, tmp / "out.zarr", dry_run=True, **asked)
        except MemoryBudgetError:  # a target chunk and its strip or group outgrow the budget
            return
        y = oc.rechunk(x, target, tmp / "out.zarr", progress=False, **asked)
    expected = tuple(min(t, n) for t, n in zip(target, shape, strict=True))
    assert y.chunks == expected
    np.testing.assert_array_equal(y[...], values)
    np.testing.assert_array_equal(zarr.open_array(tmp / "out.zarr", mode="r")[...], values)
    assert not _leftovers(tmp / "out.zarr")
    work = plan.passes[0]
    if work.frames:  # the strips the geometry gives, a whole number of them per target chunk
        axis, _ = _passes.strip_geometry(shape, source, expected)
        assert expected[axis] % work.block[axis] == 0 and work.block[axis] % source[axis] == 0


def test_a_failed_append_leaves_no_partial_chunk_and_a_rerun_finishes(tmp_path):
    values = np.random.default_rng(2).random((8, 512, 512)).astype("f4")
    x = _source(tmp_path / "src.zarr", values, (8, 128, 128))
    out = tmp_path / "out.zarr"
    real = ZstdChunkWriter.append_frames
    frames = []

    def failing(self, fds, data, crcs, scratch):
        frames.append(len(data))
        if sum(frames) > 20:  # past the first strip: some chunks begun, none whole
            raise OSError(28, "No space left on device")
        return real(self, fds, data, crcs, scratch)

    with (
        mock.patch.object(ZstdChunkWriter, "append_frames", failing),
        pytest.raises(OSError, match="space"),
    ):
        oc.rechunk(x, (1, -1, -1), out, max_mem="8M", progress=False)
    assert not _leftovers(out)
    assert not [p for p in out.rglob("*") if p.is_file() and "c" in p.parts[-4:-1]]
    y = oc.rechunk(x, (1, -1, -1), out, max_mem="8M", progress=False)
    np.testing.assert_array_equal(y[...], values)
    assert MARKER not in zarr.open_array(out, mode="r").attrs


def test_a_full_disk_is_an_error_with_no_partial_chunk_and_a_rerun_with_space_resumes(
    tiny_tmpfs: Path,
) -> None:
    values = np.random.default_rng(5).random((8, 512, 512)).astype("f4")  # 8 MiB, 4 MiB disk
    x = _source(tiny_tmpfs.parent / "src.zarr", values, (8, 128, 128))
    out = tiny_tmpfs / "out.zarr"
    with pytest.raises(OSError, match="space"):
        oc.rechunk(x, (1, -1, -1), out, max_mem="8M", progress=False)
    assert not _leftovers(out)
    z = zarr.open_array(out, mode="r")
    done = units(z.attrs[MARKER]["done"])
    for t in done:  # every chunk the marker names is whole
        np.testing.assert_array_equal(z[t], values[t])
    subprocess.run(["mount", "-o", "remount,size=16m", str(tiny_tmpfs)], check=True)
    y = oc.rechunk(x, (1, -1, -1), out, max_mem="8M", progress=False)
    np.testing.assert_array_equal(y[...], values)
    assert MARKER not in zarr.open_array(out, mode="r").attrs


def test_outputs_that_cannot_take_frames_go_through_the_buffer(tmp_path):
    # Big-endian values are stored little-endian: not the native writer's bytes.
    values = np.random.default_rng(3).random((8, 512, 512)).astype(">f4")
    x = _source(tmp_path / "src.zarr", values, (8, 128, 128))
    y = oc.rechunk(x, (1, -1, -1), tmp_path / "out.zarr", max_mem="8M", progress=False)
    np.testing.assert_array_equal(y[...], values)
    np.testing.assert_array_equal(zarr.open_array(tmp_path / "out.zarr", mode="r")[...], values)
    plan = oc.rechunk(x, (1, -1, -1), tmp_path / "o2.zarr", max_mem="8M", dry_run=True)
    assert plan.passes[0].frames and plan.passes[0].fallback is not None
    # Asked for one frame per chunk: the buffer, each target chunk encoded whole.
    one = oc.rechunk(
        x, (1, -1, -1), tmp_path / "o3.zarr", max_mem="8M", recompress=True, dry_run=True
    )
    assert not one.passes[0].frames and one.passes[0].scatter_bytes


KILLED = """
import sys, oocarray as oc
from oocarray._compute._rechunk import _frames, _passes
_passes.MIN_FRAME_BYTES = 0
x = oc.open(sys.argv[1])
print("ready", flush=True)
oc.rechunk(x, (256, 16), sys.argv[2], max_mem="64K", progress=False)
"""


def test_kill_minus_nine_mid_pass_then_resume(tmp_path: Path) -> None:
    values = np.arange(24000 * 64, dtype="f8").reshape(24000, 64)
    x = _source(tmp_path / "src.zarr", values, (4, 64))
    out = tmp_path / "out.zarr"
    with mock.patch.object(_passes, "MIN_FRAME_BYTES", 0):
        assert oc.rechunk(x, (256, 16), out, max_mem="64K", dry_run=True).passes[0].frames
    marker = killed_mid_rechunk(KILLED, str(x.path), out)
    recorded = units(marker["done"])
    files = {p: p.stat().st_mtime_ns for p in (out / "c").rglob("*") if p.is_file()}
    with mock.patch.object(_passes, "MIN_FRAME_BYTES", 0):
        y = oc.rechunk(x, (256, 16), out, max_mem="64K", progress=False)
    np.testing.assert_array_equal(y[...], values)
    for flat in recorded:  # a chunk whole before the kill is not written again
        row, column = divmod(flat, 4)
        path = out / "c" / str(row) / str(column)
        assert path.stat().st_mtime_ns == files[path]
    assert MARKER not in zarr.open_array(out, mode="r").attrs
    assert not _leftovers(out), os.listdir(out / "c")


def test_a_rerun_through_the_buffer_removes_what_a_killed_frames_pass_left(tmp_path: Path) -> None:
    values = np.arange(24000 * 64, dtype="f8").reshape(24000, 64)
    x = _source(tmp_path / "src.zarr", values, (4, 64))
    out = tmp_path / "out.zarr"
    killed_mid_rechunk(KILLED, str(x.path), out)
    if not _leftovers(out):
        pytest.skip("the child was killed between two target chunks: no partial file")
    # recompress=True: one frame a chunk, so the rerun resumes through the scatter buffer.
    asked = {"max_mem": "1M", "strategy": "scatter", "recompress": True}
    plan = oc.rechunk(x, (256, 16), out, dry_run=True, **asked)
    assert not plan.passes[0].frames and plan.passes[0].scatter_bytes
    y = oc.rechunk(x, (256, 16), out, progress=False, **asked)
    np.testing.assert_array_equal(y[...], values)
    assert not _leftovers(out)


@pytest.mark.parametrize("streamed", [False, True])
def test_a_damaged_source_chunk_is_an_error_with_no_chunk_written(tmp_path, streamed):
    values = np.random.default_rng(6).random((8, 512, 512)).astype("f4")
    x = _source(tmp_path / "src.zarr", values, (8, 128, 128))
    damaged = tmp_path / "src.zarr" / "c" / "0" / "2" / "1"
    raw = bytearray(damaged.read_bytes())
    raw[len(raw) // 2 : len(raw) // 2 + 64] = bytes(64)
    damaged.write_bytes(bytes(raw))
    out = tmp_path / "out.zarr"
    streams = {"STREAM_FROM_BYTES": 0} if streamed else {}
    with mock.patch.multiple(_passes, **streams) if streams else contextlib.nullcontext():
        plan = oc.rechunk(x, (1, -1, -1), out, max_mem="64M", strategy="scatter", dry_run=True)
        assert plan.passes[0].frames and plan.passes[0].stream_reads == streamed
        with pytest.raises(CorruptChunkError):
            oc.rechunk(x, (1, -1, -1), out, max_mem="64M", strategy="scatter", progress=False)
    assert not _leftovers(out)
    assert not [p for p in (out / "c").rglob("*") if p.is_file()] if (out / "c").exists() else True


@pytest.mark.parametrize(("least", "depth", "frames"), [(4 << 10, 4, 4), (8 << 10, 8, 2)])
def test_time_steps_to_series_take_strips_as_deep_as_the_frames_need(
    tmp_path, least, depth, frames
):
    # (T, Y, X) chunked (1, Y, X) -> (T, 16, 16): a time step gives each target chunk a run of
    # 1 KiB, so a strip is as many time steps as make a frame of ``least`` bytes.
    values = np.random.default_rng(6).random((16, 64, 64)).astype("f4")
    x = _source(tmp_path / "src.zarr", values, (1, 64, 64))
    out = tmp_path / "out.zarr"
    with mock.patch.object(_passes, "MIN_FRAME_BYTES", least):
        plan = oc.rechunk(x, (16, 16, 16), out, max_mem="256K", dry_run=True)
        assert plan.passes[0].frames and plan.passes[0].block == (depth, 64, 64)
        y = oc.rechunk(x, (16, 16, 16), out, max_mem="256K", progress=False)
    np.testing.assert_array_equal(y[...], values)
    np.testing.assert_array_equal(zarr.open_array(out, mode="r")[...], values)
    stored = (out / "c" / "0" / "1" / "2").read_bytes()
    assert stored.count(ZSTD_MAGIC) == frames
    with mock.patch.object(_passes, "MIN_FRAME_BYTES", 32 << 10):  # no strip makes such frames
        assert not oc.rechunk(x, (16, 16, 16), out, max_mem="256K", dry_run=True).passes[0].frames


def test_append_frames_writes_strided_frames_and_extends_their_checksums(tmp_path):
    values = np.random.default_rng(7).random((3, 8, 64)).astype("f4")
    writer = ZstdChunkWriter(level=3, checksum=False, crc32c=True)
    oc.create(tmp_path / "load.zarr", (1,), "f4")  # the codec libraries loaded
    paths = [tmp_path / f"f{j}" for j in range(3)]
    fds = np.array([os.open(p, os.O_WRONLY | os.O_CREAT) for p in paths], dtype=np.int64)
    crcs = np.zeros(3, dtype=np.uint32)
    scratch = np.empty(8 * 16 * 4, dtype=np.uint8)
    try:
        writer.append_frames(fds, values[:, :, 16:32], crcs, scratch)  # gathered
        writer.append_frames(fds, np.ascontiguousarray(values[:, :, :16]), crcs, scratch)
        with pytest.raises(ValueError, match="less than a frame"):
            writer.append_frames(fds, values[:, :, 16:48], crcs, scratch)
        with pytest.raises(ValueError, match="one each per frame"):
            writer.append_frames(fds, values[:2, :, 16:32], crcs[:2], scratch)
    finally:
        for fd in fds:
            os.close(int(fd))
    for j, path in enumerate(paths):
        stored = path.read_bytes()
        crc = bytes(numcodecs.CRC32C().encode(stored)[-4:])  # zarr's crc32c codec's checksum
        assert stored.count(ZSTD_MAGIC) == 2 and int.from_bytes(crc, "little") == crcs[j]
        got = np.frombuffer(numcodecs.Zstd().decode(stored), dtype="f4").reshape(16, 16)
        np.testing.assert_array_equal(got, np.concatenate([values[j, :, 16:32], values[j, :, :16]]))
    closed = np.array([os.open(paths[0], os.O_RDONLY)], dtype=np.int64)
    os.close(int(closed[0]))
    with pytest.raises(OSError, match="Bad file descriptor"):
        writer.append_frames(closed, values[:1, :, :16].copy(), crcs[:1], scratch)
