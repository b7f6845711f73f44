"""The buffers fetched bytes are read from: the network layer's own bytes counted on the
reader's manager while anything refers to them (no copy); and the buffers cached bytes are
read into, reused within a pass only once nothing refers to them, counted by the reader's
manager, kept up to their limit."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import oocarray as oc
from oocarray._storage._objects._buffers import ReadBuffers


def test_a_buffer_anything_refers_to_is_never_handed_out_again() -> None:
    buffers = ReadBuffers(None, limit=64 << 20)
    held = []
    for kind in ("array", "view", "memoryview", "frombuffer"):
        data = buffers.take(100_000)
        data[...] = len(held) + 1
        keep: object = {
            "array": data,
            "view": data[10:20],
            "memoryview": memoryview(data),
            "frombuffer": np.frombuffer(data, dtype=np.uint16),
        }[kind]
        held.append((len(held) + 1, keep))
        del data
    for _ in range(20):  # none of the held buffers comes back, whatever is asked for
        fresh = buffers.take(100_000)
        fresh[...] = 0
    for value, keep in held:
        assert np.all(np.frombuffer(keep, dtype=np.uint8) == value)


def test_a_buffer_no_one_refers_to_is_reused_and_the_limit_holds() -> None:
    buffers = ReadBuffers(None, limit=1 << 20)
    first = buffers.take(200_000)
    address = first.__array_interface__["data"][0]
    del first
    again = buffers.take(190_000)  # a little smaller: the same buffer
    assert again.__array_interface__["data"][0] == address
    many = [buffers.take(200_000) for _ in range(10)]  # over the limit: new ones, not kept
    assert buffers.kept_bytes <= 1 << 20
    assert len({m.__array_interface__["data"][0] for m in many}) == 10
    tiny = buffers.take(1000)  # far smaller than every kept buffer: its own
    assert tiny.size == 1000


def test_buffers_are_the_managers_memory() -> None:
    m = oc.Manager()
    buffers = ReadBuffers(m, limit=8 << 20)
    before = m.stats().current_bytes
    data = buffers.take(1 << 20)
    assert m.stats().current_bytes >= before + (1 << 20)
    del data, buffers
    assert m.stats().current_bytes == before
    m.close()


def test_counted_bytes_are_the_same_memory_counted_while_anything_refers_to_them() -> None:
    m = oc.Manager(max_bytes="1M")
    buffers = ReadBuffers(m, limit=0)
    fetched = bytearray(b"x" * (2 << 20))  # over the budget: bytes that exist are counted
    before = m.stats().current_bytes
    data = buffers.counted(fetched)
    assert data.size == 2 << 20 and not data.flags.writeable
    fetched[5] = ord("y")  # the same memory, not a copy
    assert data[5] == ord("y")
    assert m.stats().current_bytes == before + (2 << 20)
    assert m.stats().peak_bytes >= before + (2 << 20)
    view = memoryview(data[100:200])
    del data
    assert m.stats().current_bytes == before + (2 << 20)  # a view still refers to them
    del view
    assert m.stats().current_bytes == before
    m.close()


def test_counted_bytes_of_no_manager_are_counted_nowhere_and_keep_their_source() -> None:
    import sys

    source = bytes(range(256)) * 16
    refs = sys.getrefcount(source)
    data = ReadBuffers(None, limit=0).counted(memoryview(source)[16:48])
    assert data.tolist() == list(range(16, 48))
    assert sys.getrefcount(source) > refs  # held through the memoryview
    del data
    assert sys.getrefcount(source) == refs


def test_bytes_in_flight_are_counted_until_let_go_and_have_no_buffer() -> None:
    m = oc.Manager(max_bytes="1M")
    buffers = ReadBuffers(m, limit=0)
    before = m.stats().current_bytes
    receiving = buffers.in_flight(3 << 20)  # over the budget: a request already sent
    assert m.stats().current_bytes == before + (3 << 20)
    assert len(receiving) == 3 << 20
    with pytest.raises(BufferError, match="no buffer"):
        memoryview(receiving)
    del receiving
    assert m.stats().current_bytes == before
    with pytest.raises(ValueError, match=">= 0"):
        buffers.in_flight(-1)
    assert m.stats().current_bytes == before
    assert ReadBuffers(None, limit=0).in_flight(1 << 20) is None  # counted nowhere
    m.close()


def test_bytes_in_flight_make_room_by_dropping_pages_filled_longest_ago(tmp_path) -> None:
    from oocarray._storage._paged._arrays import paging_available

    ok, why = paging_available()
    if not ok:
        pytest.skip(f"as_ndarray() cannot page here: {why}")
    data = np.arange(1 << 20, dtype=np.float32).reshape(1024, 1024)  # 4 MiB, 64 KiB rows
    x = oc.from_numpy(data, chunks=(16, 1024)).to_zarr(str(tmp_path / "a.zarr"))
    with oc.Manager(max_bytes="2M") as m:
        a = x.as_ndarray()
        assert float(a[:384].sum(dtype=np.float64)) == float(data[:384].sum(dtype=np.float64))
        resident = x.paging_stats()[0]["resident_bytes"]
        assert resident >= 1 << 20
        receiving = ReadBuffers(m, limit=0).in_flight(1 << 20)
        # The pages filled longest ago went to make room: the budget holds.
        assert m.stats().current_bytes <= 2 << 20
        assert x.paging_stats()[0]["resident_bytes"] <= resident - (512 << 10)
        del receiving
        assert np.array_equal(a[:384], data[:384])  # what was dropped is filled again
        del a


def test_threads_taking_and_dropping_never_share_a_buffer() -> None:
    buffers = ReadBuffers(None, limit=4 << 20)
    errors: list[str] = []
    start = threading.Barrier(4)

    def work(me: int) -> None:
        start.wait()
        for i in range(300):
            data = buffers.take(50_000 + i)
            data[...] = me
            if not np.all(data == me):
                errors.append(f"thread {me}: another thread wrote into its buffer")
            del data

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
