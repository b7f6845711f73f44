"""The scatter pass with chunks decoded and encoded as zstd streams: the files are the ones
zarr-python reads, the results equal the input, the budget holds with both threads, damage is
an error, and a full disk or kill -9 leaves every target chunk whole or absent."""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest
import zarr
import zarr.codecs
from hypothesis import given, settings
from hypothesis import strategies as st

import oocarray as oc
from oocarray._compute._rechunk import _passes
from oocarray._compute._rechunk._resume import MARKER, units
from oocarray._compute._rechunk._zstd_stream import FrameReader, streamable, write_frame
from oocarray.errors import CorruptChunkError
from tests.compute._rechunk_kill import killed_mid_rechunk

# What makes a plan stream chunks this small (in production only chunks of 8 MiB or more
# are, and only where that runs more threads).
STREAMS_ALWAYS = "from oocarray._compute._rechunk import _passes\n" + (
    "_passes.STREAM_FROM_BYTES = 1\n_passes.PREFER_STREAMS = True\n"
)


@pytest.fixture
def streams(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_passes, "STREAM_FROM_BYTES", 1)
    monkeypatch.setattr(_passes, "PREFER_STREAMS", True)


def _source(path: Path, values: np.ndarray, chunks: tuple[int, ...], **kw: object) -> oc.Array:
    x = oc.create(path, values.shape, values.dtype, chunks=chunks, **kw)
    x[...] = values
    return x


@pytest.mark.parametrize("checksum", [False, True])
def test_a_streamed_chunk_file_is_the_frame_zarr_reads(tmp_path: Path, checksum: bool) -> None:
    values = np.random.default_rng(0).random((300, 70)).astype("f8")
    z = zarr.create_array(
        tmp_path / "a.zarr",
        shape=values.shape,
        chunks=(100, 70),
        dtype="f8",
        compressors=zarr.codecs.ZstdCodec(level=5, checksum=checksum),
    )
    store = oc.open(tmp_path / "a.zarr", "r+")._store
    assert streamable(store)
    for i in range(3):
        stored = np.ascontiguousarray(values[100 * i : 100 * i + 100]).view(np.uint8).ravel()

        def fill(start: int, out: np.ndarray, stored: np.ndarray = stored) -> None:
            out[...] = stored[start : start + out.size]

        write_frame(store, (i, 0), stored.nbytes, fill)
    np.testing.assert_array_equal(z[...], values)
    reader = FrameReader(store, (1, 0))
    out = np.empty((100, 70))
    for start in range(0, 100, 30):  # read back in uneven slabs
        reader.read_into(out[start : start + 30])
    reader.finish()
    np.testing.assert_array_equal(out, values[100:200])


def _read_whole(store: object, chunk: tuple[int, ...], shape: tuple[int, ...]) -> np.ndarray:
    reader = FrameReader(store, chunk)  # type: ignore[arg-type]
    out = np.empty(shape)
    reader.read_into(out)
    reader.finish()
    return out


def test_a_damaged_or_missing_chunk_file(tmp_path: Path) -> None:
    values = np.arange(2000.0).reshape(20, 100)
    x = _source(tmp_path / "a.zarr", values, (10, 100))
    store = x._store
    missing = FrameReader(store, (5, 0))  # never written: the fill value
    out = np.ones((10, 100))
    missing.read_into(out)
    missing.finish()
    assert not out.any()
    path = Path(store._chunk_path((1, 0)))
    stored = bytearray(path.read_bytes())
    stored[len(stored) // 2] ^= 0xFF
    path.write_bytes(bytes(stored))
    with pytest.raises(CorruptChunkError, match="damaged"):
        _read_whole(store, (1, 0), (10, 100))
    path.write_bytes(bytes(stored[: len(stored) // 3]))
    with pytest.raises(CorruptChunkError, match="damaged"):
        _read_whole(store, (1, 0), (10, 100))


@settings(max_examples=15, deadline=None)
@given(
    shape=st.tuples(st.integers(5, 60), st.integers(1, 40), st.integers(1, 12)),
    source=st.tuples(st.integers(1, 9), st.sampled_from([-1, 7]), st.sampled_from([-1, 5])),
    target=st.tuples(st.sampled_from([-1, 13]), st.integers(1, 9), st.integers(1, 5)),
    dtype=st.sampled_from(["f4", "i2", "f8", "u1"]),
)
def test_streamed_scatter_equals_input(
    tmp_path_factory: pytest.TempPathFactory,
    shape: tuple[int, int, int],
    source: tuple[int, int, int],
    target: tuple[int, int, int],
    dtype: str,
) -> None:
    tmp = tmp_path_factory.mktemp("s")
    values = (np.arange(int(np.prod(shape))) % 251).astype(dtype).reshape(shape)
    chunks = tuple(n if c == -1 else c for c, n in zip(source, shape, strict=True))
    x = _source(tmp / "src.zarr", values, chunks)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_passes, "STREAM_FROM_BYTES", 1)
        patch.setattr(_passes, "PREFER_STREAMS", True)
        plan = oc.rechunk(x, target, max_mem="48M", strategy="scatter", dry_run=True)
        assert plan.passes[0].stream_reads and plan.passes[0].stream_writes
        oc.rechunk(x, target, tmp / "out.zarr", max_mem="48M", strategy="scatter", progress=False)
    z = zarr.open_array(tmp / "out.zarr", mode="r")
    np.testing.assert_array_equal(z[...], values)
    assert MARKER not in z.attrs


def test_large_chunks_stream_to_run_two_threads_in_the_budget(tmp_path: Path) -> None:
    # rows -> columns with chunks of 8 MiB in 40 MiB: the one-shot codec's buffers fit one
    # thread, streams two; the data is several times the budget
    values = (np.arange(8192 * 1024) % 1009).astype("f4").reshape(8192, 1024)  # 32 MiB
    values = np.concatenate([values, values[::-1], values, values[::-1]])  # 128 MiB
    x = _source(tmp_path / "src.zarr", values, (2048, 1024))
    plan = oc.rechunk(x, (-1, 256), max_mem="40M", dry_run=True)
    work = plan.passes[0]
    assert plan.strategy == "scatter" and work.workers == 2
    assert work.stream_reads and work.stream_writes and plan.peak_bytes <= 40 << 20
    with oc.Manager(max_bytes="40M") as m:
        oc.rechunk(x, (-1, 256), tmp_path / "out.zarr", progress=False)
        assert m.stats().peak_bytes <= 40 << 20
    np.testing.assert_array_equal(zarr.open_array(tmp_path / "out.zarr", mode="r")[...], values)


def test_a_damaged_source_chunk_stops_a_streamed_rechunk(tmp_path: Path, streams: None) -> None:
    values = np.arange(4000.0).reshape(40, 100)
    x = _source(tmp_path / "src.zarr", values, (10, 100))
    path = Path(x._store._chunk_path((2, 0)))
    path.write_bytes(path.read_bytes()[:-9])
    with pytest.raises(CorruptChunkError, match=str(path)):
        oc.rechunk(
            x, (-1, 10), tmp_path / "out.zarr", max_mem="48M", strategy="scatter", progress=False
        )


def test_a_full_disk_is_an_error_and_a_rerun_resumes(tiny_tmpfs: Path, streams: None) -> None:
    values = np.random.default_rng(3).random((96, 128, 128)).astype("f4")  # 6 MiB
    x = _source(tiny_tmpfs.parent / "src.zarr", values, (1, 128, 128))
    out = tiny_tmpfs / "out.zarr"
    with pytest.raises(OSError, match="space"):
        oc.rechunk(x, (-1, 32, 32), out, max_mem="48M", strategy="scatter", progress=False)
    z = zarr.open_array(out, mode="r")
    marker = z.attrs[MARKER]
    for flat in units(marker["done"]):  # every chunk the marker names is whole
        i, j = divmod(flat, 4)
        region = (slice(None), slice(32 * i, 32 * i + 32), slice(32 * j, 32 * j + 32))
        np.testing.assert_array_equal(z[region], values[region])
    assert not list(Path(out).rglob(".tmp-*"))  # no half-written file left
    subprocess.run(["mount", "-o", "remount,size=16m", str(tiny_tmpfs)], check=True)
    y = oc.rechunk(x, (-1, 32, 32), out, max_mem="48M", strategy="scatter", progress=False)
    np.testing.assert_array_equal(y[...], values)
    assert MARKER not in zarr.open_array(out, mode="r").attrs


SLOW_STREAMED = (
    STREAMS_ALWAYS
    + """
import sys, oocarray as oc
x = oc.open(sys.argv[1])
print("ready", flush=True)
oc.rechunk(x, (2, 16), sys.argv[2], max_mem="48M", strategy="scatter", progress=False)
"""
)


def test_kill_minus_nine_then_resume_streamed(tmp_path: Path) -> None:
    values = np.arange(12000 * 16, dtype="f8").reshape(12000, 16)
    x = _source(tmp_path / "src.zarr", values, (4, 16))
    out = tmp_path / "out.zarr"
    marker = killed_mid_rechunk(SLOW_STREAMED, str(x.path), out)
    z = zarr.open_array(out, mode="r")
    for block in units(marker["done"]):  # each recorded target block (2 rows) is whole
        rows = slice(2 * block, 2 * block + 2)
        np.testing.assert_array_equal(z[rows], values[rows])
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_passes, "STREAM_FROM_BYTES", 1)
        patch.setattr(_passes, "PREFER_STREAMS", True)
        y = oc.rechunk(x, (2, 16), out, max_mem="48M", strategy="scatter", progress=False)
    np.testing.assert_array_equal(y[...], values)
    assert MARKER not in zarr.open_array(out, mode="r").attrs
