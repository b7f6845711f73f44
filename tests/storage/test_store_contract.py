"""The store contract: what every storage format promises through the public API, checked by
one class run over every format of :data:`testkit.stores.FORMATS` (zarr v3 with zstd and with
no codec, sharded zarr v3, zarr v2, chunked HDF5 with no filter and with shuffle, gzip and
fletcher32, contiguous HDF5, ``.npy``), in the spirit of zarr-python's ``StoreTests``.

Each test states one promise; what a format does not offer is said by its :class:`Format`
(``paged``, ``writes_back``, ``damage``, ``write_sparse``) and the test skips it with the
reason.  A new backend passes the same contract by adding one ``Format``.  What only one
format has (HDF5 filter chains and chunks that move, zarr chunk files replaced whole, what
``as_ndarray`` refuses) is in ``test_hdf5_chunks.py``, ``test_zarr_chunks.py`` and
``test_as_ndarray_refusals.py``.

Chunk-backed ndarrays need userfaultfd with kernel-mode faults: the tests of ``as_ndarray()``
of paged formats skip without it.
"""

from __future__ import annotations

import multiprocessing
import os
import pickle
import tempfile
import threading
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import oocarray as oc
from oocarray import _native
from oocarray._storage._paged._arrays import paging_available
from testkit.children import run_python
from testkit.stores import FORMATS, Format, round_trip, sample

PAGING, WHY_NOT = paging_available()
DTYPES = ["float32", "int16", "uint8", "i1", "<u2", "float64", ">i4", ">f8", "complex64",
          "<c16", "bool"]  # fmt: skip


# Reads: 8 KiB chunks of float64, a fault fills several.  Writes: 32 KiB chunks, two to a fill
# unit of 64 KiB.  Budgets: 128 KiB chunks, 4 MiB in all.
READ = sample((1024, 16), "<f8")
READ_ROWS = 64
WRITE = np.arange(4096 * 16, dtype=np.int64).reshape(4096, 16)
WRITE_ROWS = 256
BIG = sample((8192, 64), "<f8", seed=2)
BIG_ROWS = 256
DAMAGED = 2  # the chunk the damage tests damage (the first of its shard, where sharded)

_shared: list[np.ndarray] = []


def _check_shared(start: int) -> bool:
    return bool(np.array_equal(_shared[0][start:], READ[start:]))


@pytest.fixture(params=FORMATS, ids=str)
def fmt(request: pytest.FixtureRequest) -> Format:
    return request.param  # type: ignore[no-any-return]


@pytest.fixture
def store(fmt: Format, tmp_path: Path) -> str:
    """READ in the format."""
    return fmt.write(tmp_path, READ, READ_ROWS)


def needs_pages(fmt: Format) -> None:
    """Skip where ``as_ndarray()`` of ``fmt`` needs userfaultfd and it is missing."""
    if fmt.paged and not PAGING:
        pytest.skip(f"no chunk-backed ndarrays here: {WHY_NOT}")


LACKS = {
    "paged": "as_ndarray() maps the file: no chunks to page",
    "writes_back": 'as_ndarray("r+") is refused',
    "damage": "the chunks are raw bytes: damage cannot be told",
    "write_sparse": "every byte is stored: no absent chunks",
}


def needs(fmt: Format, what: str) -> None:
    """Skip where ``fmt`` does not offer ``what`` (a flag or a hook of :class:`Format`)."""
    if not getattr(fmt, what):
        pytest.skip(f"{fmt}: {LACKS[what]}")
    if what in ("paged", "damage") or (what == "writes_back" and fmt.paged):
        needs_pages(fmt)


class TestStoreContract:
    # ---- reads ----

    @pytest.mark.parametrize("fmt", FORMATS, ids=str)
    @settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(
        shape=st.lists(st.integers(1, 40), min_size=1, max_size=3).map(tuple),
        rows=st.integers(1, 50),
        dtype=st.sampled_from(DTYPES),
        data=st.data(),
    )
    def test_reads_equal_the_data(
        self, fmt: Format, shape: tuple[int, ...], rows: int, dtype: str, data: st.DataObject
    ) -> None:
        """Indexing and ``as_ndarray()`` give the data that was stored, read by the format's
        own library too; ``as_ndarray()`` is a plain read-only ndarray."""
        rows = min(rows, shape[0])
        expected = sample(shape, dtype, rows)
        start = data.draw(st.integers(0, shape[0] - 1))
        stop = data.draw(st.integers(start, shape[0]))
        step = data.draw(st.integers(1, 5))
        with tempfile.TemporaryDirectory() as tmp:
            target = fmt.write(Path(tmp), expected, rows)
            assert np.array_equal(fmt.read(target), expected)
            x = fmt.open(target)
            assert x.shape == shape and x.dtype == expected.dtype
            assert np.array_equal(x[...], expected)
            assert np.array_equal(x[start:stop:step], expected[start:stop:step])
            if fmt.paged and not PAGING:
                return
            view = x.as_ndarray()
            assert type(view) is np.ndarray and not view.flags.writeable
            assert view.shape == shape and view.dtype == expected.dtype
            assert np.array_equal(view[start:stop:step], expected[start:stop:step])
            assert np.array_equal(view[::-1], expected[::-1])
            assert np.array_equal(np.asarray(view), expected)
            if fmt.paged:
                assert x.paging_stats()[0]["failures"] == 0
            else:
                assert oc.location(view) == "mmap"
            del view
            x.close()

    def test_views_outlive_the_array_pickle_as_arrays_and_feed_c_code(
        self, fmt: Format, store: str, tmp_path: Path
    ) -> None:
        needs_pages(fmt)
        view = fmt.open(store).as_ndarray()
        part = view[100:300, ::2]
        del view  # the views keep the mapping
        assert np.array_equal(part, READ[100:300, ::2])
        again = pickle.loads(pickle.dumps(part))
        assert type(again) is np.ndarray and np.array_equal(again, READ[100:300, ::2])
        whole = fmt.open(store).as_ndarray()
        np.save(tmp_path / "copy.npy", whole)  # C code reading the pages
        assert np.array_equal(np.load(tmp_path / "copy.npy"), READ)
        assert np.allclose(np.percentile(whole[:, 5], 90), np.percentile(READ[:, 5], 90))

    def test_threads_touching_the_same_chunks_see_the_same_data(
        self, fmt: Format, store: str
    ) -> None:
        needs_pages(fmt)
        view = fmt.open(store).as_ndarray()
        results: list[bool] = []
        barrier = threading.Barrier(8)

        def read(k: int) -> None:
            barrier.wait()
            results.append(bool(np.array_equal(view[k % 3 :: 3], READ[k % 3 :: 3])))

        threads = [threading.Thread(target=read, args=(k,)) for k in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert results == [True] * 8

    def test_system_calls_read_and_write_untouched_pages(
        self, fmt: Format, store: str, tmp_path: Path
    ) -> None:
        needs_pages(fmt)
        reader = fmt.open(store)
        view = reader.as_ndarray()
        fd = os.open(tmp_path / "out.bin", os.O_WRONLY | os.O_CREAT)
        try:
            assert os.write(fd, view[500:]) == READ[500:].nbytes  # the kernel reads the pages
        finally:
            os.close(fd)
        with open(tmp_path / "in.bin", "wb") as f:
            f.write(view[:500])
        assert np.array_equal(np.fromfile(tmp_path / "out.bin", READ.dtype), READ[500:].ravel())
        assert np.array_equal(np.fromfile(tmp_path / "in.bin", READ.dtype), READ[:500].ravel())
        del view
        reader.close()  # HDF5 opens no file for writing that is open for reading
        if not fmt.writes_back:
            return
        x = fmt.open(store, mode="r+")
        target = x.as_ndarray("r+")
        with open(tmp_path / "out.bin", "rb") as f:
            assert f.readinto(target[:500]) == READ[500:1000].nbytes  # the kernel writes them
        written = x.flush()
        assert written > 0 if fmt.paged else written == 0  # mapped files have no chunks
        del target
        x.close()
        assert np.array_equal(fmt.read(store)[:500], READ[500:1000])

    def test_a_forked_child_reads_the_data_not_zero_pages(self, fmt: Format, store: str) -> None:
        needs_pages(fmt)
        view = fmt.open(store).as_ndarray()
        assert view[0, 0] == READ[0, 0]  # some chunks filled before the fork, most not
        pid = os.fork()
        if pid == 0:
            os._exit(0 if np.array_equal(view, READ) else 3)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        _shared[:] = [view]
        try:
            with multiprocessing.get_context("fork").Pool(2) as pool:
                assert pool.map(_check_shared, [0, 300, 700]) == [True] * 3
        finally:
            _shared.clear()
        assert np.array_equal(view, READ)  # and the parent still serves its own

    def test_absent_chunks_hold_the_fill_value(self, fmt: Format, tmp_path: Path) -> None:
        needs(fmt, "write_sparse")
        assert fmt.write_sparse is not None
        needs_pages(fmt)
        blocks = [(0, 40, 1), (200, 240, 2), (777, 778, 5)]  # the other chunks never written
        target = fmt.write_sparse(tmp_path, (1000, 5), "<i4", 40, -3, blocks)
        expected = np.full((1000, 5), -3, dtype="<i4")
        for start, stop, value in blocks:
            expected[start:stop] = value
        assert np.array_equal(fmt.read(target), expected)
        x = fmt.open(target)
        assert np.array_equal(x[...], expected)
        assert np.array_equal(x.as_ndarray(), expected)
        (tmp_path / "zeros").mkdir()
        zeros = fmt.open(fmt.write_sparse(tmp_path / "zeros", (5000, 64), "<f4", 1024, 0, []))
        empty = zeros.as_ndarray()
        assert not empty.any()
        assert zeros.paging_stats()[0]["zero_fills"] > 0  # the shared zero page, no copies

    # ---- memory ----

    def test_resident_chunks_stay_within_the_budget_and_come_back(
        self, fmt: Format, tmp_path: Path
    ) -> None:
        needs(fmt, "paged")
        x = fmt.open(fmt.write(tmp_path, BIG, BIG_ROWS))
        with oc.Manager(max_bytes="1M") as m:
            view = x.as_ndarray()
            # A fill is counted before it evicts, and goes in over the budget when every other
            # resident unit is being filled (read-ahead): one unit over per fill running at
            # once (one per pager worker; the pager's threads are its reader and its workers),
            # for a moment, at most.
            unit = x.paging_stats()[0]["unit_bytes"]
            view.sum()  # the pager's threads are started
            unit *= max(1, _native.pager_threads() - 1)
            for _ in range(2):  # the second pass refills what the first dropped
                for i in range(0, len(BIG), 512):
                    assert np.array_equal(view[i : i + 512], BIG[i : i + 512])
                    assert x.paging_stats()[0]["resident_bytes"] <= (1 << 20) + unit
            stats = x.paging_stats()[0]
            assert stats["evictions"] > 0 and stats["fills"] > 2 * 32 - 8
            assert m.stats().peak_bytes <= (1 << 20) + 512 * BIG.shape[1] * BIG.itemsize
            del view
            assert m.stats().current_bytes == 0  # released with the mapping

    def test_no_pager_thread_is_left_behind(self, fmt: Format, store: str) -> None:
        needs(fmt, "paged")
        view = fmt.open(store).as_ndarray()
        assert view.sum() != 0 and _native.pager_threads() > 0
        del view
        assert _native.pager_threads() == 0  # stopped with the last array
        result = run_python(
            f"""
            import oocarray as oc, os
            v = oc.open({store!r}).as_ndarray()
            print(len(os.listdir('/proc/self/task')) > 1, float(v[10, 0]))
            """
        )
        assert result.returncode == 0, result.stderr  # exits with an array alive, no hang
        assert result.stdout.split()[0] == "True"

    # ---- damage ----

    def test_a_damaged_chunk_is_corrupt_chunk_error_with_a_reason_never_a_hang(
        self, fmt: Format, store: str
    ) -> None:
        needs(fmt, "damage")
        assert fmt.damage is not None
        reason = fmt.damage(store, DAMAGED)
        result = run_python(
            f"""
            import oocarray as oc
            v = oc.open({store!r}).as_ndarray()
            print(float(v[:{READ_ROWS}].sum()), flush=True)  # chunk 0 is intact
            try:
                v[{DAMAGED * READ_ROWS + 1}].sum()
            except oc.CorruptChunkError as error:
                print(error)
            """
        )
        assert result.returncode == 0, result.stderr
        first, message = result.stdout.strip().split("\n")
        assert first == str(float(READ[:READ_ROWS].sum()))
        assert f"chunk {DAMAGED}" in message and "cannot be decoded" in message, message
        assert reason in message, message

    # ---- writing ----

    def test_written_views_reach_the_store(self, fmt: Format, tmp_path: Path) -> None:
        """Writes through ``as_ndarray("r+")`` reach the store at ``flush()``, when the last
        view goes and at ``close()``; the format's own library reads them."""
        needs(fmt, "writes_back")
        target = fmt.write(tmp_path, WRITE, WRITE_ROWS)
        x = fmt.open(target, mode="r+")
        view = x.as_ndarray("r+")
        assert view.flags.writeable
        view[300:310] = -1  # chunk 1
        view[4000] += 5  # the last chunk
        assert view[2000, 3] == WRITE[2000, 3]  # read, never written
        expected = WRITE.copy()
        expected[300:310] = -1
        expected[4000] += 5
        if fmt.paged:
            assert x.paging_stats()[0]["dirty_units"] == 2
            assert x.flush() == 4  # the two units, two chunks each
            assert x.flush() == 0
            assert x.paging_stats()[0]["failures"] == 0
        else:
            assert x.flush() == 0  # a mapped file: the writes are in its pages already
        assert np.array_equal(fmt.read(target), expected)
        view[5] = 9  # written back when the last view goes
        del view
        expected[5] = 9
        assert np.array_equal(fmt.open(target)[...], expected)
        view = x.as_ndarray("r+")
        view[7] = 1
        x.close()  # close writes back too
        expected[7] = 1
        assert np.array_equal(fmt.open(target)[...], expected)
        assert np.array_equal(fmt.read(target), expected)

    def test_writes_through_indexing_reach_the_store(self, fmt: Format, store: str) -> None:
        x = fmt.open(store, mode="r+")
        x[10:20] = 0.5
        x.close()
        expected = READ.copy()
        expected[10:20] = 0.5
        assert np.array_equal(fmt.read(store), expected)

    # ---- what is refused ----

    def test_read_only_and_closed_arrays_refuse(self, fmt: Format, store: str) -> None:
        x = fmt.open(store)
        assert x.readonly
        with pytest.raises(oc.ReadOnlyError):
            x[0] = 1.0
        with pytest.raises(oc.ReadOnlyError):
            x.as_ndarray("r+")
        with pytest.raises(ValueError, match="mode must be 'r' or 'r\\+'"):
            x.as_ndarray("w")
        x.close()
        x.close()  # closing twice does nothing
        assert x.closed
        for use in (lambda: x[0], lambda: x.as_ndarray(), lambda: np.asarray(x)):
            with pytest.raises(oc.ClosedError, match="open it again"):
                use()
        if not fmt.writes_back:
            needs_pages(fmt)
            with pytest.raises(NotImplementedError):
                fmt.open(store, mode="r+").as_ndarray("r+")

    # ---- capabilities ----

    def test_the_capability_flags_say_what_the_store_does(self, fmt: Format, store: str) -> None:
        """A store's flags (``Store.supports_*``, ``memory_mapped``) are what callers read
        instead of asking for its class: each one agrees with what the format then does."""
        x = fmt.open(store, mode="r+")
        flags = x._store
        assert flags.supports_paging == fmt.paged
        assert flags.memory_mapped == (not fmt.paged)
        assert x.location == ("chunks" if fmt.paged else "mmap")
        rows = READ[:3]
        if flags.supports_appends:
            x.append(rows)
            assert x.shape[0] == len(READ) + 3
            assert np.array_equal(fmt.read(store)[-3:], rows)
        else:
            with pytest.raises(TypeError, match="does not grow"):
                x.append(rows)
            assert x.shape == READ.shape
        # A partial read of a chunk gives what a whole one gives, where it is offered or not.
        first = (0,) * READ.ndim
        assert np.array_equal(flags.read_piece(first, (slice(3, 9),)), READ[3:9])
        x.close()

    # ---- pickling ----

    def test_pickling_reopens_the_same_store_in_its_mode(self, fmt: Format, store: str) -> None:
        original = fmt.open(store)
        reader = round_trip(original)
        assert reader.readonly
        assert reader.location == ("mmap" if not fmt.paged else original.location)
        assert np.array_equal(reader[...], READ)
        assert np.array_equal(reader[130:170:3], READ[130:170:3])
        with pytest.raises(oc.ReadOnlyError):
            reader[0] = 1.0
        original.close()
        reader.close()  # HDF5 opens no file for writing that is open for reading
        x = fmt.open(store, mode="r+")
        writer = round_trip(x)
        assert not writer.readonly
        writer[:100] = -1.0  # "r+" stays writable, and writes reach the same store
        writer.close()
        assert np.array_equal(x[:100], np.full((100, READ.shape[1]), -1.0))
        x.close()
