"""The local cache of object-store chunks: entries round trip, are replaced by a new version,
evicted least recently used first, checked (a damaged file is a miss and is removed), stay whole
among processes sharing the directory, and a full or read-only disk never raises from store."""

from __future__ import annotations

import multiprocessing
import os
import random
import subprocess
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from oocarray._storage._objects import _cache, _cache_files
from oocarray._storage._objects._cache import CachedChunk, ChunkCache

NS = "ns-0123"


def entry_size(version: str, nbytes: int) -> int:
    return _cache_files.HEADER.size + len(version.encode()) + nbytes


def entry_files(directory: Path) -> list[Path]:
    return sorted(p for p in directory.rglob("*") if p.is_file() and len(p.name) == 64)


def temp_files(directory: Path) -> list[Path]:
    return sorted(p for p in directory.rglob("*.tmp") if p.is_file())


def read_key(cache: ChunkCache, key: str, namespace: str = NS) -> bytes | None:
    entry = cache.lookup(namespace, key)
    if entry is None:
        return None
    data = cache.read(entry)
    return None if data is None else data.tobytes()


def test_round_trip(tmp_path: Path) -> None:
    cache = ChunkCache(tmp_path / "cache", 1 << 20)
    cache.store(NS, "c/0/1", '"etag-1"', b"hello chunk")
    entry = cache.lookup(NS, "c/0/1")
    assert entry == CachedChunk('"etag-1"', 11, entry.path) if entry else False
    data = cache.read(entry)
    assert isinstance(data, np.ndarray)
    assert data.dtype == np.uint8 and data.ndim == 1 and data.flags.writeable
    assert data.tobytes() == b"hello chunk"
    assert cache.used_bytes == entry_size('"etag-1"', 11)
    assert cache.lookup(NS, "c/0/2") is None
    assert cache.lookup("other", "c/0/1") is None


def test_buffers_and_empty_payloads(tmp_path: Path) -> None:
    cache = ChunkCache(tmp_path, 1 << 20)
    array = np.arange(12, dtype=np.int32).reshape(3, 4)
    cache.store(NS, "array", "v", array)
    cache.store(NS, "strided", "v", array[:, ::2])  # not contiguous: copied
    cache.store(NS, "view", "v", memoryview(bytearray(b"abc")))
    cache.store(NS, "empty", "v", b"")
    assert read_key(cache, "array") == array.tobytes()
    assert read_key(cache, "strided") == array[:, ::2].tobytes()
    assert read_key(cache, "view") == b"abc"
    assert read_key(cache, "empty") == b""


def test_odd_keys_are_distinct_and_safe(tmp_path: Path) -> None:
    cache = ChunkCache(tmp_path, 1 << 20)
    keys = ["c/0/1", "c/0/1#1024-2048", "../../etc/passwd", "a\x00b", "ключ/🙂", "\udc80", ""]
    for key in keys:
        cache.store(NS, key, "v", key.encode("utf-8", "surrogatepass"))
    cache.store("1:a", "b", "v", b"ns one")  # no collision through the separator
    cache.store("1", "a:b", "v", b"ns two")
    for key in keys:
        assert read_key(cache, key) == key.encode("utf-8", "surrogatepass")
    assert read_key(cache, "b", "1:a") == b"ns one"
    assert read_key(cache, "a:b", "1") == b"ns two"
    files = entry_files(tmp_path)
    assert len(files) == len(keys) + 2
    for path in files:  # two levels of fan-out, named by the digest
        assert path.parent.name == path.name[2:4] and path.parent.parent.name == path.name[:2]
        assert path.parent.parent.parent == tmp_path


def test_a_new_version_replaces_the_old(tmp_path: Path) -> None:
    cache = ChunkCache(tmp_path, 1 << 20)
    cache.store(NS, "k", "v1", b"old content")
    old = cache.lookup(NS, "k")
    cache.store(NS, "k", "v2-longer", b"new")
    entry = cache.lookup(NS, "k")
    assert entry is not None and (entry.version, entry.nbytes) == ("v2-longer", 3)
    assert read_key(cache, "k") == b"new"
    assert old is not None and cache.read(old) is None  # replaced since its lookup: a miss
    assert cache.lookup(NS, "k") == entry  # ...and the new entry is left alone
    assert cache.used_bytes == entry_size("v2-longer", 3)
    assert len(entry_files(tmp_path)) == 1


def test_discard_and_clear(tmp_path: Path) -> None:
    cache = ChunkCache(tmp_path, 1 << 20)
    for i in range(5):
        cache.store(NS, f"k{i}", "v", b"x" * 10)
    cache.discard(NS, "k1")
    cache.discard(NS, "missing")
    assert cache.lookup(NS, "k1") is None
    assert cache.used_bytes == 4 * entry_size("v", 10)
    cache.clear()
    assert cache.used_bytes == 0 and entry_files(tmp_path) == []
    assert all(cache.lookup(NS, f"k{i}") is None for i in range(5))
    cache.store(NS, "k0", "v", b"again")  # the fan-out directories are made again
    assert read_key(cache, "k0") == b"again"


def _keeps_nanoseconds(path: Path) -> bool:
    probe = path / "probe"
    probe.touch()
    os.utime(probe, ns=(1_000_000_001, 1_000_000_001))
    kept = probe.stat().st_mtime_ns == 1_000_000_001
    probe.unlink()
    return kept


def test_least_recently_used_entries_are_evicted_first(tmp_path: Path) -> None:
    if not _keeps_nanoseconds(tmp_path):
        pytest.skip("this file system keeps coarse modification times")
    size = entry_size("v", 100)
    cache = ChunkCache(tmp_path, 3 * size, low_water=1.0)
    for key in "abc":
        cache.store(NS, key, "v", key.encode() * 100)
    assert read_key(cache, "a") == b"a" * 100  # a is now more recent than b and c
    cache.store(NS, "d", "v", b"d" * 100)
    assert [cache.lookup(NS, k) is not None for k in "abcd"] == [True, False, True, True]
    assert read_key(cache, "c") == b"c" * 100
    cache.store(NS, "e", "v", b"e" * 100)  # a was read before c and d was stored
    assert [cache.lookup(NS, k) is not None for k in "acde"] == [False, True, True, True]
    assert cache.used_bytes == 3 * size
    # a lookup alone does not count as a use: only a read does
    assert cache.lookup(NS, "d") is not None  # d stays the oldest (c was read after it)
    cache.store(NS, "f", "v", b"f" * 100)
    assert [cache.lookup(NS, k) is not None for k in "cdef"] == [True, False, True, True]


def test_eviction_goes_down_to_the_low_water_mark(tmp_path: Path) -> None:
    size = entry_size("v", 100)
    cache = ChunkCache(tmp_path, 10 * size)  # low_water 0.9: down to 9 entries
    for i in range(10):
        cache.store(NS, f"k{i}", "v", b"x" * 100)
    assert cache.used_bytes == 10 * size  # at the limit, not over: nothing evicted
    cache.store(NS, "k10", "v", b"x" * 100)
    assert cache.used_bytes == 9 * size
    assert len(entry_files(tmp_path)) == 9
    assert cache.lookup(NS, "k10") is not None


def test_an_entry_larger_than_the_limit_is_not_stored(tmp_path: Path) -> None:
    cache = ChunkCache(tmp_path, 1000)
    cache.store(NS, "k", "v1", b"small")
    cache.store(NS, "k", "v2", b"x" * 1000)  # with its header over 1000 bytes
    assert cache.lookup(NS, "k") is None  # the older version is not left behind either
    cache.store(NS, "fits", "v", b"x" * (1000 - entry_size("v", 0)))
    assert cache.lookup(NS, "fits") is not None
    assert cache.used_bytes == 1000
    nothing = ChunkCache(tmp_path / "none", 0)
    nothing.store(NS, "k", "v", b"")
    assert nothing.lookup(NS, "k") is None and nothing.used_bytes == 0
    assert temp_files(tmp_path) == []


@pytest.mark.parametrize(
    "damage",
    ["flip a payload byte", "flip a header byte", "flip a version byte", "truncate", "append"],
)
def test_a_damaged_file_is_a_miss_and_is_removed(tmp_path: Path, damage: str) -> None:
    cache = ChunkCache(tmp_path, 1 << 20)
    cache.store(NS, "k", "etag", bytes(range(200)))
    cache.store(NS, "other", "etag", b"kept")
    entry = cache.lookup(NS, "k")
    assert entry is not None
    raw = bytearray(Path(entry.path).read_bytes())
    if damage == "flip a payload byte":
        raw[-50] ^= 0x01
    elif damage == "flip a header byte":
        raw[0] ^= 0x20
    elif damage == "flip a version byte":
        raw[_cache_files.HEADER.size] ^= 0x01  # then the version is not the one looked up
    elif damage == "truncate":
        del raw[-1:]
    else:
        raw += b"\0"
    Path(entry.path).write_bytes(raw)
    if damage == "flip a version byte":
        assert cache.read(entry) is None  # another version now: a miss, left to lookup
        entry = cache.lookup(NS, "k")
        assert entry is not None and entry.version != "etag"
    found = cache.lookup(NS, "k")
    if found is not None:  # the header still agrees with the size: the checksum decides
        assert cache.read(found) is None
    assert cache.lookup(NS, "k") is None
    assert not os.path.exists(entry.path)
    assert read_key(cache, "other") == b"kept"
    assert cache.used_bytes == entry_size("etag", 4)


@pytest.mark.parametrize("damage", ["flip a payload byte", "truncate"])
def test_read_version_gives_only_the_asked_version_whole(tmp_path: Path, damage: str) -> None:
    cache = ChunkCache(tmp_path, 1 << 20)
    cache.store(NS, "k", "v1", bytes(range(200)))
    found = cache.read_version(NS, "k", "v1")
    assert found is not None and bytes(found) == bytes(range(200))
    made: list[int] = []

    def empty(nbytes: int) -> np.ndarray:
        made.append(nbytes)
        return np.empty(nbytes, np.uint8)

    assert bytes(cache.read_version(NS, "k", "v1", empty)) == bytes(range(200))
    assert made == [200]  # the caller's allocator made the buffer
    assert cache.read_version(NS, "k", "v2") is None  # another version: a miss
    assert cache.read_version(NS, "absent", "v1") is None
    entry = cache.lookup(NS, "k")
    assert entry is not None
    raw = bytearray(Path(entry.path).read_bytes())
    if damage == "truncate":
        del raw[-1:]
    else:
        raw[-50] ^= 0x01
    Path(entry.path).write_bytes(raw)
    assert cache.read_version(NS, "k", "v1") is None  # never short or changed data
    assert not os.path.exists(entry.path)  # and the damaged file is gone


def test_a_lost_or_torn_total_is_recounted(tmp_path: Path) -> None:
    cache = ChunkCache(tmp_path, 1 << 20)
    for i in range(4):
        cache.store(NS, f"k{i}", "v", b"x" * (10 * i))
    expected = sum(entry_size("v", 10 * i) for i in range(4))
    (tmp_path / "lock").unlink()
    assert cache.used_bytes == expected
    (tmp_path / "lock").write_bytes(b"12")  # torn
    assert cache.used_bytes == expected
    cache.store(NS, "k9", "v", b"")
    assert cache.used_bytes == expected + entry_size("v", 0)


def test_the_total_is_rescanned_on_schedule(tmp_path: Path, monkeypatch: Any) -> None:
    monkeypatch.setattr(_cache, "RESCAN_EVERY", 3)
    cache = ChunkCache(tmp_path, 1 << 20)
    cache.store(NS, "a", "v", b"x" * 10)
    Path(cache.lookup(NS, "a").path).unlink()  # type: ignore[union-attr]  # behind its back
    cache.store(NS, "b", "v", b"x" * 10)
    assert cache.used_bytes == 2 * entry_size("v", 10)  # not yet noticed
    cache.store(NS, "c", "v", b"x" * 10)  # the third store walks
    assert cache.used_bytes == 2 * entry_size("v", 10)


def test_stale_temp_files_are_removed_by_a_walk(tmp_path: Path) -> None:
    cache = ChunkCache(tmp_path, 1 << 20)
    cache.store(NS, "k", "v", b"x")
    stale, fresh = tmp_path / "tmp" / "1-dead.tmp", tmp_path / "tmp" / "2-live.tmp"
    stale.write_bytes(b"partial")
    fresh.write_bytes(b"partial")
    os.utime(stale, ns=(0, 0))
    cache.clear()
    assert not stale.exists() and fresh.exists()


@pytest.mark.parametrize(
    ("arguments", "error"),
    [
        ((b"/tmp", 10), TypeError),
        ((None, 10), TypeError),
        (("", 10), ValueError),
        (("DIR", 1.5), TypeError),
        (("DIR", True), TypeError),
        (("DIR", "20G"), TypeError),
        (("DIR", -1), ValueError),
    ],
)
def test_bad_arguments(tmp_path: Path, arguments: tuple[Any, Any], error: type[Exception]) -> None:
    directory, max_bytes = arguments
    if directory == "DIR":
        directory = tmp_path / "c"
    with pytest.raises(error):
        ChunkCache(directory, max_bytes)
    with pytest.raises(ValueError, match="low_water"):
        ChunkCache(tmp_path, 10, low_water=0)


def test_the_directory_is_made(tmp_path: Path) -> None:
    ChunkCache(str(tmp_path / "a" / "b"), 10)
    assert (tmp_path / "a" / "b").is_dir()


# -- several processes ----------------------------------------------------------------------

KEYS = [f"c/{i}/0" for i in range(8)]


def payload_of(key: str, version: str) -> bytes:
    """Self-describing content: its key and version repeated, to a length the version sets."""
    length = 40 + zlib.crc32(version.encode()) % 500
    unit = f"{key}|{version}|".encode()
    return (unit * (length // len(unit) + 1))[:length]


def _worker(directory: str, worker: int, barrier: Any, results: Any) -> None:
    rng = random.Random(worker)
    cache = ChunkCache(directory, 2500)
    hits = bad = 0
    barrier.wait()
    for i in range(200):
        key = rng.choice(KEYS)
        action = rng.random()
        if action < 0.45:
            version = f"w{worker}-{i}"
            cache.store(NS, key, version, payload_of(key, version))
        elif action < 0.5:
            cache.discard(NS, key)
        else:
            entry = cache.lookup(NS, key)
            data = None if entry is None else cache.read(entry)
            if entry is not None and data is not None:
                hits += 1
                bad += data.tobytes() != payload_of(key, entry.version)
    results.put((worker, hits, bad))


@pytest.mark.parametrize("method", ["spawn", "fork"])
def test_processes_sharing_a_directory_see_only_whole_entries(tmp_path: Path, method: str) -> None:
    context = multiprocessing.get_context(method)
    barrier = context.Barrier(4)
    results = context.Queue()
    workers = [
        context.Process(target=_worker, args=(str(tmp_path), w, barrier, results)) for w in range(4)
    ]
    for process in workers:
        process.start()
    outcomes = [results.get(timeout=120) for _ in workers]
    for process in workers:
        process.join(60)
        assert process.exitcode == 0
    assert sum(bad for _, _, bad in outcomes) == 0
    assert sum(hits for _, hits, _ in outcomes) > 0
    cache = ChunkCache(tmp_path, 2500)
    assert temp_files(tmp_path) == []
    files = entry_files(tmp_path)
    assert cache.used_bytes == sum(p.stat().st_size for p in files) <= 2500
    for key in KEYS:
        entry = cache.lookup(NS, key)
        if entry is not None:
            data = cache.read(entry)
            assert data is not None and data.tobytes() == payload_of(key, entry.version)


# -- full and read-only disks ---------------------------------------------------------------


def test_a_full_disk_drops_the_entry(tiny_tmpfs: Path) -> None:
    cache = ChunkCache(tiny_tmpfs / "cache", 1 << 30)
    cache.store(NS, "small", "v", b"s" * 100_000)
    cache.store(NS, "big", "v", b"b" * (8 << 20))  # twice the disk
    assert cache.lookup(NS, "big") is None
    assert temp_files(tiny_tmpfs) == []
    assert read_key(cache, "small") == b"s" * 100_000
    assert cache.used_bytes == entry_size("v", 100_000)
    cache.store(NS, "after", "v", b"a")  # carries on
    assert read_key(cache, "after") == b"a"


@pytest.fixture
def read_only_cache(tiny_tmpfs: Path) -> Iterator[Path]:
    """A cache directory holding one entry ("k"), on a tmpfs remounted read-only."""
    directory = tiny_tmpfs / "cache"
    ChunkCache(directory, 1 << 20).store(NS, "k", "v", b"kept")
    result = subprocess.run(
        ["mount", "-o", "remount,ro", str(tiny_tmpfs)], capture_output=True, check=False
    )
    if result.returncode != 0:
        pytest.skip(f"cannot remount read-only: {result.stderr.decode().strip()}")
    try:
        yield directory
    finally:
        subprocess.run(["mount", "-o", "remount,rw", str(tiny_tmpfs)], check=False)


def test_a_read_only_directory_serves_reads_and_drops_stores(read_only_cache: Path) -> None:
    cache = ChunkCache(read_only_cache, 1 << 20)
    cache.store(NS, "new", "v", b"dropped")
    cache.store(NS, "k", "v2", b"dropped too")
    cache.discard(NS, "k")
    assert cache.lookup(NS, "new") is None
    assert read_key(cache, "k") == b"kept"
    assert cache.used_bytes == entry_size("v", 4)


def test_a_read_only_directory_without_a_lock_file(tmp_path: Path) -> None:
    """Without root (permissions bind it): no lock file can be made, nothing raises."""
    if os.geteuid() == 0:
        pytest.skip("root ignores directory permissions (the tmpfs test covers root)")
    directory = tmp_path / "cache"
    directory.mkdir()
    directory.chmod(0o555)
    try:
        cache = ChunkCache(directory, 1 << 20)
        cache.store(NS, "k", "v", b"dropped")
        cache.discard(NS, "k")
        assert cache.lookup(NS, "k") is None and cache.used_bytes == 0
    finally:
        directory.chmod(0o755)
