"""Chunked arrays: formats, indexing, writes, zero copy, bad input and damaged data."""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path

import h5py
import numcodecs
import numpy as np
import pytest
import zarr
from hypothesis import given, settings
from hypothesis import strategies as st

import oocarray as oc

SHAPE = (37, 11, 5)
CHUNKS = (8, 4, 5)


def reference() -> np.ndarray:
    return np.arange(np.prod(SHAPE), dtype=np.float32).reshape(SHAPE)


@pytest.fixture
def zarr_array(tmp_path: Path) -> oc.ChunkedArray:
    x = oc.create(tmp_path / "a.zarr", SHAPE, np.float32, chunks=CHUNKS)
    x[...] = reference()
    return x


KEYS = [
    0,
    -1,
    (5, 3, 2),
    (-37, -11, -5),
    slice(None),
    slice(3, 30, 7),
    slice(None, None, -3),
    (slice(30, 2, -4), 2),
    (Ellipsis, 1),
    (1, Ellipsis),
    (slice(None), [10, 0, 3, 3, -1]),
    ([36, 0, 8, 8], slice(1, 3)),
    (slice(None), slice(None), np.array([True, False, True, False, True])),
    (np.arange(37) % 3 == 0,),
    (slice(5, 5),),
    (slice(100, 200),),
    (),
]


@pytest.mark.parametrize("key", KEYS, ids=[repr(k) for k in KEYS])
def test_reads_match_numpy(zarr_array: oc.ChunkedArray, key: object) -> None:
    expected = reference()[key]  # type: ignore[index]
    got = zarr_array[key]
    assert isinstance(got, np.ndarray)
    assert got.shape == expected.shape
    assert np.array_equal(got, expected)


@settings(max_examples=60, deadline=None)
@given(
    data=st.data(),
    shape=st.lists(st.integers(1, 17), min_size=1, max_size=3),
    chunk_seed=st.lists(st.integers(1, 9), min_size=3, max_size=3),
)
def test_random_reads_and_writes_match_a_numpy_model(
    tmp_path_factory: pytest.TempPathFactory,
    data: st.DataObject,
    shape: list[int],
    chunk_seed: list[int],
) -> None:
    chunks = tuple(min(c, s) for c, s in zip(chunk_seed, shape, strict=False))
    model = np.arange(np.prod(shape), dtype=np.int32).reshape(shape)
    x = oc.create(tmp_path_factory.mktemp("h") / "x.zarr", tuple(shape), np.int32, chunks=chunks)
    x[...] = model

    def axis_key(size: int) -> st.SearchStrategy[object]:
        return st.one_of(
            st.integers(-size, size - 1),
            st.builds(
                slice,
                st.none() | st.integers(-size - 2, size + 2),
                st.none() | st.integers(-size - 2, size + 2),
                st.none() | st.integers(-4, 4).filter(lambda v: v != 0),
            ),
        )

    for _ in range(3):
        key = tuple(data.draw(axis_key(s)) for s in shape)
        if data.draw(st.booleans()):
            axis = data.draw(st.integers(0, len(shape) - 1))
            indices = data.draw(st.lists(st.integers(0, shape[axis] - 1), max_size=6))
            key = (*key[:axis], np.array(indices, dtype=np.intp), *key[axis + 1 :])
        assert np.array_equal(x[key], model[key])
        value = data.draw(st.integers(-1000, 1000))
        x[key] = value
        model[key] = value
        assert np.array_equal(x[...], model)


def test_writes_broadcast_and_aligned_writes_never_read(tmp_path: Path) -> None:
    x = oc.create(tmp_path / "w.zarr", (16, 8), np.int64, chunks=(4, 8))
    before = x.chunk_reads
    x[4:12] = np.arange(8)  # two whole chunks, a row broadcast over them
    assert x.chunk_reads == before, "chunk-aligned writes read nothing"
    assert x.chunk_writes == 2
    x[13, 2:5] = 7  # partial chunk: read, modify, write
    assert x.chunk_reads == before + 1
    expected = np.zeros((16, 8), np.int64)
    expected[4:12] = np.arange(8)
    expected[13, 2:5] = 7
    assert np.array_equal(x[:], expected)
    x[-1:] = np.full((1, 8), 3)  # the last (edge) chunk's valid part
    expected[-1:] = 3
    assert np.array_equal(x[:], expected)
    with pytest.raises(ValueError, match="shape"):
        x[0:2] = np.ones((3, 8))


def test_edge_chunks_and_fill(tmp_path: Path) -> None:
    x = oc.create(tmp_path / "e.zarr", (10, 3), np.float64, chunks=(4, 2))
    assert np.array_equal(x[:], np.zeros((10, 3)))  # never-written chunks hold the fill value
    x[9, 2] = 5.0
    assert x[9, 2] == 5.0
    assert x[:].sum() == 5.0


def test_properties_repr_and_html(zarr_array: oc.ChunkedArray) -> None:
    x = zarr_array
    assert (x.shape, x.chunks, x.ndim, x.size, len(x)) == (SHAPE, CHUNKS, 3, 37 * 11 * 5, 37)
    assert x.dtype == np.float32
    assert x.nbytes == 37 * 11 * 5 * 4
    assert x.codec == "zstd+crc32c"
    assert x.format == "zarr"
    assert 0 < x.stored_bytes() < 10 * x.nbytes
    text = repr(x)
    assert "shape=(37, 11, 5)" in text
    assert "codec=zstd" in text
    assert "on disk" in text
    page = x._repr_html_()
    assert "<table>" in page
    assert "logical" in page
    assert "on disk" in page
    assert np.array_equal(np.asarray(x), reference())


def test_reads_are_allocated_in_the_active_manager(zarr_array: oc.ChunkedArray) -> None:
    with oc.Manager("reader") as m:
        part = zarr_array[3:9]
        assert oc.owner(part) is m
        assert m.stats().current_bytes >= part.nbytes
        whole = np.asarray(zarr_array)
        assert oc.owner(whole) is m


def test_reads_obey_budgets(zarr_array: oc.ChunkedArray) -> None:
    with oc.Manager("tight", max_bytes=1000, spill="fail"), pytest.raises(oc.MemoryBudgetError):
        zarr_array[...]


@pytest.mark.parametrize("codec", ["zstd", "lz4", "blosc", "gzip", "none"])
def test_codecs_round_trip(tmp_path: Path, codec: str) -> None:
    data = np.random.default_rng(1).standard_normal((50, 20))
    x = oc.create(tmp_path / f"{codec}.zarr", data.shape, data.dtype, chunks=(16, 8), codec=codec)
    x[...] = data
    y = oc.open(tmp_path / f"{codec}.zarr")
    assert y.readonly
    assert np.array_equal(y[...], data)


def test_default_chunks_are_a_few_mib(tmp_path: Path) -> None:
    x = oc.create(tmp_path / "big.zarr", (10**7, 64), np.float32)
    assert x.chunks[1] == 64
    assert 1 << 20 <= np.prod(x.chunks) * 4 <= 8 << 20


def test_npy_is_memory_mapped_and_writable(tmp_path: Path) -> None:
    path = tmp_path / "a.npy"
    np.save(path, reference())
    x = oc.open(path)
    assert x.location == "mmap"
    view = x.as_ndarray()  # the explicit zero-copy view
    assert oc.location(view) == "mmap"
    assert not view.flags.writeable
    assert np.array_equal(x[3:7, ::2], reference()[3:7, ::2])
    assert np.array_equal(x[[1, 0], 2], reference()[[1, 0], 2])
    with pytest.raises(oc.ReadOnlyError):
        x[0] = 1
    w = oc.open(path, mode="r+")
    w[0, 0, 0] = -5
    w.close()
    assert np.load(path)[0, 0, 0] == -5


def test_hdf5_contiguous_is_memory_mapped_and_chunked_is_read(tmp_path: Path) -> None:
    path = tmp_path / "d.h5"
    with h5py.File(path, "w") as f:
        f["plain"] = reference()
        f.create_dataset("packed", data=reference(), chunks=(8, 11, 5), compression="gzip")
    plain = oc.open(path, dataset="plain")
    assert plain.location == "mmap"
    assert oc.location(plain.as_ndarray()) == "mmap"
    packed = oc.open(path, dataset="packed")
    assert packed.location == "chunks"
    assert packed.codec == "gzip"
    assert packed.chunks == (8, 11, 5)
    for key in KEYS[:12]:
        assert np.array_equal(plain[key], reference()[key])  # type: ignore[index]
        assert np.array_equal(packed[key], reference()[key])  # type: ignore[index]
    packed.close()
    plain.close()  # HDF5 allows a file open read-write only when no read-only handle is left
    writable = oc.open(path, mode="r+", dataset="packed")
    writable[0, 0, :] = 9
    writable.close()
    with h5py.File(path) as f:
        assert (f["packed"][0, 0, :] == 9).all()
    with pytest.raises(ValueError, match="choose one with dataset"):
        oc.open(path)
    with pytest.raises(oc.StoreNotFoundError, match="no dataset 'missing'"):
        oc.open(path, dataset="missing")


def test_temp_arrays_belong_to_the_active_manager(tmp_path: Path) -> None:
    oc.configure(spill_dir=tmp_path)
    try:
        with oc.Manager("owner"):
            t = oc.temp((100, 10), np.int16)
            t[...] = 3
            path = t.path
            assert Path(path).is_dir()
            assert str(tmp_path) in path
            assert t[...].sum() == 3000
            del t
            assert not Path(path).exists(), "deleted with its last reference"
    finally:
        oc.configure(spill_dir=None)


def test_from_numpy_and_dask_round_trips() -> None:
    import dask.array as da

    data = np.random.default_rng(2).integers(0, 100, (40, 30))
    with oc.Manager():
        x = oc.from_numpy(data, chunks=(16, 16))
        assert x.chunks == (16, 16)
        assert np.array_equal(x[...], data)
        d = x.to_dask()
        assert d.chunksize == (16, 16)
        assert np.array_equal(d.compute(), data)
        assert int((d * 2).sum().compute()) == int(data.sum()) * 2
        y = oc.from_dask(da.from_array(data, chunks=(7, 9)) + 1)
        assert np.array_equal(y[...], data + 1)


def test_missing_paths_and_unknown_content(tmp_path: Path) -> None:
    with pytest.raises(oc.StoreNotFoundError):
        oc.open(tmp_path / "nothing.zarr")
    with pytest.raises(FileNotFoundError):
        oc.open(tmp_path / "nothing.npy")
    (tmp_path / "text.txt").write_text("hello")
    with pytest.raises(ValueError, match="not an array store"):
        oc.open(tmp_path / "text.txt")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="not a zarr array"):
        oc.open(tmp_path / "empty")


def test_read_only_and_out_of_range(zarr_array: oc.ChunkedArray) -> None:
    ro = oc.open(zarr_array.path)
    with pytest.raises(oc.ReadOnlyError, match="r\\+"):
        ro[0] = 1
    for key in (37, -38, (0, 11), (0, 0, 5), ([0, 40],), (0, 0, 0, 0)):
        with pytest.raises(IndexError):
            ro[key]
    with pytest.raises(IndexError, match="only one axis"):
        ro[[0, 1], [0, 1]]
    with pytest.raises(TypeError):
        ro["a"]
    with pytest.raises(TypeError):
        ro[None]
    with pytest.raises(ValueError, match="step"):
        ro[::0]


def test_corrupt_and_truncated_chunks_name_the_chunk_and_file(tmp_path: Path) -> None:
    x = oc.create(tmp_path / "c.zarr", (8, 8), np.float64, chunks=(4, 4))
    x[...] = 1.0
    chunk_file = tmp_path / "c.zarr" / "c" / "1" / "0"
    chunk_file.write_bytes(chunk_file.read_bytes()[:10])
    with pytest.raises(oc.CorruptChunkError) as caught:
        x[5, 1]
    assert "(1, 0)" in str(caught.value)
    assert str(chunk_file) in str(caught.value)
    assert np.array_equal(x[0:4, 0:4], np.ones((4, 4)))  # other chunks still read
    raw = oc.create(tmp_path / "r.zarr", (8, 8), np.float64, chunks=(4, 4), codec="none")
    raw[...] = 2.0
    raw_chunk = tmp_path / "r.zarr" / "c" / "0" / "1"
    raw_chunk.write_bytes(raw_chunk.read_bytes()[:7])
    with pytest.raises(oc.CorruptChunkError, match="truncated"):
        raw[0, 7]


def test_object_arrays_are_refused_unless_allowed(tmp_path: Path) -> None:
    path = tmp_path / "o.npy"
    np.save(path, np.array([{"a": 1}, None], dtype=object), allow_pickle=True)
    with pytest.raises(ValueError, match="allow_object"):
        oc.open(path)
    assert oc.open(path, allow_object=True)[0] == {"a": 1}
    with pytest.raises(ValueError, match="Python objects"):
        oc.create(tmp_path / "o.zarr", (3,), object)


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"shape": (-1, 3)}, ValueError),
        ({"shape": "big"}, TypeError),
        ({"dtype": "not-a-type"}, TypeError),
        ({"chunks": (0, 2)}, ValueError),
        ({"chunks": (2,)}, ValueError),
        ({"codec": "snappy"}, ValueError),
        ({"mode": "a"}, ValueError),
    ],
)
def test_create_rejects_bad_arguments(
    tmp_path: Path, kwargs: dict[str, object], error: type[Exception]
) -> None:
    args: dict[str, object] = {"shape": (4, 4), "dtype": "f4", **kwargs}
    with pytest.raises(error):
        oc.create(tmp_path / "bad.zarr", **args)  # type: ignore[arg-type]


def test_create_modes(tmp_path: Path) -> None:
    oc.create(tmp_path / "m.zarr", (2,), "i4")
    with pytest.raises(FileExistsError):
        oc.create(tmp_path / "m.zarr", (2,), "i4", mode="w-")
    again = oc.create(tmp_path / "m.zarr", (3,), "i4", mode="w")
    assert again.shape == (3,)
    with pytest.raises(ValueError, match="mode"):
        oc.open(tmp_path / "m.zarr", mode="w")
    with pytest.raises(TypeError):
        oc.open(42)  # type: ignore[arg-type]


def test_metadata_is_plain_zarr_v3(zarr_array: oc.ChunkedArray) -> None:
    meta = json.loads((Path(zarr_array.path) / "zarr.json").read_text())
    assert meta["zarr_format"] == 3
    assert meta["node_type"] == "array"
    assert meta["shape"] == list(SHAPE)
    assert meta["chunk_grid"]["configuration"]["chunk_shape"] == list(CHUNKS)
    assert [c["name"] for c in meta["codecs"]] == ["bytes", "zstd", "crc32c"]
    assert os.path.isfile(Path(zarr_array.path) / "c" / "4" / "2" / "0")


@pytest.mark.parametrize("codec", ["none", "zstd"])
def test_row_reads_of_row_chunked_arrays(tmp_path: Path, codec: str) -> None:
    """Arrays chunked by rows only take a shorter path for x[i] and x[i:j]; same results."""
    data = np.arange(53 * 6 * 2, dtype=np.int32).reshape(53, 6, 2)
    x = oc.create(tmp_path / "rows.zarr", data.shape, data.dtype, chunks=(8, 6, 2), codec=codec)
    x[...] = data
    y = oc.open(tmp_path / "rows.zarr")
    for key in (0, 7, 8, 52, -1, -53, np.int64(30)):
        got = y[key]
        assert got.shape == (6, 2)
        assert np.array_equal(got, data[key])
    for key in (
        slice(None),
        slice(3, 45),
        slice(8, 16),
        slice(50, 100),
        slice(40, 10),
        slice(-5, None),
        slice(0, 0),
        slice(None, None, 2),
    ):
        assert np.array_equal(y[key], data[key])
    for bad in (53, -54):
        with pytest.raises(IndexError):
            y[bad]
    with pytest.raises(TypeError):
        y[True]
    with oc.Manager("rows") as m:
        row = y[9]
        assert oc.owner(row) is m


@pytest.mark.parametrize("mode", ["r", "r+"])
@pytest.mark.parametrize("kind", ["npy", "hdf5"])
def test_memory_mapped_reads_are_independent_arrays(tmp_path: Path, mode: str, kind: str) -> None:
    if kind == "npy":
        path = tmp_path / "a.npy"
        np.save(path, reference())
    else:
        path = tmp_path / "a.h5"
        with h5py.File(path, "w") as f:
            f["x"] = reference()
    x = oc.open(path, mode=mode)
    for key in (np.s_[3:7, ::2], np.s_[1], np.s_[...], np.s_[[2, 0], 1:3]):
        got = x[key]
        assert got.flags.writeable, "a read is the caller's array, whatever the open mode"
        assert not np.shares_memory(got, x.as_ndarray())
        got[...] = -7  # never reaches the file
    x.close()
    with h5py.File(path) if kind == "hdf5" else contextlib.nullcontext() as f:
        stored = f["x"][...] if kind == "hdf5" else np.load(path)
    assert np.array_equal(stored, reference())


def test_as_ndarray_is_the_explicit_zero_copy_view(tmp_path: Path) -> None:
    path = tmp_path / "a.npy"
    np.save(path, reference())
    x = oc.open(path, mode="r+")
    view = x.as_ndarray("r+")
    view[0, 0, 0] = 42  # writes through to the file
    assert not x.as_ndarray().flags.writeable
    x.close()
    assert np.load(path)[0, 0, 0] == 42
    with pytest.raises(oc.ReadOnlyError):
        oc.open(path).as_ndarray("r+")
    with pytest.raises(ValueError, match="mode must be"):
        oc.open(path).as_ndarray("w")
    z = oc.create(tmp_path / "z.zarr", (4, 3), "float32", chunks=(2, 1))
    with pytest.raises(NotImplementedError, match="span every axis"):
        z.as_ndarray()  # row chunks are paged (tests/storage/test_store_contract.py); these not


def test_asarray_without_copy_copies_nothing_or_raises(tmp_path: Path) -> None:
    path = tmp_path / "a.npy"
    np.save(path, reference())
    x = oc.open(path)
    same = np.asarray(x, copy=False)
    assert np.shares_memory(same, x.as_ndarray())
    with pytest.raises(ValueError, match="without a copy"):
        np.asarray(x, copy=False, dtype=np.int8)
    z = oc.create(tmp_path / "z.zarr", (4, 3), "float32")
    with pytest.raises(ValueError, match="without a copy"):
        np.asarray(z, copy=False)
    assert np.asarray(z).shape == (4, 3)  # copy=None reads it


def test_a_2d_boolean_mask_error_names_its_shape(zarr_array: oc.ChunkedArray) -> None:
    mask = np.ones((2, 3), dtype=bool)
    with pytest.raises(IndexError, match=r"must be 1-d .* 2-d mask of shape \(2, 3\)"):
        zarr_array[mask]
    with pytest.raises(IndexError, match="has length 3, expected"):
        zarr_array[np.ones(3, dtype=bool)]


def test_create_and_temp_refuse_objects_without_suggesting_allow_object(tmp_path: Path) -> None:
    for make in (lambda: oc.create(tmp_path / "o.zarr", (3,), object), lambda: oc.temp((3,), "O")):
        with pytest.raises(ValueError, match="cannot store Python objects") as caught:
            make()
        assert "allow_object" not in str(caught.value)


def test_hdf5_null_dataspace_is_a_clear_error(tmp_path: Path) -> None:
    with h5py.File(tmp_path / "f.h5", "w") as f:
        f.create_dataset("nothing", data=h5py.Empty("f8"))
    with pytest.raises(ValueError, match="null dataspace"):
        oc.open(tmp_path / "f.h5", dataset="nothing")


def test_codec_shows_the_whole_filter_chain(tmp_path: Path) -> None:
    values = np.arange(100, dtype=np.int32).reshape(10, 10)
    with h5py.File(tmp_path / "f.h5", "w") as f:
        f.create_dataset("a", data=values, chunks=(5, 5), shuffle=True, fletcher32=True)
        f.create_dataset("b", data=values, chunks=(5, 5), scaleoffset=0)
        f.create_dataset("c", data=values, chunks=(5, 5), shuffle=True, compression="gzip")
        f["d"] = values
    codecs = {name: oc.open(tmp_path / "f.h5", dataset=name).codec for name in "abcd"}
    assert codecs == {
        "a": "shuffle+fletcher32",
        "b": "scaleoffset",
        "c": "shuffle+gzip",
        "d": "none",
    }
    z = zarr.create_array(
        tmp_path / "v2.zarr",
        shape=(10,),
        chunks=(5,),
        dtype="i4",
        zarr_format=2,
        filters=[numcodecs.Delta(dtype="i4")],
        compressors=numcodecs.Zstd(),
    )
    z[...] = np.arange(10)
    x = oc.open(tmp_path / "v2.zarr")
    assert x.codec == "delta+zstd"
    assert np.array_equal(x[...], np.arange(10))
