"""The feeder process of an ``as_ndarray()`` of an array in S3 (moto on loopback): started by
the pager the first time a fill needs it in a process, stopped and waited for with the array,
replaced when it ends by itself, and started anew in a forked child (whose parent's fills may
be waiting on the parent's one)."""

from __future__ import annotations

import gc
import glob
import os
import signal
import threading

import numpy as np
import pytest

import oocarray as oc
from oocarray._storage._paged._arrays import paging_available
from testkit.children import wait_forked
from testkit.stores import remote_array

PAGING, WHY_NOT = paging_available()
pytestmark = pytest.mark.skipif(not PAGING, reason=f"as_ndarray() cannot page here: {WHY_NOT}")

WAIT_S = 60.0  # a bound, never reached when it works


def _feeders(parent: int | None = None) -> list[int]:
    """The feeder processes of ``parent`` (this process), zombies included."""
    parent = os.getpid() if parent is None else parent
    found = []
    for stat in glob.glob("/proc/[0-9]*/stat"):
        try:
            with open(stat) as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            with open(stat.replace("stat", "cmdline"), "rb") as f:
                command = f.read()
        except (OSError, ValueError, IndexError):
            continue
        if ppid == parent and b"_zarr._feeder" in command:
            found.append(int(stat.split("/")[2]))
    return found


def _state(pid: int) -> str:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0]


def _stats(y) -> dict[str, int]:
    (stats,) = y._paged.stats()
    return stats


def _until(condition, what: str) -> None:
    done = threading.Event()
    for _ in range(int(WAIT_S / 0.005)):
        if condition():
            return
        done.wait(0.005)
    raise AssertionError(what)


def _rows(y, chunk: int) -> slice:
    rows = y.chunks[0]
    return slice(chunk * rows, (chunk + 1) * rows)


LAST = 15  # of the 16 chunks of ``writable``


def _not_fetched_yet(y) -> int:
    """After the last chunk was read, a chunk sure to be asked of the feeder: the last one
    below the pager's unit holding the last chunk (a fill asks for each chunk of its unit, and
    the feeder reads ahead in the direction of the requests: past the end, nothing)."""
    per_unit = max(1, _stats(y)["unit_bytes"] // (y.chunks[0] * y.shape[1] * y.dtype.itemsize))
    return (LAST // per_unit) * per_unit - 1


@pytest.fixture
def writable(s3):
    """An r+ array of 16 chunks (no read-ahead in this process: its fills ask the feeder) and
    its data."""
    data = np.random.default_rng(7).standard_normal((4096, 16)).astype(np.float32)
    remote_array(s3, "feed.zarr", data, (256, 16))
    return oc.open(s3.url("feed.zarr"), "r+", storage_options=s3.storage_options), data


def test_the_feeder_starts_at_the_first_fill_that_needs_it_and_ends_with_the_array(writable):
    y, data = writable
    before = set(_feeders())
    a = y.as_ndarray("r+")
    assert not set(_feeders()) - before and _stats(y)["feeder_starts"] == 0  # untouched
    assert np.array_equal(a[_rows(y, 3)], data[_rows(y, 3)])
    mine = set(_feeders()) - before
    assert len(mine) == 1 and _stats(y)["feeder_starts"] == 1
    assert _stats(y)["feeder_requests"] >= 1
    del a
    gc.collect()
    assert not mine & set(_feeders())  # killed and waited for: not even a zombie


def test_a_feeder_that_ended_is_replaced_by_the_next_fill(writable):
    y, data = writable
    a = y.as_ndarray("r+")
    assert np.array_equal(a[_rows(y, LAST)], data[_rows(y, LAST)])
    (first,) = _feeders()
    os.kill(first, signal.SIGKILL)
    _until(lambda: _state(first) == "Z", "the feeder did not end")
    rows = _rows(y, _not_fetched_yet(y))
    assert np.array_equal(a[rows], data[rows])  # read, not an error
    (second,) = _feeders()  # the first waited for
    assert second != first and _stats(y)["feeder_starts"] == 2
    assert np.array_equal(a, data)
    del a


def test_a_child_forked_while_a_fill_waits_on_the_feeder_starts_its_own(writable):
    """The parent's fill is waiting on its feeder (stopped here) when the process forks: the
    child's copy of that wait is not its own, nor are the pipes.  Its fills start a feeder of
    its own, and read every chunk; the parent's fill ends once its feeder goes on."""
    y, data = writable
    a = y.as_ndarray("r+")
    assert np.array_equal(a[_rows(y, LAST)], data[_rows(y, LAST)])
    (feeder,) = _feeders()
    asked = _stats(y)["feeder_requests"]
    os.kill(feeder, signal.SIGSTOP)
    rows = _rows(y, _not_fetched_yet(y))
    out = np.empty_like(data[rows])
    # np.copyto lets the GIL go: the fill waits, not this thread
    touch = threading.Thread(target=np.copyto, args=(out, a[rows]))
    try:
        touch.start()
        _until(lambda: _stats(y)["feeder_requests"] > asked, "the fill did not ask the feeder")
        pid = os.fork()
        if pid == 0:  # the child: no pytest here, only its exit status
            ok = np.array_equal(a[rows], data[rows]) and np.array_equal(a, data)
            os._exit(0 if ok else 1)
        assert wait_forked(pid, "read its array", WAIT_S) == 0
    finally:
        os.kill(feeder, signal.SIGCONT)
        touch.join(WAIT_S)
    assert not touch.is_alive()
    assert np.array_equal(out, data[rows])
    assert _feeders() == [feeder]  # the child's was its own
    del a


def test_a_feeder_reaped_by_someone_else_ends_the_array_quietly(writable):
    """A program that waits for every child reaps the feeder too: the pager then neither
    waits forever for it nor signals whatever process has its pid since (it holds a pidfd)."""
    y, data = writable
    a = y.as_ndarray("r+")
    assert np.array_equal(a[_rows(y, LAST)], data[_rows(y, LAST)])
    (feeder,) = _feeders()
    os.kill(feeder, signal.SIGKILL)
    os.waitpid(feeder, 0)  # behind the pager's back
    rows = _rows(y, _not_fetched_yet(y))
    assert np.array_equal(a[rows], data[rows])  # its successor serves
    assert _stats(y)["feeder_starts"] == 2
    del a
    gc.collect()
    assert not _feeders()
