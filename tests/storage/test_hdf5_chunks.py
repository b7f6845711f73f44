"""What only HDF5 has, under chunk-backed ndarrays: every filter chain (none, gzip, shuffle,
fletcher32) and type read back as h5py reads them, filter masks, chunks that HDF5 moves in the
file when they are rewritten (and the pages that follow them), dirty chunks that only h5py
writes back, and the native decoder itself (``_native.h5_decode``).  What every format
promises (reads, views, threads, forks, budgets, write-back, damage) is the store contract,
``test_store_contract.py``.

Everything that pages needs userfaultfd with kernel-mode faults and is skipped without it, but
for the decoder."""

from __future__ import annotations

import ctypes
import threading
import time
import zlib
from pathlib import Path

import h5py
import numcodecs
import numpy as np
import pytest

import oocarray as oc
from oocarray import _native
from oocarray._storage._hdf5 import _hdf5_library
from oocarray._storage._paged._arrays import paging_available
from testkit.children import run_ok, run_python
from testkit.stores import H5_CHAINS, flip_hdf5_chunk, read_hdf5, sample

needs_paging = pytest.mark.skipif(
    not paging_available()[0], reason=f"no chunk-backed ndarrays here: {paging_available()[1]}"
)
CHAINS = H5_CHAINS
DTYPES = ["i1", "<u2", "<f4", "<f8", "<c16", ">i4", ">f8", "bool"]


def _h5(path: Path, name: str, data: np.ndarray, rows: int, **kw: object) -> Path:
    with h5py.File(path, "a") as f:
        f.create_dataset(name, data=data, chunks=(rows, *data.shape[1:]), **kw)  # type: ignore[arg-type]
    return path


def _places(path: Path, name: str) -> dict[int, int]:
    out: dict[int, int] = {}
    with h5py.File(path, "r") as f:
        f[name].id.chunk_iter(lambda i: out.__setitem__(i.chunk_offset[0], i.byte_offset))
    return out


def _drop_all(x: oc.ChunkedArray) -> None:
    """Drop every resident chunk of x's chunk-backed arrays (a fill whose pages were just
    installed is finished on the worker a moment later: until then it cannot be dropped).
    The 60 s deadline is a hang guard only: under load that moment can be long."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        for stats, pages in zip(x.paging_stats(), list(x._paged._pages), strict=True):  # type: ignore[union-attr]
            if stats["resident_bytes"]:
                pages.trim()
        if not any(stats["resident_bytes"] for stats in x.paging_stats()):
            return
        time.sleep(0.001)
    raise AssertionError(f"chunks stay resident: {x.paging_stats()}")


# ---- reads ----


@needs_paging
@pytest.mark.parametrize("chain", list(CHAINS))
def test_every_filter_chain_reads_as_h5py_does(tmp_path: Path, chain: str) -> None:
    path = tmp_path / "f.h5"
    shapes = [(1000,), (301, 7), (45, 6, 5)]  # the last chunk of each is partial
    for dtype in DTYPES:
        for n, shape in enumerate(shapes):
            _h5(path, f"{dtype}-{n}", sample(shape, dtype, n), 64 if n < 2 else 4, **CHAINS[chain])
    for dtype in DTYPES:
        for n, shape in enumerate(shapes):
            x = oc.open(path, dataset=f"{dtype}-{n}")
            view = x.as_ndarray()
            expected = read_hdf5(path, f"{dtype}-{n}")
            assert type(view) is np.ndarray and not view.flags.writeable
            assert view.dtype == expected.dtype == np.dtype(dtype), (chain, dtype)
            assert np.array_equal(view, expected), (chain, dtype, shape)
            assert np.array_equal(view[::-1], expected[::-1]), (chain, dtype, shape)
            assert np.array_equal(view[3::7], expected[3::7]), (chain, dtype, shape)
            assert x.paging_stats()[0]["failures"] == 0
            x.close()


def _skip_filter(path: Path) -> None:
    """Chunks whose filter mask skips deflate (written raw), and a dataset whose partial edge
    chunk is stored unfiltered (H5D_CHUNK_DONT_FILTER_PARTIAL_CHUNKS), which only the dataset's
    creation properties tell."""
    data = np.arange(130 * 6, dtype="<f4").reshape(130, 6)
    with h5py.File(path, "w") as f:
        d = f.create_dataset(
            "masked", shape=(128, 6), dtype="<f4", chunks=(64, 6), compression="gzip"
        )
        d.id.write_direct_chunk((0, 0), data[:64].tobytes(), filter_mask=1)
        d.id.write_direct_chunk((64, 0), zlib.compress(data[64:128].tobytes()), filter_mask=0)
        lib = _hdf5_library()
        if lib is None:
            return
        dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
        dcpl.set_chunk((64, 6))
        dcpl.set_shuffle()
        dcpl.set_deflate(4)
        assert lib.H5Pset_chunk_opts(ctypes.c_int64(dcpl.id), ctypes.c_uint(2)) >= 0
        space = h5py.h5s.create_simple((130, 6))
        dsid = h5py.h5d.create(f.id, b"edge", h5py.h5t.py_create(np.dtype("<f4")), space, dcpl=dcpl)
        h5py.Dataset(dsid)[...] = data


@needs_paging
def test_filter_masks_and_unfiltered_edge_chunks(tmp_path: Path) -> None:
    path = tmp_path / "f.h5"
    _skip_filter(path)
    masked = oc.open(path, dataset="masked")
    assert np.array_equal(masked.as_ndarray(), read_hdf5(path, "masked"))
    if _hdf5_library() is None:
        pytest.skip("h5py's libhdf5 cannot be found: no H5Pset_chunk_opts")
    edge = oc.open(path, dataset="edge")
    with h5py.File(path, "r") as f:
        last = f["edge"].id.get_chunk_info(2)
    assert last.filter_mask == 0 and last.size == 64 * 6 * 4  # unfiltered, and nothing says so
    assert np.array_equal(edge.as_ndarray(), read_hdf5(path, "edge"))


# Eager reads (x[...]) of chunked datasets opened read-only go through the chunk reader and the
# native decoders too; opened "r+", h5py reads them (HDF5's chunk cache may hold writes).


@pytest.mark.parametrize("chain", list(CHAINS))
def test_eager_reads_decode_natively_as_h5py_reads(tmp_path: Path, chain: str) -> None:
    """Every filter chain, with chunk grids along every axis and partial edge chunks: indexing
    gives what h5py gives, decoded by the native decoders (no h5py read)."""
    path = tmp_path / "f.h5"
    cases = [((1000,), (64,)), ((37, 23), (8, 5)), ((45, 6, 5), (4, 4, 2))]
    for dtype in DTYPES:
        for n, (shape, chunks) in enumerate(cases):
            with h5py.File(path, "a") as f:
                f.create_dataset(f"{dtype}-{n}", data=sample(shape, dtype, n), chunks=chunks,
                                 **CHAINS[chain])  # type: ignore[arg-type]  # fmt: skip
    for dtype in DTYPES:
        for n, (shape, _) in enumerate(cases):
            x = oc.open(path, dataset=f"{dtype}-{n}")
            assert x._store._native_chunks() is not None, (chain, dtype)  # type: ignore[attr-defined]
            expected = read_hdf5(path, f"{dtype}-{n}")
            assert np.array_equal(x[...], expected), (chain, dtype, shape)
            assert np.array_equal(x[::-3], expected[::-3]), (chain, dtype, shape)
            key = (slice(5, None, 2), *([slice(1, -1)] * (len(shape) - 1)))
            assert np.array_equal(x[key], expected[key]), (chain, dtype, shape)
            x.close()


def test_eager_reads_follow_filter_masks_and_unfiltered_edge_chunks(tmp_path: Path) -> None:
    path = tmp_path / "f.h5"
    _skip_filter(path)
    masked = oc.open(path, dataset="masked")
    assert masked._store._native_chunks() is not None  # type: ignore[attr-defined]
    assert np.array_equal(masked[...], read_hdf5(path, "masked"))
    if _hdf5_library() is None:
        pytest.skip("h5py's libhdf5 cannot be found: no H5Pset_chunk_opts")
    edge = oc.open(path, dataset="edge")
    assert edge._store._native_chunks() is not None  # type: ignore[attr-defined]
    assert np.array_equal(edge[...], read_hdf5(path, "edge"))
    assert np.array_equal(edge[120:], read_hdf5(path, "edge")[120:])  # the unfiltered chunk


def test_eager_reads_see_writes_of_this_process_through_another_store(tmp_path: Path) -> None:
    """A dataset open read-only and for writing in one process (HDF5 shares the file): writes
    through the writer, unflushed before the reader is made and moving chunks after it (gzip
    chunks that grow), read back through the reader's native reads."""
    path = tmp_path / "f.h5"
    data = np.arange(512 * 8, dtype="<f8").reshape(512, 8)
    with h5py.File(path, "w") as f:
        f.create_dataset("x", data=data, chunks=(64, 8), compression="gzip")
    writer = oc.open(path, mode="r+")
    writer[64:128] = 7.0  # in HDF5's cache when the reader comes
    reader = oc.open(path)
    assert reader._store._native_chunks() is not None  # type: ignore[attr-defined]
    data[64:128] = 7.0
    assert np.array_equal(reader[...], data)
    before = _places(path, "x")
    noise = np.random.default_rng(3).standard_normal((128, 8)) * 1e6  # compresses far worse
    writer[:128] = noise
    data[:128] = noise
    assert np.array_equal(reader[:200], data[:200])
    assert np.array_equal(reader[...], data)
    writer.close()
    assert _places(path, "x") != before  # the chunks did move
    assert np.array_equal(reader[...], data)
    reader.close()


def test_datasets_open_for_writing_or_with_other_filters_are_read_by_h5py(tmp_path: Path) -> None:
    path = tmp_path / "f.h5"
    data = sample((300, 8), "<f4", 3)
    with h5py.File(path, "w") as f:
        f.create_dataset("gzip", data=data, chunks=(64, 8), compression="gzip")
        f.create_dataset("lzf", data=data, chunks=(64, 8), compression="lzf")
    writable = oc.open(path, mode="r+", dataset="gzip")
    assert writable._store._native_chunks() is None  # type: ignore[attr-defined]
    writable[:10] = 7.0  # in HDF5's chunk cache: only h5py sees it before a flush
    assert np.array_equal(writable[:12], np.concatenate([np.full((10, 8), 7.0), data[10:12]]))
    writable.close()
    lzf = oc.open(path, dataset="lzf")
    assert lzf._store._native_chunks() is None  # type: ignore[attr-defined]
    assert np.array_equal(lzf[...], data)


@needs_paging
def test_hdf5_native_complex_type(tmp_path: Path) -> None:
    if not hasattr(h5py.h5t, "COMPLEX_IEEE_F64LE"):
        pytest.skip("this HDF5 has no complex type of its own")
    values = (np.arange(200) + 1j * np.arange(200)[::-1]).reshape(100, 2)
    with h5py.File(tmp_path / "c.h5", "w") as f:
        dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
        dcpl.set_chunk((16, 2))
        space = h5py.h5s.create_simple((100, 2))
        tid = h5py.h5t.COMPLEX_IEEE_F64LE
        h5py.Dataset(h5py.h5d.create(f.id, b"c", tid, space, dcpl=dcpl))[...] = values
    view = oc.open(tmp_path / "c.h5").as_ndarray()
    assert np.array_equal(view, values)


@needs_paging
def test_written_chunks_move_and_are_read_again_from_their_new_place(tmp_path: Path) -> None:
    data = np.zeros((4096, 32), dtype="<f8") + np.arange(32)  # 32 KiB chunks, compress well
    path = _h5(tmp_path / "w.h5", "a", data, 128, compression="gzip", shuffle=True, fletcher32=True)
    before = _places(path, "a")
    x = oc.open(path, mode="r+")
    view = x.as_ndarray("r+")
    reader = x.as_ndarray("r")
    assert reader[200, 3] == 3  # resident in the reader
    noise = np.random.default_rng(3).standard_normal((100, 32))
    view[200:300] = noise  # chunks 1 and 2 grow: HDF5 stores them elsewhere
    expected = data.copy()
    expected[200:300] = noise
    assert x.paging_stats()[0]["dirty_units"] == 2
    assert x.flush() == 4  # two 64 KiB units of two chunks each
    after = _places(path, "a")
    assert {k for k in before if before[k] != after[k]} >= {128, 256}
    for stats in x.paging_stats():
        assert stats["failures"] == 0
    _drop_all(x)  # every chunk is read again from the file
    assert np.array_equal(view, expected) and np.array_equal(reader, expected)
    x[1000:1100] = 7.5  # a write through the array moves chunks too
    expected[1000:1100] = 7.5
    _drop_all(x)
    assert np.array_equal(reader, expected) and np.array_equal(view, expected)
    view[4095] = -1  # the last chunk, written back when the array is closed
    expected[4095] = -1
    x.close()
    assert np.array_equal(read_hdf5(path, "a"), expected)
    with pytest.raises(oc.ReadOnlyError):
        oc.open(path).as_ndarray("r+")


@needs_paging
def test_dropped_units_refill_under_a_budget_while_written_back(tmp_path: Path) -> None:
    data = sample((4096, 64), "<f8")  # 64 KiB chunks, 2 MiB
    path = _h5(tmp_path / "w.h5", "a", data, 128, compression="gzip", compression_opts=1)
    x = oc.open(path, mode="r+")
    expected = data.copy()
    with oc.Manager(max_bytes="512K"):
        view = x.as_ndarray("r+")
        for i in range(0, 4096, 256):
            view[i : i + 3] += 1.0
            expected[i : i + 3] += 1.0
            if i % 1024 == 768:
                x.flush()  # dirty units are not dropped until written back
        x.flush()
        assert x.paging_stats()[0]["evictions"] > 0
        assert np.array_equal(view, expected)
        del view
    x.close()
    assert np.array_equal(read_hdf5(path, "a"), expected)


def _version(k: int, shape: tuple[int, int]) -> np.ndarray:
    """Chunk contents that name their version k; odd versions do not compress (they move)."""
    block = np.full(shape, float(k))
    if k % 2:
        block += np.random.default_rng(k).random(shape) * 0.5
    return block


@needs_paging
@pytest.mark.parametrize("chain", ["none", "shuffle+gzip+fletcher32"])
def test_reads_while_the_dataset_is_written_see_the_latest_chunks(
    tmp_path: Path, chain: str
) -> None:
    rows, cols, n = 64, 64, 32  # 32 KiB chunks
    path = _h5(tmp_path / "f.h5", "a", np.zeros((rows * n, cols)), rows, **CHAINS[chain])
    x = oc.open(path, mode="r+")
    view = x.as_ndarray()
    latest = [0] * n  # the version each chunk has once its write returned
    done = threading.Event()
    bad: list[tuple[int, int, int]] = []

    def read() -> None:
        while not done.is_set():
            floor = list(latest)
            _drop_all(x)
            got = np.array(view).reshape(n, rows, cols)
            for c in range(n):
                k = int(got[c, 0, 0])
                if k < floor[c] or not np.array_equal(got[c], _version(k, (rows, cols))):
                    bad.append((c, k, floor[c]))

    reader = threading.Thread(target=read)
    reader.start()
    rng = np.random.default_rng(0)
    try:
        for k in range(1, 300):
            c = int(rng.integers(n))
            x[c * rows : (c + 1) * rows] = _version(k, (rows, cols))
            latest[c] = k
    finally:
        done.set()
        reader.join()
    assert not bad, bad[:5]
    assert x.paging_stats()[0]["failures"] == 0


@needs_paging
def test_fills_during_a_move_copy_the_new_bytes(tmp_path: Path) -> None:
    data = sample((512, 16), "<i8")
    path = _h5(tmp_path / "f.h5", "a", data, 64, compression="gzip")
    x = oc.open(path)
    view = x.as_ndarray()
    (pages,) = list(x._paged._pages)  # type: ignore[union-attr]
    new = np.full((64, 16), 99, dtype="<i8")
    move = pages.move_begin(2, new)  # as a write does before HDF5 stores chunk 2
    assert np.array_equal(view[128:192], new)  # filled from the move, not the file
    assert np.array_equal(view[:128], data[:128])
    pages.move_end(move, None)  # stored where it was: the file is read again
    _drop_all(x)
    assert np.array_equal(view, data)
    with pytest.raises(ValueError, match="no move"):
        pages.move_end(move, None)


@needs_paging
def test_dirty_hdf5_units_stay_under_budget_pressure_until_flush(tmp_path: Path) -> None:
    """HDF5 has no native writer: under budget pressure an "r+" view's dirty units are neither
    written back nor dropped (it grows past the budget until flush()), while the clean units
    of another array on the same manager still go and come back."""
    data = sample((4096, 64), "<f8")  # 64 KiB chunks, 2 MiB
    path = _h5(tmp_path / "w.h5", "a", data, 128, compression="gzip", compression_opts=1)
    other = _h5(tmp_path / "r.h5", "b", data, 128, shuffle=True)
    x, y = oc.open(path, mode="r+"), oc.open(other)
    expected = data.copy()
    with oc.Manager(max_bytes="512K"):
        view = x.as_ndarray("r+")
        view[:2048] += 1.0  # 16 units, 1 MiB dirty: twice the budget
        expected[:2048] += 1.0
        stats = x.paging_stats()[0]
        assert stats["dirty_units"] == 16 and stats["resident_bytes"] >= 1 << 20
        assert stats["writebacks"] == 0 and stats["writeback_failures"] == 0
        assert np.array_equal(read_hdf5(path, "a"), data)  # nothing reached the file yet
        reader = y.as_ndarray()
        assert np.array_equal(reader, data)
        assert y.paging_stats()[0]["evictions"] > 0  # passed over the dirty view to the reader
        assert y.paging_stats()[0]["resident_bytes"] <= 512 << 10
        assert x.paging_stats()[0]["dirty_units"] == 16
        assert x.flush() == 16  # a chunk a unit
        assert np.array_equal(read_hdf5(path, "a"), expected)
        assert np.array_equal(view[::7], expected[::7])  # clean now: dropped and refilled
        assert x.paging_stats()[0]["evictions"] > 0
        del view, reader
    x.close()
    assert np.array_equal(read_hdf5(path, "a"), expected)


@needs_paging
def test_closing_the_manager_writes_an_hdf5_view_back(tmp_path: Path) -> None:
    data = sample((1024, 64), "<f8")
    path = _h5(tmp_path / "w.h5", "a", data, 128, compression="gzip", shuffle=True)
    x = oc.open(path, mode="r+")
    expected = data.copy()
    with oc.Manager(max_bytes=4 << 20):
        view = x.as_ndarray("r+")
        view[::3] = -1.5
        expected[::3] = -1.5
        assert x.paging_stats()[0]["dirty_units"] > 0
    # the manager is closed, the view still alive: its chunks are in the file, through h5py
    assert x.paging_stats()[0]["dirty_units"] == 0
    assert np.array_equal(read_hdf5(path, "a"), expected)
    view[0] = 7
    expected[0] = 7
    assert x.flush() == 1
    x.close()
    assert np.array_equal(read_hdf5(path, "a"), expected)


@needs_paging
def test_each_array_is_written_back_by_its_own_writer(tmp_path: Path) -> None:
    """zarr "r+" arrays are written back natively; HDF5 ones only through their store."""
    z = oc.create(tmp_path / "z.zarr", (256, 64), "float64", chunks=(128, 64), codec="zstd")
    z[...] = 1.0
    path = _h5(tmp_path / "w.h5", "a", np.ones((256, 64)), 128, compression="gzip")
    h = oc.open(path, mode="r+")
    zarr_view, h5_view = z.as_ndarray("r+"), h.as_ndarray("r+")
    (zarr_pages,) = list(z._paged._pages)  # type: ignore[union-attr]
    (h5_pages,) = list(h._paged._pages)  # type: ignore[union-attr]
    assert zarr_pages.native_writeback and not h5_pages.native_writeback
    zarr_view[0] = h5_view[0] = 2.0
    with pytest.raises(ValueError, match="written back natively"):
        zarr_pages.begin_writeback(0)
    with pytest.raises(ValueError, match="no native writer"):
        h5_pages.write_back(0)
    assert h5_pages.begin_writeback(0) is True  # clean, write-protected, held
    with pytest.raises(OSError, match="busy"):
        h5_pages.begin_writeback(0)  # one writer at a time
    h5_pages.abort_writeback(0)  # dirty again
    assert h5_pages.dirty_units() == [0]
    assert z.flush() == 1 and h.flush() == 1
    assert not oc.open(path).as_ndarray().flags.writeable
    assert np.array_equal(oc.open(tmp_path / "z.zarr")[:1], np.full((1, 64), 2.0))
    assert np.array_equal(read_hdf5(path, "a")[:1], np.full((1, 64), 2.0))


# ---- contiguous datasets ----


def test_contiguous_datasets_are_memory_mapped(tmp_path: Path) -> None:
    values = np.arange(600, dtype=">i8").reshape(200, 3)
    with h5py.File(tmp_path / "f.h5", "w") as f:
        f["plain"] = values
    x = oc.open(tmp_path / "f.h5", mode="r+")
    view = x.as_ndarray("r+")
    assert oc.location(view) == "mmap" and view.dtype == np.dtype(">i8")
    view[5] = -1
    x.close()
    assert (read_hdf5(tmp_path / "f.h5", "plain")[5] == -1).all()


# ---- damage ----


@needs_paging
@pytest.mark.parametrize(
    ("chain", "how", "reason"),
    [
        ("gzip4", "flip", "inflate"),
        ("fletcher32", "flip", "fletcher32"),
        ("none", "truncate", "the file ends"),
        ("gzip4", "truncate", "the file ends"),
    ],
)
def test_a_damaged_chunk_is_corrupt_chunk_error_with_a_reason(
    tmp_path: Path, chain: str, how: str, reason: str
) -> None:
    data = sample((2000, 16), "<f8")
    path = _h5(tmp_path / "f.h5", "a", data, 100, **CHAINS[chain])
    chunk = 7
    offset = flip_hdf5_chunk(path, "a", chunk) if how == "flip" else _places(path, "a")[chunk * 100]
    code = (
        "import oocarray as oc, os, sys\n"
        f"v = oc.open({str(path)!r}).as_ndarray()\n"
        "print(float(v[:100].sum()), flush=True)\n"  # chunk 0 is fine
        # HDF5 opens no truncated file: the file is cut after it is open
        + (f"os.truncate({str(path)!r}, {offset + 10})\n" if how == "truncate" else "")
        + "try:\n"
        + f"    v[{chunk} * 100 + 1].sum()\n"
        + "except oc.CorruptChunkError as error:\n"
        + "    print(error)\n"
    )
    result = run_python(code)
    assert result.returncode == 0, result.stderr
    first, message = result.stdout.strip().split("\n")
    assert first == str(float(data[:100].sum()))
    assert f"chunk {chunk}" in message and "cannot be decoded" in message
    assert reason in message


@needs_paging
def test_a_damaged_chunk_of_an_r_plus_view_raises_and_is_never_written_back(
    tmp_path: Path,
) -> None:
    """r+ over HDF5 (written back through h5py): a read or a write of a damaged chunk raises
    CorruptChunkError in the child, which then writes an intact chunk back; the damaged one
    stays as it was in the file."""
    data = sample((2048, 16), "<f8")
    path = _h5(tmp_path / "f.h5", "a", data, 256, **CHAINS["shuffle+gzip+fletcher32"])  # 32 KiB
    flip_hdf5_chunk(path, "a", 7)
    code = f"""
import numpy as np, oocarray as oc
x = oc.open({str(path)!r}, mode="r+")
v = x.as_ndarray("r+")
for touch in (lambda: v[7 * 256 + 1].sum(), lambda: v[7 * 256 + 1 : 7 * 256 + 2].fill(3.0)):
    try:
        touch()
        raise AssertionError("no error")
    except oc.CorruptChunkError as error:
        assert "chunk 7" in str(error) and "fletcher32" in str(error), error
v[5] = -1.0
x.flush()
x.close()
print("CHILD OK", flush=True)
"""
    run_ok(code)
    with h5py.File(path, "r") as f:
        assert (f["a"][5] == -1.0).all()
        assert np.array_equal(f["a"][:5], data[:5]) and np.array_equal(f["a"][6:256], data[6:256])
        with pytest.raises(OSError, match=r"(?i)fletcher32|checksum|filter"):
            f["a"][7 * 256 + 1]  # still damaged: never written over


# ---- the decoder ----


def _codec(steps: list[int], elsize: int) -> int:
    codec = _native.CODEC_H5 | elsize << 24
    for i, step in enumerate(steps):
        codec |= step << (8 + 4 * i)
    return codec


@pytest.mark.parametrize("n", [1, 2, 3, 7, 720, 721, 1441, 100_003])
def test_fletcher32_is_hdf5s(n: int) -> None:
    payload = np.random.default_rng(n).integers(0, 256, n, dtype=np.uint8).tobytes()
    stored = numcodecs.Fletcher32().encode(payload)  # numcodecs ports HDF5's checksum
    codec = _codec([_native.H5_FLETCHER32], 1)
    assert _native.h5_decode(codec, 0, stored, n, 0, n) == payload
    damaged = bytearray(stored)
    damaged[n // 2] ^= 1
    with pytest.raises(ValueError, match="fletcher32"):
        _native.h5_decode(codec, 0, bytes(damaged), n, 0, n)


def test_the_filter_mask_skips_steps() -> None:
    payload = np.arange(100, dtype="<u4").tobytes()
    codec = _codec([_native.H5_SHUFFLE, _native.H5_DEFLATE], 4)
    shuffled = np.frombuffer(payload, np.uint8).reshape(-1, 4).T.tobytes()
    assert _native.h5_decode(codec, 0, zlib.compress(shuffled), 400, 0, 400) == payload
    assert _native.h5_decode(codec, 2, shuffled, 400, 0, 400) == payload  # deflate skipped
    assert _native.h5_decode(codec, 3, payload, 400, 10, 20) == payload[10:30]  # both
    with pytest.raises(ValueError, match="inflate"):
        _native.h5_decode(codec, 0, zlib.compress(shuffled)[:-8], 400, 0, 400)
    with pytest.raises(ValueError, match="bytes stored"):
        _native.h5_decode(codec, 3, payload[:-1], 400, 0, 400)
