"""Chunk files written past the page cache (``Store.write_direct``, the native zstd writer's
``direct``): the same bytes as through the cache, the whole blocks not cached afterwards,
every case the file system or the file's position does not allow written through the cache,
a full disk an ``OSError`` with nothing left beside the chunk; and a rechunk whose output
outgrows the page cache writes it so."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import numpy as np
import pytest
import zarr

import oocarray as oc
from oocarray import _native
from oocarray._compute._rechunk import _run
from oocarray._storage._pool import workers
from oocarray._storage._zarr._zstd_write import ZstdChunkWriter

PAGE = 4096


def _direct_io(folder: Path) -> bool:
    """Whether files in ``folder`` take O_DIRECT."""
    probe = folder / "probe"
    try:
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_DIRECT, 0o600)
    except OSError:
        return False
    os.close(fd)
    probe.unlink()
    return True


@pytest.fixture
def direct_dir(tmp_path: Path) -> Path:
    if not _direct_io(tmp_path):
        pytest.skip(f"the file system of {tmp_path} has no direct I/O")
    return tmp_path


def _cached(path: Path, offset: int) -> bool:
    """Whether the page of ``path`` at ``offset`` is in the page cache.  (A read that must not
    wait would start the kernel's readahead of it: asking would bring it in.)"""
    fd = os.open(path, os.O_RDONLY)
    try:
        return _native.cached_pages(fd, offset, 1) == 1
    finally:
        os.close(fd)


def _write(path: Path, data: np.ndarray, direct: bool, before: bytes = b"") -> int:
    writer = ZstdChunkWriter(level=3, checksum=False, crc32c=False)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, before)
        return writer.write(fd, data, direct)
    finally:
        os.close(fd)


def _noise(n: int) -> np.ndarray:
    return np.random.default_rng(n).random(n, dtype=np.float32)  # barely compressible


@pytest.mark.parametrize("n", [100, 1024, 50_000, 1 << 20])
def test_a_direct_write_is_the_same_file_past_the_page_cache(direct_dir: Path, n: int) -> None:
    data = _noise(n)
    cached, direct = direct_dir / "cached", direct_dir / "direct"
    written = _write(cached, data, direct=False)
    assert _write(direct, data, direct=True) == written
    # Its whole blocks went past the cache (checked before anything reads them), the tail
    # through it.
    assert _cached(direct, 0) == (written < PAGE)
    assert _cached(cached, 0)
    if written % PAGE:
        assert _cached(direct, written - 1)
    assert direct.read_bytes() == cached.read_bytes()


def test_a_file_written_from_an_unaligned_position_goes_through_the_cache(
    direct_dir: Path,
) -> None:
    data = _noise(1 << 18)
    alone, path = direct_dir / "alone", direct_dir / "after"
    written = _write(alone, data, direct=False)
    assert _write(path, data, direct=True, before=b"header") == written
    assert path.read_bytes() == b"header" + alone.read_bytes()
    assert _cached(path, 0) and _cached(path, written - 1)


def test_a_file_without_direct_io_is_written_through_the_cache() -> None:
    # /dev/null refuses O_DIRECT (EINVAL): the bytes still go, as a buffered write's.
    writer = ZstdChunkWriter(level=3, checksum=False, crc32c=False)
    fd = os.open(os.devnull, os.O_WRONLY)
    try:
        assert writer.write(fd, _noise(1 << 16), True) == writer.write(fd, _noise(1 << 16))
    finally:
        os.close(fd)


def test_a_store_written_direct_reads_back_equal_everywhere(direct_dir: Path) -> None:
    values = _noise(64 * 4096).reshape(64, 4096)
    path = str(direct_dir / "a.zarr")
    x = oc.create(path, values.shape, "float32", chunks=(16, 4096))
    x._store.write_direct(True)
    x[:] = values
    first = direct_dir / "a.zarr" / "c" / "0" / "0"
    assert not _cached(first, 0)  # before anything reads it
    np.testing.assert_array_equal(oc.open(path)[:], values)
    np.testing.assert_array_equal(zarr.open_array(path, mode="r")[:], values)
    x._store.write_direct(False)  # and back through the cache
    x[:16] = values[:16] + 1
    assert _cached(first, 0)
    np.testing.assert_array_equal(oc.open(path)[:16], values[:16] + 1)


def test_a_store_that_cannot_write_direct_ignores_it(direct_dir: Path) -> None:
    values = _noise(16 * 4096).reshape(16, 4096)
    path = str(direct_dir / "raw.zarr")
    x = oc.create(path, values.shape, "float32", chunks=(16, 4096), codec="none")
    x._store.write_direct(True)  # not the native zstd writer's files
    x[:] = values
    assert _cached(direct_dir / "raw.zarr" / "c" / "0" / "0", 0)
    np.testing.assert_array_equal(oc.open(path)[:], values)


def test_a_full_disk_is_an_error_with_nothing_left(tiny_tmpfs: Path) -> None:
    if not _direct_io(tiny_tmpfs):
        pytest.skip("this kernel's tmpfs has no direct I/O")
    path = tiny_tmpfs / "full.zarr"
    x = oc.create(str(path), (2, 1 << 20), "float32", chunks=(2, 1 << 20))  # 8 MiB, 4 MiB disk
    x._store.write_direct(True)
    with pytest.raises(OSError, match="No space") as raised:
        x[:] = _noise(2 << 20).reshape(2, 1 << 20)
    assert raised.value.errno == errno.ENOSPC
    assert [p.name for p in path.rglob("*") if p.is_file()] == ["zarr.json"]
    assert np.all(oc.open(str(path))[:] == 0)  # nothing written: the fill value


@pytest.fixture
def outgrowing(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every rechunk output outgrows the page cache."""
    monkeypatch.setattr(_run, "outgrows_page_cache", lambda nbytes: True)


def test_a_rechunk_writes_an_output_that_outgrows_the_cache_past_it(
    direct_dir: Path, outgrowing: None
) -> None:
    values = _noise(64 * 64 * 64).reshape(64, 64, 64)
    source = oc.from_numpy(values, chunks=(1, 64, 64))
    out = str(direct_dir / "series.zarr")
    for strategy in ("direct", "scatter"):
        plan = oc.rechunk(source, (64, 16, 16), out, max_mem="8M", strategy=strategy, dry_run=True)
        (work,) = plan.passes
        assert work.direct_writes
        assert work.workers == workers() + 1  # one waits for the disk while the others encode
        assert "(chunk files written past the page cache)" in str(plan)
    y = oc.rechunk(source, (64, 16, 16), out, max_mem="8M", strategy="scatter", progress=False)
    first = direct_dir / "series.zarr" / "c" / "0" / "0" / "0"
    assert not _cached(first, 0)
    np.testing.assert_array_equal(y[:], values)
    np.testing.assert_array_equal(zarr.open_array(out, mode="r")[:], values)
    # The array returned writes through the page cache again.
    y[:, :16, :16] = values[:, :16, :16] + 1
    assert _cached(first, 0)
    np.testing.assert_array_equal(oc.open(out)[:, :16, :16], values[:, :16, :16] + 1)


def test_a_temporary_or_small_output_goes_through_the_cache(
    direct_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    values = _noise(64 * 64 * 64).reshape(64, 64, 64)
    source = oc.from_numpy(values, chunks=(1, 64, 64))
    small = oc.rechunk(source, (64, 16, 16), str(direct_dir / "s.zarr"), max_mem="8M", dry_run=True)
    assert not small.passes[0].direct_writes and small.passes[0].workers == workers()
    monkeypatch.setattr(_run, "outgrows_page_cache", lambda nbytes: True)
    temporary = oc.rechunk(source, (64, 16, 16), max_mem="8M", dry_run=True)
    assert not any(p.direct_writes for p in temporary.passes)
    sharded = oc.rechunk(
        source, (64, 16, 16), str(direct_dir / "h.zarr"), shards=(64, 32, 32), dry_run=True
    )
    assert not any(p.direct_writes for p in sharded.passes)
