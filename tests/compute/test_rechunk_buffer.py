"""The scatter buffer's slots (oocarray/_compute/_rechunk/_buffer.py): a slot released is
freed by the buffer's own thread (a hole punched, neighbours at once) while the others keep
their bytes; whether a slot's pages are cached is asked without waiting; a file system that
cannot punch holes stops the freeing, never the rechunk."""

from __future__ import annotations

import os

import numpy as np
import pytest

from oocarray import _native
from oocarray._compute._rechunk import _buffer
from oocarray._compute._rechunk._buffer import PAGE, ScatterBuffer

SEEK_DATA = getattr(os, "SEEK_DATA", 3)


def _filled(monkeypatch: pytest.MonkeyPatch, slots: int) -> ScatterBuffer:
    """A buffer of ``slots`` slots of 4 pages, each filled with its number, freeing slots."""
    monkeypatch.setattr(_buffer, "outgrows_page_cache", lambda nbytes: True)  # slots freed
    unit = (4 * PAGE // 8,)
    buffer = ScatterBuffer((slots,), unit, np.dtype("f8"), map_bytes=1 << 20)
    for flat in range(slots):
        buffer.write_at(buffer.slot_at((flat,)), np.full(unit, float(flat + 1)))
    return buffer


def _allocated(buffer: ScatterBuffer, flat: int) -> bool:
    """Whether slot ``flat`` still has data in the file (not a hole)."""
    start = flat * buffer.slot_bytes
    try:
        return os.lseek(buffer._file.fd, start, SEEK_DATA) < start + buffer.slot_bytes
    except OSError:  # ENXIO: no data from there on
        return False


def test_released_slots_are_freed_and_the_others_keep_their_bytes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    buffer = _filled(monkeypatch, 8)
    try:
        for flat in (2, 3, 4, 6):  # 2-4 punched as one hole
            buffer.release(flat)
        buffer.wait_freed()
        freed = [flat for flat in range(8) if not _allocated(buffer, flat)]
        assert freed == [2, 3, 4, 6]
        for flat in (0, 1, 5, 7):
            back = np.empty(buffer.slot_bytes // 8)
            buffer.read_at(buffer.slot_at((flat,)), back)
            assert (back == flat + 1).all()
    finally:
        buffer.close()
    assert buffer._freer is not None and not buffer._freer.is_alive()


def test_a_file_system_that_cannot_punch_holes_stops_the_freeing_only(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def refuse(fd: int, offset: int, nbytes: int) -> None:
        raise OSError(95, "Operation not supported")

    monkeypatch.setattr(_native, "punch_hole", refuse)
    buffer = _filled(monkeypatch, 4)
    try:
        buffer.release(1)
        buffer.wait_freed()  # returns: freeing has stopped
        buffer.release(2)  # ignored from now on
        assert all(_allocated(buffer, flat) for flat in range(4))
    finally:
        buffer.close()


def _slot_pages(buffer: ScatterBuffer, flat: int) -> int:
    return _native.cached_pages(buffer._file.fd, flat * buffer.slot_bytes, buffer.slot_bytes)


def test_whether_a_slot_is_cached_is_asked_without_waiting(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    buffer = _filled(monkeypatch, 2)
    try:
        assert buffer._cached(0) and buffer._cached(buffer.slot_bytes - 1)
        assert _slot_pages(buffer, 0) == buffer.slot_bytes // PAGE
        os.fsync(buffer._file.fd)  # clean pages can leave the page cache
        os.posix_fadvise(buffer._file.fd, 0, buffer.slot_bytes, os.POSIX_FADV_DONTNEED)
        if _slot_pages(buffer, 0) == buffer.slot_bytes // PAGE:
            pytest.skip("this file system keeps the pages cached")
        buffer.will_read(0)  # starts reading the slot back; its bytes are whole either way
        back = np.empty(buffer.slot_bytes // 8)
        buffer.read_at(0, back)
        assert (back == 1.0).all()
    finally:
        buffer.close()


def test_cached_pages_counts_a_ranges_pages_in_the_page_cache(
    tmp_path: os.PathLike[str],
) -> None:
    path = os.path.join(tmp_path, "f")
    with open(path, "wb") as f:
        f.write(b"x" * (8 * PAGE))
    fd = os.open(path, os.O_RDONLY)
    try:
        assert _native.cached_pages(fd, 0, 8 * PAGE) == 8
        assert _native.cached_pages(fd, PAGE - 1, 2) == 2  # a range over two pages
        assert _native.cached_pages(fd, 3, 0) == 0
        assert _native.cached_pages(fd, 64 * PAGE, PAGE) == 0  # past the end
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        dropped = _native.cached_pages(fd, 0, 8 * PAGE)
        if dropped == 8:
            pytest.skip("this file system keeps the pages cached")
        for _ in range(3):  # asking brings none of them in
            assert _native.cached_pages(fd, 0, 8 * PAGE) == dropped
        os.pread(fd, PAGE, 0)
        assert _native.cached_pages(fd, 0, PAGE) == 1
        with pytest.raises(ValueError, match=">= 0"):
            _native.cached_pages(fd, -1, PAGE)
        with pytest.raises(OSError, match="Bad file descriptor"):
            _native.cached_pages(-1, 0, PAGE)
    finally:
        os.close(fd)


def test_punch_hole_frees_a_range_of_a_file(tmp_path: os.PathLike[str]) -> None:
    path = os.path.join(tmp_path, "f")
    with open(path, "wb") as f:
        f.write(b"x" * (4 * PAGE))
    fd = os.open(path, os.O_RDWR)
    try:
        _native.punch_hole(fd, PAGE, 2 * PAGE)
        data = os.pread(fd, 4 * PAGE, 0)
        assert data == b"x" * PAGE + b"\0" * (2 * PAGE) + b"x" * PAGE
        assert os.fstat(fd).st_size == 4 * PAGE
        with pytest.raises(OSError, match="Bad file descriptor"):
            _native.punch_hole(-1, 0, PAGE)
    finally:
        os.close(fd)


@pytest.mark.parametrize(
    "make",
    [
        lambda r: r.random((256, 64), dtype=np.float32).reshape(256, 4, 16).transpose(1, 0, 2),
        lambda r: r.random((5, 7, 3, 4))[:, ::2, :, 1:3],
        lambda r: r.random((10, 3))[:, ::-1],
        lambda r: np.asarray(r.random()),
        lambda r: r.random((4, 0, 3)),
        lambda r: r.integers(0, 255, (9, 13, 7), dtype=np.uint8).transpose(2, 0, 1),
        lambda r: np.zeros(6, dtype=[("x", "f4"), ("y", "i2")])[::2],
    ],
)
def test_copy_runs_copies_any_strides(make) -> None:
    source = make(np.random.default_rng(4))
    into = np.zeros(source.shape, source.dtype)
    _native.copy_runs(into, source)
    np.testing.assert_array_equal(into, source)
    spaced = np.zeros((*source.shape, 3), source.dtype)[..., 1]  # a strided destination
    _native.copy_runs(spaced, source)
    np.testing.assert_array_equal(spaced, source)


def test_copy_runs_refuses_other_shapes_and_python_objects() -> None:
    with pytest.raises(ValueError, match="differ"):
        _native.copy_runs(np.empty(3), np.empty(4))
    with pytest.raises(ValueError, match="differ"):
        _native.copy_runs(np.empty(3, "f4"), np.empty(3, "f8"))
    with pytest.raises(TypeError, match="Python objects"):
        _native.copy_runs(np.empty(2, object), np.array([object(), 1], dtype=object))
    shared = np.arange(10.0)
    with pytest.raises(ValueError, match="share memory"):
        _native.copy_runs(shared[1:], shared[:-1])
    read_only = np.zeros(3)
    read_only.flags.writeable = False
    with pytest.raises((BufferError, ValueError)):
        _native.copy_runs(read_only, np.ones(3))
