"""zstd chunks written with the parameters zstd picks for a 128 KiB source (see _zstd_write.py):
chosen per array on its first chunk, only where they lose at most 1%, always one standard frame
that zarr-python and numcodecs decode to the same values."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import google_crc32c
import numcodecs
import numpy as np
import pytest
import zarr
from hypothesis import given, settings
from hypothesis import strategies as st

import oocarray as oc
from oocarray._storage._zarr._zstd_write import BLOCK_PARAMS_BYTES, ZstdChunkWriter

ROWS, COLUMNS = 2048, 64  # 512 KiB float32 chunks: larger than a zstd block


def _window_bytes(frame: bytes) -> int:
    """The window a zstd frame's header declares (its content size when single-segment)."""
    assert frame[:4] == b"\x28\xb5\x2f\xfd"
    descriptor = frame[4]
    if descriptor & 0x20:  # single segment: the window is the whole content
        return 1 << 62
    exponent, mantissa = frame[5] >> 3, frame[5] & 7
    base = 1 << (10 + exponent)
    return base + base // 8 * mantissa


def _chunk_files(path: str) -> list[str]:
    return sorted(os.path.join(d, f) for d, _, fs in os.walk(os.path.join(path, "c")) for f in fs)


def _noisy(n_rows: int) -> np.ndarray:
    """W6's kind of data: float32 measurements with noise in every mantissa bit."""
    rng = np.random.default_rng(6)
    scale = np.linspace(1, 100, COLUMNS, dtype=np.float32)
    return (rng.standard_normal((n_rows, COLUMNS), dtype=np.float32) * scale + 7).astype("f4")


def _rounded(n_rows: int) -> np.ndarray:
    """Values rounded to two decimals: repeats the long window finds."""
    rng = np.random.default_rng(7)
    walk = np.cumsum(rng.standard_normal((n_rows, COLUMNS)), axis=0) * 0.1
    return np.round(walk, 2).astype("f4")


def _check_frames(path: str, expected: np.ndarray) -> list[int]:
    """Each chunk file is one zstd frame and its CRC-32C, decoding (numcodecs) to the
    expected rows; the windows the frames declare."""
    windows = []
    for index, name in enumerate(_chunk_files(path)):
        raw = Path(name).read_bytes()
        frame, crc = raw[:-4], int.from_bytes(raw[-4:], "little")
        assert google_crc32c.value(frame) == crc
        got = np.frombuffer(numcodecs.Zstd().decode(frame), dtype="<f4").reshape(ROWS, COLUMNS)
        np.testing.assert_array_equal(got, expected[index * ROWS : (index + 1) * ROWS])
        windows.append(_window_bytes(frame))
    return windows


def test_noisy_floats_get_block_sized_parameters_under_a_budget(tmp_path: object) -> None:
    x_np = _noisy(8 * ROWS)  # 4 MiB: twice the budget
    m = x_np.mean(axis=0, dtype=np.float32)
    s = x_np.std(axis=0, dtype=np.float32)
    expected = ((x_np - m) / s).astype("f4")
    source = os.path.join(str(tmp_path), "x.zarr")
    out = os.path.join(str(tmp_path), "y.zarr")
    oc.create(source, x_np.shape, "f4", chunks=(ROWS, COLUMNS))[...] = x_np
    x = oc.open(source)
    with oc.Manager(max_bytes="2M") as manager:
        y = ((x - m) / s).astype("f4").to_zarr(out, chunks=x.chunks, progress=False)
        assert manager.stats().peak_bytes <= 2 << 20
    np.testing.assert_array_equal(y[...], expected)  # bit-equal to NumPy's
    np.testing.assert_array_equal(zarr.open_array(out, mode="r")[...], expected)
    windows = _check_frames(out, expected)
    assert len(windows) == 8 and max(windows) <= BLOCK_PARAMS_BYTES


def test_rounded_floats_keep_zstd_own_parameters(tmp_path: object) -> None:
    data = _rounded(4 * ROWS)
    out = os.path.join(str(tmp_path), "r.zarr")
    y = oc.create(out, data.shape, "f4", chunks=(ROWS, COLUMNS))
    y[...] = data
    np.testing.assert_array_equal(zarr.open_array(out, mode="r")[...], data)
    windows = _check_frames(out, data)
    assert min(windows) > BLOCK_PARAMS_BYTES  # the block-sized ones lost more than 1% here


def test_higher_levels_are_never_tried(tmp_path: object) -> None:
    out = os.path.join(str(tmp_path), "z5.zarr")
    data = _noisy(2 * ROWS)
    zarr.create_array(
        out,
        shape=data.shape,
        chunks=(ROWS, COLUMNS),
        dtype="f4",
        compressors=[zarr.codecs.ZstdCodec(level=5), zarr.codecs.Crc32cCodec()],
    )
    y = oc.open(out, mode="r+")
    y[...] = data
    windows = _check_frames(out, data)
    assert min(windows) > BLOCK_PARAMS_BYTES
    assert ZstdChunkWriter(5, False, True).tune_bytes == 0


@settings(max_examples=15, deadline=None)
@given(
    rows=st.integers(1, 1200),
    kind=st.sampled_from(["noisy", "rounded", "zeros", "ramp"]),
    level=st.integers(1, 4),
    checksum=st.booleans(),
)
def test_any_chunk_decodes_to_its_bytes(rows: int, kind: str, level: int, checksum: bool) -> None:
    data = {
        "noisy": lambda: _noisy(rows),
        "rounded": lambda: _rounded(rows),
        "zeros": lambda: np.zeros((rows, COLUMNS), dtype="f4"),
        "ramp": lambda: np.arange(rows * COLUMNS, dtype="f4").reshape(rows, COLUMNS),
    }[kind]()
    writer = ZstdChunkWriter(level, checksum, crc32c=True)
    fd, path = tempfile.mkstemp()
    try:
        for _ in range(2):  # the first write decides, the second uses the decision
            os.ftruncate(fd, 0)
            os.lseek(fd, 0, os.SEEK_SET)
            written = writer.write(fd, data)
            raw = Path(path).read_bytes()
            assert len(raw) == written
            assert google_crc32c.value(raw[:-4]) == int.from_bytes(raw[-4:], "little")
            assert numcodecs.Zstd().decode(raw[:-4]) == data.tobytes()
        assert writer.tune_bytes in (0, BLOCK_PARAMS_BYTES)
        if data.nbytes <= BLOCK_PARAMS_BYTES or level > 3:
            assert writer.tune_bytes == 0
    finally:
        os.close(fd)
        os.unlink(path)


def test_a_full_disk_is_an_error() -> None:
    writer = ZstdChunkWriter(3, False, crc32c=True)
    full = os.open("/dev/full", os.O_WRONLY)
    try:
        with pytest.raises(OSError, match="No space left on device"):
            writer.write(full, _noisy(ROWS))
    finally:
        os.close(full)
