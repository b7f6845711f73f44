"""A read-only ``as_ndarray()`` of an array in S3 (moto on loopback, in a process of its own):
this process reads a forward scan ahead and hands the chunks to the pager in memory, counted on
the array's manager; whatever it does not hand over, the feeder fetches (a thread holding the
GIL through a whole scan included)."""

from __future__ import annotations

import gc
import json
import os
import select
import subprocess
import sys
import textwrap
import threading
import weakref

import numpy as np
import pytest

import oocarray as oc
from oocarray import _native
from oocarray._memory import active_manager
from oocarray._storage._objects._heap import HeapTrimmer
from oocarray._storage._paged._arrays import paging_available
from oocarray._storage._zarr._prefetch import ReadAhead
from oocarray.errors import PagedChunkError
from testkit.children import wait_forked
from testkit.stores import remote_array

PAGING, WHY_NOT = paging_available()
pytestmark = pytest.mark.skipif(not PAGING, reason=f"as_ndarray() cannot page here: {WHY_NOT}")

WAIT_S = 60.0  # for the read-ahead thread to hand chunks over: a bound, never reached when it works


def _stats(y) -> dict[str, int]:
    (stats,) = y._paged.stats()
    return stats


def _until(condition) -> None:
    """Waits on the pager's own counters (the read-ahead thread changes them)."""
    done = threading.Event()
    for _ in range(int(WAIT_S / 0.005)):
        if condition():
            return
        done.wait(0.005)
    raise AssertionError("the read-ahead did not hand the chunks over")


@pytest.mark.parametrize("shards", [None, (1024, 32)], ids=["chunks", "shards"])
def test_a_forward_scan_decodes_chunks_handed_over_in_memory(s3, shards):
    data = np.random.default_rng(0).standard_normal((8192, 32)).astype(np.float32)
    # 32 chunks of 32 KiB, stored as they are: the bytes handed over tell the chunks
    y = remote_array(s3, "a.zarr", data, (256, 32), shards, codec="none")
    a = y.as_ndarray()
    # The first chunks are handed over before the array is returned.
    assert _stats(y)["handed_over_bytes"] >= 32768
    assert np.array_equal(a[0], data[0])
    assert _stats(y)["handed_over_reads"] >= 1
    # The fills are at the start: the rest of the window (the whole array) follows; at most
    # the first two chunks are let go meanwhile.
    _until(lambda: _stats(y)["handed_over_bytes"] >= 30 * 32768)
    assert float(a.sum(dtype=np.float64)) == pytest.approx(float(data.sum(dtype=np.float64)))
    # From memory, not from the feeder's files: all but a few.  Which few is a race, not a
    # count to pin down: a chunk not handed over yet when the scan reaches it is asked of the
    # feeder, and a fill that finds the feeder's file there reads the file.
    assert _stats(y)["handed_over_reads"] >= 24
    del a


# Feeders that take the pager's requests and never answer: a fill that waits on one never ends.
_QUIET = "import sys; sys.stdin.buffer.read()"
# This one also copies everything it reads (its configuration, then the requests) to argv[1].
_FORWARDING = """
import os, sys
out = os.open(sys.argv[1], os.O_WRONLY)
while data := os.read(0, 4096):
    os.write(out, data)
"""
_CONFIG = b"{}"  # what the feeder reads first, after its length (8 bytes)


def _feeder_spec(tmp_path, code: str, *args: str):
    return (
        [os.fsencode(sys.executable), b"-c", code.encode(), *map(os.fsencode, args)],
        [key + b"=" + value for key, value in os.environb.items()],
        len(_CONFIG).to_bytes(8, "little") + _CONFIG,
        os.fsencode(tmp_path / "feeder.log"),
    )


def _lending_pages(tmp_path, node=None, feeder=None):
    """A read-only paged array of 4 chunks of 4 KiB (raw float32) fetched on demand, whose
    feeder (started by the pager when a fill first needs it) never answers: only chunks
    handed over can be read.  ``feeder``: its spec (``_feeder_spec``), a quiet one if None."""
    table = np.zeros((4, 3), dtype=np.int64)
    table[:, 0] = np.arange(4)
    table[:, 2] = -1
    return _native.Pages(
        paths=[str(tmp_path / f"c{i}") for i in range(4)],  # never written
        table=table,
        codec=_native.CODEC_RAW,
        chunk_nbytes=4096,
        data_nbytes=4 * 4096,
        unit_nbytes=4096,
        fill=np.float32(0).tobytes(),
        writable=False,
        node=node,
        readahead=0,
        remote_feeder=feeder or _feeder_spec(tmp_path, _QUIET),
    )


def _read_exactly(fd: int, n: int) -> bytes:
    data = b""
    while len(data) < n:
        ready, _, _ = select.select([fd], [], [], WAIT_S)  # a bound, never reached when it works
        assert ready, f"the feeder was asked for {len(data) // 8} chunks, no more"
        more = os.read(fd, n - len(data))
        assert more, "the feeder ended"
        data += more
    return data


def test_a_fill_behind_the_furthest_keeps_the_newest_group_handed_over(tmp_path):
    """The pager's threads fill out of order: a fill a few chunks behind the furthest one must
    not let go of the last chunks of the group handed over for the furthest (they were let go,
    unread, and their fills then waited for the feeder to start: 1.5 s in a scan)."""
    n, size = 16, 4096
    table = np.zeros((n, 3), dtype=np.int64)
    table[:, 0] = np.arange(n)
    table[:, 2] = -1
    pages = _native.Pages(
        paths=[str(tmp_path / f"c{i}") for i in range(n)],  # never written: no feeder answers
        table=table,
        codec=_native.CODEC_RAW,
        chunk_nbytes=size,
        data_nbytes=n * size,
        unit_nbytes=size,
        fill=np.float32(0).tobytes(),
        writable=False,
        node=None,
        readahead=0,
        remote_feeder=_feeder_spec(tmp_path, _QUIET),
    )
    # The read-ahead's rule of what it keeps, as a scan in groups of 4 chunks runs it.
    reader = object.__new__(ReadAhead)
    reader._pages = weakref.ref(pages)
    reader._stopping = False
    reader._ahead, reader._group, reader._furthest = 4, 4, -1
    reader._trimmer = HeapTrimmer()
    for c in range(12):
        pages.remote_give(c, np.full(1024, c, dtype=np.float32).tobytes())
    a = np.frombuffer(pages, dtype=np.float32).reshape(n, 1024)
    assert a[8, 0] == 8  # the furthest fill: chunk 8
    assert not reader._went_back(reader._position())
    for c in range(12, 16):  # the group in its window
        pages.remote_give(c, np.full(1024, c, dtype=np.float32).tobytes())
    assert a[6, 0] == 6  # a fill behind it, out of order
    assert reader._position() == 6
    # Kept: chunks 4 to 15, all that chunk 8's position kept (4 behind it, the window) and the
    # newest group; its last chunk went with a window counted from chunk 6.
    assert pages.stats()["handed_over_bytes"] == (n - 4) * size
    assert [a[c, 0] for c in range(12, 16)] == [12, 13, 14, 15]  # from memory: no feeder
    assert pages.stats()["feeder_starts"] == 0
    del a, pages


def test_bytes_handed_over_are_lent_to_the_fills_and_given_back(tmp_path):
    """The pager's fills decode from the very buffer handed over: it is held, not copied, so
    its owner cannot resize it while lent, and it is given back (its bytes returned) once let
    go, or when the array goes."""
    chunk = np.arange(1024, dtype=np.float32)  # 4 KiB: a page, a unit per chunk
    pages = _lending_pages(tmp_path)
    lent = [bytearray((chunk + i).tobytes()) for i in range(3)]
    with pytest.raises(OSError, match="Invalid argument"):
        pages.remote_give(4, lent[2])  # no such chunk: refused, the buffer not kept
    lent[2].append(0)
    assert pages.remote_give(0, lent[0]) == 0 and pages.remote_give(1, lent[1]) == 0
    assert pages.stats()["handed_over_bytes"] == 2 * 4096
    with pytest.raises(BufferError):
        lent[0].append(0)  # held by the pager
    a = np.frombuffer(pages, dtype=np.float32).reshape(4, 1024)
    assert np.array_equal(a[0], chunk) and np.array_equal(a[1], chunk + 1)
    assert pages.stats()["handed_over_reads"] == 2
    assert pages.remote_keep(1, 4) == 4096  # chunk 0 let go: its buffer given back
    lent[0].append(0)
    assert pages.stats()["handed_over_bytes"] == 4096
    with pytest.raises(BufferError):
        lent[1].append(0)
    del a, pages
    gc.collect()
    lent[1].append(0)  # given back with the array


def test_a_fill_waiting_for_the_feeder_takes_a_chunk_handed_over_meanwhile(tmp_path):
    """The worker that waits on the feeder's answers wakes when the chunk it asked for is
    handed over: a scan's fills must not wait for a feeder that is still starting."""
    requests = str(tmp_path / "requests")
    os.mkfifo(requests)
    pages = _lending_pages(tmp_path, feeder=_feeder_spec(tmp_path, _FORWARDING, requests))
    a = np.frombuffer(pages, dtype=np.float32).reshape(4, 1024)
    # Touched by a copy, for which NumPy lets the GIL go (a thread holding it while the fill
    # runs would hold what handing the chunk over needs).
    out = np.empty(1024, dtype=np.float32)
    touch = threading.Thread(target=np.copyto, args=(out, a[1]))
    try:
        touch.start()
        seen = os.open(requests, os.O_RDONLY)  # once the feeder the fill started opens it
        try:
            assert _read_exactly(seen, 8 + len(_CONFIG))[8:] == _CONFIG
            (asked,) = np.frombuffer(_read_exactly(seen, 8), dtype="<i8")  # the fill asked
        finally:
            os.close(seen)
        assert asked == 1
        assert pages.stats()["feeder_starts"] == 1 and pages.stats()["feeder_requests"] == 1
        pages.remote_give(1, (np.arange(1024, dtype=np.float32) + 10).tobytes())
        touch.join(WAIT_S)  # a bound, never reached when it works
        assert not touch.is_alive()
        assert out[5] == 15.0
    finally:
        if touch.is_alive():  # let the fill end: it fails once its feeder is gone
            _native.pager_stop_feeder(pages.remote_token())
            touch.join()
    del a, pages


def test_fills_ask_the_feeder_while_another_waits_for_its_answer(tmp_path):
    """Each fill asks for its chunk at once: none waits for the answer another is waiting on
    (two: the pager has at least two workers)."""
    requests = str(tmp_path / "requests")
    os.mkfifo(requests)
    pages = _lending_pages(tmp_path, feeder=_feeder_spec(tmp_path, _FORWARDING, requests))
    a = np.frombuffer(pages, dtype=np.float32).reshape(4, 1024)
    outs = [np.empty(1024, dtype=np.float32) for _ in range(2)]
    touches = [threading.Thread(target=np.copyto, args=(outs[i], a[i + 1])) for i in range(2)]
    try:
        for touch in touches:
            touch.start()
        seen = os.open(requests, os.O_RDONLY)
        try:
            _read_exactly(seen, 8 + len(_CONFIG))
            asked = np.frombuffer(_read_exactly(seen, 2 * 8), dtype="<i8")
        finally:
            os.close(seen)
        assert sorted(asked) == [1, 2]  # neither answered yet
        for c in (1, 2):
            pages.remote_give(c, np.full(1024, c, dtype=np.float32).tobytes())
        for touch in touches:
            touch.join(WAIT_S)
            assert not touch.is_alive()
        assert [out[0] for out in outs] == [1, 2]
    finally:
        if any(touch.is_alive() for touch in touches):
            _native.pager_stop_feeder(pages.remote_token())
            for touch in touches:
                touch.join()
    del a, pages


def test_a_chunk_said_to_be_absent_reads_as_the_fill_value_without_a_feeder(tmp_path):
    pages = _lending_pages(tmp_path)
    pages.remote_give(0, np.ones(1024, dtype=np.float32).tobytes())
    pages.remote_absent(2)
    with pytest.raises(OSError, match="Invalid argument"):
        pages.remote_absent(4)  # no such chunk
    a = np.frombuffer(pages, dtype=np.float32).reshape(4, 1024)
    assert a[0].sum() == 1024 and not a[2].any()
    assert pages.stats()["feeder_starts"] == 0 and pages.stats()["feeder_requests"] == 0
    del a, pages


def test_bytes_are_not_lent_past_a_full_budget(tmp_path):
    """Lent bytes are counted by their lender; where that leaves the budget full with no page
    to drop, the pager does not take them (the fills would ask the feeder) and the buffer is
    not kept."""
    with oc.Manager(max_bytes="64K") as manager:
        pages = _lending_pages(tmp_path, manager._node)
        lent = bytearray(np.ones(1024, dtype=np.float32).tobytes())
        full = _native.Counted(80_000, manager._node)  # over the budget, no page to drop
        with pytest.raises(OSError, match="No space left"):
            pages.remote_give(0, lent)
        lent.append(0)  # not held
        del lent[-1]
        del full
        assert pages.remote_give(0, lent) == 0
        a = np.frombuffer(pages, dtype=np.float32)
        assert a[:1024].sum() == 1024
        del a, pages
        gc.collect()
        assert manager.stats().current_bytes == 0


_QUIET_FEEDER_SCAN = """
import json, os, sys
import numpy as np
import oocarray as oc
from oocarray._storage._zarr import _feeder

# A feeder that takes every request and never answers: a fill that waits on it never ends.
quiet = [os.fsencode(sys.executable), b"-c", b"import sys; sys.stdin.buffer.read()"]
_feeder.feeder_command = lambda helper: quiet
x = oc.open(sys.argv[1], storage_options=json.loads(sys.argv[2]))
a = x.as_ndarray()
out = np.empty_like(a)
np.copyto(out, a)  # NumPy lets the GIL go while it copies: the read-ahead runs meanwhile
print(float(out.sum(dtype=np.float64)))
"""


def test_a_forward_scan_is_read_whole_from_the_chunks_handed_over(s3):
    """The read-ahead hands over every chunk of a forward scan, those the pager's own
    read-ahead filled out of order included: with a feeder that never answers, the scan still
    ends (in a child process, which a fill waiting forever cannot take down with it)."""
    data = np.random.default_rng(6).standard_normal((16384, 32)).astype(np.float32)
    remote_array(s3, "quiet.zarr", data, (256, 32))
    script = textwrap.dedent(_QUIET_FEEDER_SCAN)
    args = [sys.executable, "-c", script, s3.url("quiet.zarr"), json.dumps(s3.storage_options)]
    done = subprocess.run(args, capture_output=True, text=True, timeout=WAIT_S)
    assert done.returncode == 0, done.stderr[-2000:]
    assert float(done.stdout) == pytest.approx(float(data.sum(dtype=np.float64)), rel=1e-6)


def test_a_forked_child_reads_the_chunks_its_parent_was_lent(s3):
    """A child forked while chunks are lent to the pager has its copy of their buffers: its
    fills decode from them (the rest come from the store), and the parent reads on."""
    data = np.random.default_rng(5).standard_normal((8192, 32)).astype(np.float32)
    y = remote_array(s3, "fork.zarr", data, (256, 32), codec="none")
    a = y.as_ndarray()
    assert np.array_equal(a[:10], data[:10])
    _until(lambda: _stats(y)["handed_over_bytes"] >= 16 * 32768)
    pid = os.fork()
    if pid == 0:  # the child: no pytest here, only its exit status
        os._exit(0 if np.array_equal(a, data) else 1)
    assert wait_forked(pid, "finish its scan", WAIT_S) == 0
    assert np.array_equal(a, data)
    del a


def _read_ahead_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "oocarray-read-ahead"]


def test_handed_over_and_fetched_bytes_are_counted_on_the_manager_and_freed_with_the_array(s3):
    data = np.arange(8192 * 32, dtype=np.float32).reshape(8192, 32)
    y = remote_array(s3, "m.zarr", data, (256, 32))
    with oc.Manager(max_bytes="64M") as m:
        a = y.as_ndarray()
        assert a[0, 1] == 1
        _until(lambda: _stats(y)["handed_over_bytes"] >= 16 * 32768)
        held = _stats(y)["handed_over_bytes"]
        assert m.stats().current_bytes >= held + _stats(y)["resident_bytes"]
        (thread,) = _read_ahead_threads()
        del a
        gc.collect()
        thread.join(WAIT_S)  # it lets its fetched buffers go as it ends
        assert not thread.is_alive()
        assert m.stats().current_bytes == 0  # the pages, the chunks handed over, the fetch


def test_a_read_ahead_for_another_thread_counts_its_fetched_bytes_on_that_manager(s3):
    """The read-ahead thread of an ``as_ndarray()`` has no manager active: it names the
    array's, which counts the bytes fetched and not yet taken, and nothing once it ends."""
    data = np.ones((8192, 32), dtype=np.float32)
    y = remote_array(s3, "f.zarr", data, (256, 32), codec="none")  # 32 chunks of 32 KiB
    store = y._store
    m = oc.Manager("reader")
    seen: list[int] = []

    def read_ahead() -> None:
        assert active_manager() is None
        with store.read_ahead([(c, 0) for c in range(32)], 8 * 32768, m):
            _until(lambda: m.stats().current_bytes >= 32768)
            seen.append(m.stats().current_bytes)

    thread = threading.Thread(target=read_ahead)
    thread.start()
    thread.join()
    assert seen and seen[0] >= 32768  # at least one chunk's bytes, fetched ahead
    assert m.stats().current_bytes == 0
    m.close()


def test_no_chunk_is_handed_over_beyond_the_budget(s3):
    data = np.ones((8192, 32), dtype=np.float32)
    y = remote_array(s3, "b.zarr", data, (256, 32))
    with oc.Manager(max_bytes="256K") as m:  # a quarter of the array
        a = y.as_ndarray()
        assert float(a.sum(dtype=np.float64)) == 8192 * 32
        assert m.stats().peak_bytes <= 256 << 10
        del a


def test_a_scan_holding_the_gil_throughout_is_served_by_the_feeder(s3):
    """``tolist`` never lets the GIL go: the read-ahead thread cannot run, every fill after
    the first chunks asks the feeder, and the scan ends with the right values."""
    data = np.random.default_rng(2).integers(0, 1000, (8192, 8)).astype(np.int32)
    y = remote_array(s3, "g.zarr", data, (256, 8))
    a = y.as_ndarray()
    assert a.tolist() == data.tolist()
    del a


def test_a_damaged_chunk_handed_over_is_an_error_naming_it(s3):
    data = np.ones((8192, 8), dtype=np.float32)
    y = remote_array(s3, "d.zarr", data, (2048, 8))  # 4 chunks of 64 KiB: a unit each
    key = s3.url("d.zarr").split("/", 3)[3] + "/c/1/0"
    s3.server.boto3().put_object(Bucket=s3.name, Key=key, Body=b"\x28\xb5\x2f\xfd" + b"x" * 64)
    a = y.as_ndarray()
    first = _stats(y)["handed_over_bytes"]  # chunk 0, before the array was returned
    assert a[0].sum() == 8
    _until(lambda: _stats(y)["handed_over_bytes"] > first)  # chunk 1 is handed over first
    with pytest.raises(PagedChunkError, match=r"chunk 1 \(as fetched from the object store\)"):
        a[2048].copy()
    assert a[4096:].sum() == 4096 * 8  # the other chunks still read
    del a


def test_a_0d_remote_array_reads_as_its_value(s3):
    x = oc.create(s3.url("z.zarr"), (), "complex64", storage_options=s3.storage_options)
    x[...] = 1 + 2j
    a = oc.open(s3.url("z.zarr"), storage_options=s3.storage_options).as_ndarray()
    assert a.shape == () and complex(a) == 1 + 2j


def test_threads_scanning_one_array_each_read_every_row(s3):
    data = np.random.default_rng(3).standard_normal((16384, 16)).astype(np.float64)
    y = remote_array(s3, "t.zarr", data, (512, 16))
    a = y.as_ndarray()
    sums: list[float] = []
    errors: list[BaseException] = []

    def scan(array: np.ndarray, backward: bool) -> None:
        try:
            view = array[::-1] if backward else array
            sums.append(float(view.sum()))
        except BaseException as error:  # reported by the main thread
            errors.append(error)

    threads = [threading.Thread(target=scan, args=(a, i % 2 == 1)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert sums == pytest.approx([float(data.sum())] * 4)
    del a


def test_a_second_scan_after_eviction_is_read_ahead_again(s3):
    data = np.random.default_rng(4).standard_normal((8192, 32)).astype(np.float32)
    y = remote_array(s3, "s.zarr", data, (256, 32))
    with oc.Manager(max_bytes="512K"):
        a = y.as_ndarray()
        first = float(a.sum(dtype=np.float64))
        second = float(a.sum(dtype=np.float64))  # the pages of the start were evicted
        assert first == second == pytest.approx(float(data.sum(dtype=np.float64)))
        assert _stats(y)["evictions"] > 0
        del a


def test_the_heap_is_trimmed_as_fetched_buffers_are_let_go(s3, monkeypatch):
    from oocarray._storage._objects import _heap

    assert _heap._TRIM is not None  # glibc, as on every Linux these tests run on
    trims: list[int] = []
    monkeypatch.setattr(_heap, "TRIM_EVERY", 4 * 32768)
    monkeypatch.setattr(_heap, "_TRIM", lambda pad: trims.append(pad) or 0)
    data = np.random.default_rng(3).standard_normal((8192, 32)).astype(np.float32)
    y = remote_array(s3, "trim.zarr", data, (256, 32), codec="none")
    a = y.as_ndarray()
    _until(lambda: _stats(y)["handed_over_bytes"] >= 30 * 32768)
    assert not trims  # the fetched buffers are lent to the pager: none is let go yet
    assert np.array_equal(a, data)
    # As the scan goes on, the pager gives back the buffers of the chunks it left behind
    # (at the end all but the last few of the 32, 32 KiB each), and the heap is trimmed.
    _until(lambda: _stats(y)["handed_over_bytes"] <= 16 * 32768 and len(trims) >= 1)
    assert set(trims) == {0}
    del a


def test_bytes_let_go_are_counted_on_the_manager_until_the_heap_is_trimmed(monkeypatch):
    # They stay resident in the C heap until the trim: a budget that left them out was
    # exceeded by 50-100 MiB in a scan of a sharded array (W13).
    from oocarray._storage._objects import _heap

    trims: list[int] = []
    monkeypatch.setattr(_heap, "_TRIM", lambda pad: trims.append(pad) or 0)
    with oc.Manager(max_bytes="64M") as manager:
        trimmer = _heap.HeapTrimmer(every=100_000, manager=manager)
        before = manager.stats().current_bytes
        assert not trimmer.let_go(40_000)
        assert not trimmer.let_go(40_000)
        assert manager.stats().current_bytes - before == 80_000
        assert trimmer.held_bytes == 80_000
        assert trimmer.let_go(40_000)  # 120,000 let go: trimmed, nothing held any more
        assert trims == [0]
        assert manager.stats().current_bytes == before
        assert trimmer.held_bytes == 0
        assert not trimmer.let_go(0)
        assert manager.stats().current_bytes == before
        assert not trimmer.flush()  # nothing let go since the trim: no trim
        assert not trimmer.let_go(10_000)
        assert manager.stats().current_bytes - before == 10_000
        assert trimmer.flush()  # a pass that ended: trimmed, nothing stays counted
        assert manager.stats().current_bytes == before
        assert trims == [0, 0]
    unmanaged = _heap.HeapTrimmer(every=100_000)  # no manager: nothing counted, still trims
    assert not unmanaged.let_go(60_000)
    assert unmanaged.let_go(60_000)
    assert trims == [0, 0, 0]
