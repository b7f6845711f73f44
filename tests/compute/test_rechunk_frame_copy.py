"""A direct rechunk that copies zstd frames (oocarray/_compute/_rechunk/_zstd_stream.py,
copy_frames): a target chunk made of whole source chunks one after the other is written as
their stored frames, none decoded.  The file is exactly those frames (and a new CRC-32C); it
reads back equal through oocarray (whole chunks, ranges across frames, paged), zarr-python,
zarrs and xarray, and again as the source of a rechunk; damage is an error with nothing
written, with or without a CRC-32C; ``recompress=True`` writes one frame per chunk."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numcodecs
import numpy as np
import pytest
import zarr
import zarr.codecs

import oocarray as oc
from oocarray._storage._zarr._layout import crc32c_of
from oocarray.errors import CorruptChunkError
from tests.compute.test_rechunk_direct_streams import _source

ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"


def _frames(path: str, crc32c: bool) -> bytes:
    stored = Path(path).read_bytes()
    return stored[:-4] if crc32c else stored


@pytest.fixture
def values() -> np.ndarray:
    # Source chunks of 512 KiB, larger than two zstd blocks: a range of a merged chunk is
    # decoded as a stream, across the frames' ends.
    rng = np.random.default_rng(3)
    return rng.integers(0, 50_000, size=(10, 256, 512)).astype("f4")


@pytest.mark.parametrize("crc32c", [True, False])
def test_a_merged_chunk_is_its_source_chunks_frames(
    tmp_path: Path, values: np.ndarray, crc32c: bool
) -> None:
    x = _source(tmp_path / "src.zarr", values, (1, 256, 512), crc32c)
    plan = oc.rechunk(x, (4, 256, 512), max_mem="64M", dry_run=True)
    assert plan.passes[0].copies_frames
    assert "zstd frames copied" in str(plan)
    y = oc.rechunk(x, (4, 256, 512), tmp_path / "out.zarr", max_mem="64M", progress=False)
    out = oc.open(tmp_path / "out.zarr")._store
    stored = Path(out._chunk_path((1, 0, 0))).read_bytes()
    parts = b"".join(_frames(x._store._chunk_path((t, 0, 0)), crc32c) for t in range(4, 8))
    # The default output chain ends with zarr's crc32c codec: a CRC-32C of the new file.
    assert stored == parts + crc32c_of(parts).to_bytes(4, "little")
    assert stored.count(ZSTD_MAGIC) >= 4
    # The last target chunk covers source chunks 8 and 9 and two past the array's edge (never
    # written): it is encoded, as one frame.
    last = Path(out._chunk_path((2, 0, 0))).read_bytes()
    assert last.startswith(ZSTD_MAGIC) and last[4:].find(ZSTD_MAGIC) == -1
    np.testing.assert_array_equal(y[...], values)


def test_frame_copied_chunks_read_back_equal_everywhere(tmp_path: Path, values: np.ndarray) -> None:
    x = _source(tmp_path / "src.zarr", values, (1, 256, 512), crc32c=True)
    out = tmp_path / "out.zarr"
    oc.rechunk(x, (4, 256, 512), out, max_mem="64M", progress=False)
    y = oc.open(out)
    # Whole chunks, and ranges of one that start in one frame and end in the next.
    np.testing.assert_array_equal(y[...], values)
    np.testing.assert_array_equal(y[1:3], values[1:3])
    np.testing.assert_array_equal(y[4:6, 100:200], values[4:6, 100:200])
    np.testing.assert_array_equal(y[0:3, :, 7], values[0:3, :, 7])
    np.testing.assert_array_equal(np.asarray(y.as_ndarray()), values)
    np.testing.assert_array_equal(zarr.open_array(out, mode="r")[...], values)
    with zarr.config.set({"codec_pipeline.path": "zarrs.ZarrsCodecPipeline"}):
        np.testing.assert_array_equal(zarr.open_array(out, mode="r")[...], values)
    xr = pytest.importorskip("xarray")
    group = tmp_path / "group.zarr"
    oc.rechunk(
        x,
        (4, 256, 512),
        group,
        out_dataset="v",
        dimension_names=("t", "y", "x"),
        max_mem="64M",
        progress=False,
    )
    ds = xr.open_zarr(group, consolidated=False)
    np.testing.assert_array_equal(ds["v"].values, values)


def test_a_frame_copied_array_rechunks_again(tmp_path: Path, values: np.ndarray) -> None:
    x = _source(tmp_path / "src.zarr", values, (1, 256, 512), crc32c=False)
    once = oc.rechunk(x, (2, 256, 512), tmp_path / "once.zarr", max_mem="64M", progress=False)
    # Copied again: chunks of several frames are checked by decoding them, CRC-32C or not.
    twice = oc.rechunk(once, (10, 256, 512), tmp_path / "twice.zarr", max_mem="64M", progress=False)
    np.testing.assert_array_equal(twice[...], values)
    # Decoded as streams, several frames a chunk, and encoded as one frame each.
    again = oc.rechunk(
        once,
        (10, 256, 512),
        tmp_path / "again.zarr",
        max_mem="64M",
        progress=False,
        recompress=True,
    )
    stored = Path(oc.open(tmp_path / "again.zarr")._store._chunk_path((0, 0, 0))).read_bytes()
    assert stored[4:].find(ZSTD_MAGIC) == -1
    np.testing.assert_array_equal(again[...], values)
    # Gathered into other chunks (a scatter or plain direct pass decodes them).
    other = oc.rechunk(once, (10, 64, 512), tmp_path / "other.zarr", max_mem="64M", progress=False)
    np.testing.assert_array_equal(other[...], values)


def test_recompress_writes_one_frame_per_chunk(tmp_path: Path, values: np.ndarray) -> None:
    x = _source(tmp_path / "src.zarr", values, (1, 256, 512), crc32c=True)
    plan = oc.rechunk(x, (4, 256, 512), max_mem="64M", dry_run=True, recompress=True)
    assert not plan.passes[0].copies_frames
    y = oc.rechunk(
        x, (4, 256, 512), tmp_path / "out.zarr", max_mem="64M", progress=False, recompress=True
    )
    stored = Path(y._store._chunk_path((0, 0, 0))).read_bytes()
    assert stored[4:].find(ZSTD_MAGIC) == -1
    np.testing.assert_array_equal(y[...], values)


def _damage(path: Path, how: str) -> None:
    stored = bytearray(path.read_bytes())
    if how == "byte flipped":
        stored[len(stored) // 2] ^= 0x40
    elif how == "truncated":
        del stored[-9:]
    else:  # one whole frame of 1000 bytes, not the chunk's; with its CRC-32C where told
        frame = numcodecs.Zstd(level=3).encode(b"\0" * 1000)
        stored = bytearray(frame)
        if how.endswith("its CRC-32C right"):
            stored += crc32c_of(frame).to_bytes(4, "little")
    path.write_bytes(bytes(stored))


@pytest.mark.parametrize(
    ("crc32c", "how"),
    [
        (True, "byte flipped"),
        (True, "truncated"),
        (False, "truncated"),
        (False, "a frame of too few bytes"),
        (True, "a frame of too few bytes, its CRC-32C right"),
    ],
)
def test_a_damaged_source_chunk_stops_the_copy_with_nothing_written(
    tmp_path: Path, values: np.ndarray, crc32c: bool, how: str
) -> None:
    x = _source(tmp_path / "src.zarr", values, (1, 256, 512), crc32c)
    damaged = Path(x._store._chunk_path((6, 0, 0)))
    _damage(damaged, how)
    with pytest.raises(CorruptChunkError, match=str(damaged)):
        oc.rechunk(x, (4, 256, 512), tmp_path / "out.zarr", max_mem="64M", progress=False)
    out = oc.open(tmp_path / "out.zarr")._store
    assert not Path(out._chunk_path((1, 0, 0))).exists()
    assert not list((tmp_path / "out.zarr").rglob(".tmp-*"))


def test_the_cli_recompresses_when_asked(tmp_path: Path, values: np.ndarray) -> None:
    x = _source(tmp_path / "src.zarr", values, (1, 256, 512), crc32c=True)
    for flag, frames in [([], 4), (["--recompress"], 1)]:
        out = tmp_path / f"out{len(flag)}.zarr"
        command = [sys.executable, "-m", "oocarray", "rechunk", str(x.path), str(out)]
        command += ["--chunks", "4,-1,-1", "--max-ram", "64M", *flag]
        done = subprocess.run(command, capture_output=True, text=True, check=True)
        assert ("zstd frames copied" in done.stdout) == (frames > 1)
        stored = Path(oc.open(out)._store._chunk_path((0, 0, 0))).read_bytes()
        assert stored.count(ZSTD_MAGIC) == frames
        np.testing.assert_array_equal(oc.open(out)[...], values)


def test_crc32c_continues_over_pieces() -> None:
    data = np.random.default_rng(1).bytes(10_000)
    assert crc32c_of(data[6000:], crc32c_of(data[:6000])) == crc32c_of(data)
