"""The external merge sort's reused memory and run codecs: runs of repeating values stored
with plain LZ4 and runs of distinct values with byte-shuffled LZ4 read back exactly; a run
reader's head, compacted in its one buffer at every refill, gives the run in order whatever
it is asked for; a 1-d stored array read a chunk at a time into the workers' buffers, and the
merge's rounds sorted in reused buffers, sort equal to NumPy (NaN last, stable argsort) within
a budget an eighth of the data; a full disk is an error; rounds written where they are sorted
fill every chunk of the result in order; Ctrl-C stops a sort promptly and leaves no file; a
stable sort keeps 0.0 and -0.0 in order."""

from __future__ import annotations

import signal
import threading
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import oocarray as oc
from oocarray._compute import _external_sort
from oocarray._compute._sorted_runs import RunReader, Runs
from oocarray.errors import SpillError


def _stored_run(values: np.ndarray, block: int) -> Runs:
    runs = Runs(len(values), values.dtype, arg=False, block=block)
    runs.write(0, values, None)
    return runs


@pytest.mark.parametrize("repeating", [True, False])
def test_runs_choose_their_codec_and_read_back_exactly(repeating: bool) -> None:
    rng = np.random.default_rng(3)
    values = rng.normal(size=50_000).astype(np.float32)
    if repeating:
        values = np.round(values, 1)
    values.sort()
    runs = _stored_run(values, block=4096)
    try:
        codecs = {type(codec).__name__ for _, _, codec in runs.blocks.values()}
        assert codecs == ({"LZ4"} if repeating else {"Blosc"})
        back = np.empty_like(values)
        for first in range(0, len(values), 4096):
            runs.read_into(first, back[first : first + 4096], None)
        np.testing.assert_array_equal(back, values)
    finally:
        runs.close()


@given(
    takes=st.lists(st.integers(0, 700), min_size=1, max_size=60),
    chunk=st.integers(1, 300),
)
def test_run_reader_gives_the_run_in_order_whatever_it_takes(takes: list[int], chunk: int) -> None:
    values = np.arange(2_000, dtype=np.int64)
    runs = Runs(len(values), values.dtype, arg=False)  # raw: any chunk reads back
    runs.write(0, values, None)
    try:
        reader = RunReader(runs, 0, len(values), chunk)
        given_back = []
        for count in takes:
            part, _ = reader.take(min(count, len(reader.values)))
            given_back.append(part.copy())  # (a view: valid until the next refill)
            reader.fill()
        while len(reader.values):
            given_back.append(reader.take(len(reader.values))[0].copy())
            reader.fill()
        assert reader.exhausted
        np.testing.assert_array_equal(np.concatenate(given_back), values)
    finally:
        runs.close()


@pytest.mark.parametrize("dtype", ["float32", "int16", "float64"])
def test_stored_1d_array_sorts_like_numpy_in_a_budget(dtype: str) -> None:
    rng = np.random.default_rng(5)
    data = rng.normal(0, 40, 240_000)
    if dtype == "float32":
        data = np.round(data, 1)  # many ties: runs stored with plain LZ4
    data = data.astype(dtype)
    if dtype.startswith("float"):
        data[rng.random(data.shape) < 0.01] = np.nan
    x = oc.from_numpy(data, chunks=7_000)  # chunks that do not divide the runs
    budget = data.nbytes // 8
    with oc.Manager(max_bytes=budget) as manager:
        ordered = np.sort(x)
        assert isinstance(ordered, oc.ChunkedArray)
        np.testing.assert_array_equal(ordered[...], np.sort(data))
        assert manager.stats().peak_bytes <= budget


def test_stable_argsort_of_ties_beside_reused_buffers() -> None:
    """A values sort and a stable argsort in one budget: the argsort keeps ties in order."""
    rng = np.random.default_rng(6)
    data = rng.integers(0, 50, 60_000).astype(np.int32)
    x = oc.from_numpy(data, chunks=5_000)
    budget = data.size * (4 + 16) // 8  # argsort carries two indices per value
    with oc.Manager(max_bytes=budget) as manager:
        np.testing.assert_array_equal(np.sort(x)[...], np.sort(data))
        order = np.argsort(x, kind="stable")
        np.testing.assert_array_equal(order[...], np.argsort(data, kind="stable"))
        assert manager.stats().peak_bytes <= budget


def test_a_full_disk_is_an_error_and_a_later_sort_works(tiny_tmpfs: Path) -> None:
    """Runs that do not fit the spill directory's disk: an error naming the space, no crash;
    with room again, the same sort equals NumPy's."""
    rng = np.random.default_rng(8)
    data = rng.random(2_000_000)  # 16 MB of distinct values: about 12 MB compressed
    x = oc.from_numpy(data, chunks=100_000)
    oc.configure(spill_dir=str(tiny_tmpfs))
    with oc.Manager(max_bytes="4M"), pytest.raises(SpillError, match="space"):
        np.sort(x)
    oc.configure(spill_dir=str(tiny_tmpfs.parent))
    with oc.Manager(max_bytes="4M"):
        np.testing.assert_array_equal(np.sort(x)[...], np.sort(data))


@settings(deadline=None, max_examples=40)  # (each example writes many small chunk files)
@given(
    lengths=st.lists(st.integers(1, 300), min_size=1, max_size=6),
    chunk=st.integers(4, 150),
    buffer=st.integers(1, 90),
    arg=st.booleans(),
)
def test_rounds_written_as_they_are_sorted_fill_every_chunk_in_order(
    lengths: list[int], chunk: int, buffer: int, arg: bool
) -> None:
    """Rounds write their whole chunks at once and join the chunks they share with the rounds
    beside them in order: whatever the chunk, round and run lengths, the chunked result is the
    stable sort of the runs (argsort: its indices)."""
    rng = np.random.default_rng(sum(lengths) + chunk)
    data = rng.integers(0, 30, sum(lengths)).astype(np.int32)
    runs = Runs(len(data), data.dtype, arg=arg)
    bounds = []
    start = 0
    for length in lengths:
        part = data[start : start + length]
        order = np.argsort(part, kind="stable")
        runs.write(start, part[order], (order + start) if arg else None)
        bounds.append((start, start + length))
        start += length
    result = oc.temp((len(data),), np.intp if arg else data.dtype, chunks=(chunk,), codec="none")
    try:
        readers = [RunReader(runs, a, b, buffer) for a, b in bounds]
        _external_sort._merge(readers, _external_sort._Output(result, chunk), arg, True, True)
        expected = np.argsort(data, kind="stable") if arg else np.sort(data)
        np.testing.assert_array_equal(result[...], expected)
    finally:
        runs.close()
        result.close()


def test_ctrl_c_while_runs_are_sorted_stops_promptly_and_leaves_no_file(tmp_path: Path) -> None:
    """Ctrl-C while the runs are read: the runs not started are dropped, the scratch file and
    the result's temporary are gone, and the same sort works afterwards."""
    rng = np.random.default_rng(9)
    data = rng.random(2_000_000).astype(np.float32)
    x = oc.from_numpy(data, chunks=50_000)
    budget = "6M"  # two runs sorted at once, eight in all
    spill = tmp_path / "spill"
    spill.mkdir()
    oc.configure(spill_dir=str(spill))
    started, interrupted, over = threading.Event(), threading.Event(), threading.Event()
    blocks, threads = [], set()

    def held(block: np.ndarray) -> np.ndarray:
        blocks.append(len(block))
        threads.add(threading.current_thread().name)
        started.set()
        assert interrupted.wait(60), "no interrupt reached the caller"  # a hang guard only
        return block

    def interrupt(signum: int, frame: object) -> None:
        interrupted.set()
        raise KeyboardInterrupt

    def send() -> None:  # once a run is being read, so the sort can neither end nor not start
        started.wait(60)
        if not over.is_set():
            signal.pthread_kill(threading.main_thread().ident or 0, signal.SIGINT)

    previous = signal.signal(signal.SIGINT, interrupt)
    sender = threading.Thread(target=send)
    expression = x.map_blocks(held, dtype=np.float64)
    try:
        sender.start()
        with oc.Manager(max_bytes=budget), pytest.raises(KeyboardInterrupt):
            np.sort(expression)
    finally:
        over.set()
        started.set()
        sender.join()
        signal.signal(signal.SIGINT, previous)
    # The two runs being read when Ctrl-C came finish; the six others are never read.
    assert threading.main_thread().name not in threads
    assert 1 <= len(blocks) <= 2 * 250_000 // 50_000
    left = [path for path in spill.rglob("*") if path.is_file()]
    assert left == []
    oc.configure(spill_dir=str(tmp_path))
    with oc.Manager(max_bytes=budget):
        np.testing.assert_array_equal(np.sort(x)[...], np.sort(data))


@pytest.mark.parametrize("dtype", ["float64", "complex64"])
def test_a_stable_sort_keeps_equal_values_that_differ_in_their_runs_order(dtype: str) -> None:
    """0.0 and -0.0 compare equal but are not the same value: a stable sort keeps them in
    the order they came, as NumPy's does, through the runs and the merge."""
    rng = np.random.default_rng(10)
    data = rng.choice(np.array([-0.0, 0.0, 1.0, -1.0, np.nan]), 120_000).astype(dtype)
    x = oc.from_numpy(data, chunks=7_000)
    with oc.Manager(max_bytes=data.nbytes // 8):
        ordered = np.sort(x, kind="stable")[...]
    expected = np.sort(data, kind="stable")
    np.testing.assert_array_equal(ordered, expected)
    np.testing.assert_array_equal(np.signbit(ordered.real), np.signbit(expected.real))
