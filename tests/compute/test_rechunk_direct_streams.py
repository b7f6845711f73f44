"""The direct pass streamed (oocarray/_compute/_rechunk/_direct_stream.py): target chunks
made of whole source chunks are their frames copied, or with ``recompress`` encoded from them
as zstd streams (test_rechunk_frame_copy.py has the copies' own tests); the results equal the
input (edges, chunks never written, with and without zarr's crc32c), the budget holds with
every thread, damage is an error, and kill -9 leaves every target chunk whole or absent."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import zarr
import zarr.codecs
from hypothesis import given
from hypothesis import strategies as st

import oocarray as oc
from oocarray._compute._rechunk import _passes
from oocarray._compute._rechunk._direct_stream import streams_directly
from oocarray._compute._rechunk._resume import MARKER, units
from oocarray.errors import CorruptChunkError
from tests.compute._rechunk_kill import killed_mid_rechunk
from tests.compute.test_rechunk_streams import STREAMS_ALWAYS


@pytest.fixture
def streams(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_passes, "STREAM_FROM_BYTES", 1)
    monkeypatch.setattr(_passes, "PREFER_STREAMS", True)


def _source(path: Path, values: np.ndarray, chunks: tuple[int, ...], crc32c: bool) -> oc.Array:
    """A zstd zarr of ``values``, with or without zarr's crc32c codec after zstd; chunks
    whose values are all zero are left unwritten (they read as the fill value)."""
    compressors = [zarr.codecs.ZstdCodec(level=3)]
    if crc32c:
        compressors.append(zarr.codecs.Crc32cCodec())
    z = zarr.create_array(
        path, shape=values.shape, dtype=values.dtype, chunks=chunks, compressors=compressors
    )
    z[...] = values
    return oc.open(path)


def test_which_chunkings_stream_directly() -> None:
    assert streams_directly((1, 64, 64), (4, 64, 64))  # merged along the leading axis
    assert streams_directly((1, 8, 64), (2, 32, 64))  # runs along axis 1
    assert not streams_directly((1, 8, 32), (2, 32, 64))  # a piece is not one run
    assert not streams_directly((2, 64), (3, 64))  # not whole source chunks


@pytest.mark.parametrize("recompress", [False, True])
@pytest.mark.parametrize("crc32c", [True, False])
@given(
    lead=st.integers(1, 3),
    merged=st.integers(1, 4),
    rows=st.sampled_from([(8, 1), (8, 2), (3, 3)]),
    extra=st.tuples(st.integers(0, 5), st.integers(0, 7)),
    dtype=st.sampled_from(["f4", "i2", "f8", "u1"]),
    holes=st.booleans(),
)
def test_streamed_direct_equals_input(
    tmp_path_factory: pytest.TempPathFactory,
    crc32c: bool,
    recompress: bool,
    lead: int,
    merged: int,
    rows: tuple[int, int],
    extra: tuple[int, int],
    dtype: str,
    holes: bool,
) -> None:
    tmp = tmp_path_factory.mktemp("d")
    # Source chunks (lead, per, 12) (or per = 8 rows whole along axis 1, lead 1 for the
    # run along axis 1); target chunks merge `merged` of them along axis 0 and `times`
    # along axis 1; the shape cuts the last chunks short by `extra`.
    per, times = rows
    source = (1 if times > 1 else lead, per, 12)
    target = (source[0] * merged, per * times, 12)
    shape = (target[0] * 2 + extra[0], target[1] * 2 + extra[1], 12)
    values = (np.arange(int(np.prod(shape))) % 251 + 1).astype(dtype).reshape(shape)
    if holes:
        values[: source[0]] = 0  # whole source chunks never written
    x = _source(tmp / "src.zarr", values, source, crc32c)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_passes, "STREAM_FROM_BYTES", 1)
        patch.setattr(_passes, "PREFER_STREAMS", True)
        plan = oc.rechunk(x, target, max_mem="48M", dry_run=True, recompress=recompress)
        work = plan.passes[0]
        assert plan.strategy == "direct" and work.stream_reads and work.stream_writes
        assert work.copies_frames is not recompress
        oc.rechunk(
            x, target, tmp / "out.zarr", max_mem="48M", progress=False, recompress=recompress
        )
    z = zarr.open_array(tmp / "out.zarr", mode="r")
    assert z.chunks == target
    np.testing.assert_array_equal(z[...], values)
    assert MARKER not in z.attrs


def test_large_chunks_merge_on_every_thread_in_the_budget(tmp_path: Path) -> None:
    # 8 MiB chunks merged two at a time in 48 MiB: a plain direct block (read, encoded and
    # its codec buffer: 40 MiB) fits one thread, streams two.
    rng = np.random.default_rng(7)
    values = rng.integers(0, 1000, size=(4, 512, 4096)).astype("f4")  # 32 MiB
    x = _source(tmp_path / "src.zarr", values, (1, 512, 4096), crc32c=True)
    plan = oc.rechunk(x, (2, 512, 4096), max_mem="48M", dry_run=True, recompress=True)
    work = plan.passes[0]
    assert plan.strategy == "direct" and work.workers == 2
    assert work.stream_reads and work.stream_writes and plan.peak_bytes <= 48 << 20
    assert "(chunks read and written as streams)" in str(plan)
    with oc.Manager(max_bytes="48M") as m:
        oc.rechunk(x, (2, 512, 4096), tmp_path / "out.zarr", progress=False, recompress=True)
        assert m.stats().peak_bytes <= 48 << 20
    np.testing.assert_array_equal(zarr.open_array(tmp_path / "out.zarr", mode="r")[...], values)


@pytest.mark.parametrize("damage", ["truncated", "not zstd"])
def test_a_damaged_source_chunk_stops_a_streamed_direct_pass(
    tmp_path: Path, streams: None, damage: str
) -> None:
    values = np.arange(4000.0).reshape(40, 100)
    x = _source(tmp_path / "src.zarr", values, (5, 100), crc32c=True)
    path = Path(x._store._chunk_path((3, 0)))
    stored = path.read_bytes()
    path.write_bytes(stored[:-9] if damage == "truncated" else b"\0" * len(stored))
    with pytest.raises(CorruptChunkError, match=str(path)):
        oc.rechunk(x, (20, 100), tmp_path / "out.zarr", max_mem="48M", progress=False)
    # The target chunk that needed it was never written, nor left half-written.
    z = zarr.open_array(tmp_path / "out.zarr", mode="r")
    assert not Path(z.store.root / "c" / "0" / "0").exists()  # type: ignore[attr-defined]
    assert not list((tmp_path / "out.zarr").rglob(".tmp-*"))


SLOW_DIRECT = (
    STREAMS_ALWAYS
    + """
import sys, oocarray as oc
x = oc.open(sys.argv[1])
print("ready", flush=True)
oc.rechunk(x, (8, 16), sys.argv[2], max_mem="48M", progress=False)
"""
)


def test_kill_minus_nine_then_resume_streamed_direct(tmp_path: Path) -> None:
    values = np.arange(24000 * 16, dtype="f8").reshape(24000, 16)
    x = _source(tmp_path / "src.zarr", values, (2, 16), crc32c=True)
    out = tmp_path / "out.zarr"
    marker = killed_mid_rechunk(SLOW_DIRECT, str(x.path), out)
    z = zarr.open_array(out, mode="r")
    for block in units(marker["done"]):  # each recorded target chunk (8 rows) is whole
        rows = slice(8 * block, 8 * block + 8)
        np.testing.assert_array_equal(z[rows], values[rows])
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_passes, "STREAM_FROM_BYTES", 1)
        patch.setattr(_passes, "PREFER_STREAMS", True)
        y = oc.rechunk(x, (8, 16), out, max_mem="48M", progress=False)
    np.testing.assert_array_equal(y[...], values)
    assert MARKER not in zarr.open_array(out, mode="r").attrs


def test_a_store_that_cannot_stream_falls_back_to_the_plain_direct_pass(
    tmp_path: Path, streams: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    from oocarray._compute._rechunk import _direct_stream

    values = np.arange(4000.0).reshape(40, 100)
    x = _source(tmp_path / "src.zarr", values, (5, 100), crc32c=True)
    assert oc.rechunk(x, (20, 100), max_mem="48M", dry_run=True).passes[0].stream_writes
    # The store made for the output is not what the plan saw: nothing streams.
    monkeypatch.setattr(_direct_stream, "streamable", lambda store: False)
    y = oc.rechunk(x, (20, 100), tmp_path / "out.zarr", max_mem="48M", progress=False)
    assert y.chunks == (20, 100)
    np.testing.assert_array_equal(zarr.open_array(tmp_path / "out.zarr", mode="r")[...], values)
