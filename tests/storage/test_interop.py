"""Interop in both directions, and golden files that pin the on-disk format."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import dask.array as da
import google_crc32c
import h5py
import numcodecs
import numpy as np
import pytest
import xarray as xr
import zarr
import zarr.codecs

import oocarray as oc
from datasets import golden

DATA = np.random.default_rng(7).standard_normal((45, 12)).astype(np.float32)


@pytest.fixture(params=["zstd", "lz4", "blosc", "gzip", "none"])
def written_by_oocarray(request: pytest.FixtureRequest, tmp_path: Path) -> Path:
    path = tmp_path / "oc.zarr"
    x = oc.create(path, DATA.shape, DATA.dtype, chunks=(10, 5), codec=request.param)
    x[...] = DATA
    return path


def test_zarr_python_reads_what_oocarray_writes(written_by_oocarray: Path) -> None:
    z = zarr.open_array(written_by_oocarray, mode="r")
    assert z.metadata.zarr_format == 3
    assert np.array_equal(z[...], DATA)
    assert np.array_equal(z[7:30:3, 4], DATA[7:30:3, 4])


def test_dask_reads_what_oocarray_writes(written_by_oocarray: Path) -> None:
    d = da.from_zarr(str(written_by_oocarray))
    assert d.chunksize == (10, 5)
    assert np.allclose(d.mean(axis=0).compute(), DATA.mean(axis=0))


def test_xarray_reads_what_oocarray_writes(tmp_path: Path) -> None:
    group = tmp_path / "ds.zarr"
    zarr.open_group(group, mode="w", zarr_format=3)
    x = oc.create(
        group / "temperature",
        DATA.shape,
        DATA.dtype,
        chunks=(10, 5),
        dimension_names=("time", "station"),
        attributes={"units": "K", "scale": [1, 2.5]},
    )
    x[...] = DATA
    ds = xr.open_zarr(group, consolidated=False)
    assert ds["temperature"].dims == ("time", "station")
    assert ds["temperature"].attrs == {"units": "K", "scale": [1, 2.5]}
    assert np.array_equal(ds["temperature"].values, DATA)


def test_xarray_opens_a_group_that_create_makes_with_dataset(tmp_path: Path) -> None:
    path = tmp_path / "weather.zarr"
    t = oc.create(path, DATA.shape, DATA.dtype, dataset="temperature", dimension_names=("t", "s"))
    t[...] = DATA
    counts = oc.create(path, (45,), np.int32, dataset="stats/count", dimension_names=("t",))
    counts[...] = np.arange(45)
    for ds in (
        xr.open_zarr(path, consolidated=False),
        xr.open_dataset(path, engine="zarr", consolidated=False, chunks=None),
    ):
        assert ds["temperature"].dims == ("t", "s")
        assert np.array_equal(ds["temperature"].values, DATA)
    nested = xr.open_zarr(path, group="stats", consolidated=False)
    assert np.array_equal(nested["count"].values, np.arange(45))
    assert np.array_equal(oc.open(path, dataset="stats/count")[...], np.arange(45))
    with pytest.raises(FileExistsError, match="mode='w'"):
        oc.create(path, (3,), np.int8, dataset="stats/count")  # the default never replaces
    replaced = oc.create(path, (3,), np.int8, dataset="stats/count", mode="w")  # this one only
    assert replaced.shape == (3,)
    assert np.array_equal(oc.open(path, dataset="temperature")[...], DATA)
    with pytest.raises(FileExistsError):
        oc.create(path, (3,), np.int8, dataset="temperature", mode="w-")


def test_arrays_created_in_a_group_get_xarrays_default_dimension_names(tmp_path: Path) -> None:
    group = tmp_path / "ds.zarr"
    zarr.open_group(group, mode="w", zarr_format=3)
    oc.create(group / "plain", DATA.shape, DATA.dtype)[...] = DATA
    ds = xr.open_zarr(group, consolidated=False)
    assert ds["plain"].dims == ("dim_0", "dim_1")
    alone = oc.create(tmp_path / "alone.zarr", DATA.shape, DATA.dtype)
    meta = json.loads((Path(alone.path) / "zarr.json").read_text())
    assert "dimension_names" not in meta, "an array of its own keeps its metadata as it was"


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_open_reaches_an_array_inside_a_zarr_group(tmp_path: Path, zarr_format: int) -> None:
    path = tmp_path / "g.zarr"
    root = zarr.open_group(path, mode="w", zarr_format=zarr_format)
    root.create_array("a/b", shape=DATA.shape, dtype=DATA.dtype, chunks=(10, 5))[...] = DATA
    root.create_array("c", shape=(4,), dtype="i2")[...] = [1, 2, 3, 4]
    assert np.array_equal(oc.open(path, dataset="a/b")[3:9, ::2], DATA[3:9, ::2])
    assert np.array_equal(oc.open(path, dataset="/c")[...], [1, 2, 3, 4])
    writable = oc.open(path, mode="r+", dataset="c")
    writable[0] = 9
    assert zarr.open_array(path / "c", mode="r")[0] == 9
    with pytest.raises(ValueError, match=r"2 arrays \['a/b', 'c'\]; choose one with dataset"):
        oc.open(path)
    with pytest.raises(oc.StoreNotFoundError, match="no array 'missing'"):
        oc.open(path, dataset="missing")
    with pytest.raises(ValueError, match="is a zarr group, not an array"):
        oc.open(path, dataset="a")
    assert np.array_equal(oc.open(path / "a")[...], DATA), "a group with one array needs no name"
    with pytest.raises(ValueError, match="is a zarr array: open it without dataset"):
        oc.open(path / "c", dataset="c")


def test_bad_dimension_names_attributes_and_datasets(tmp_path: Path) -> None:
    path = tmp_path / "x.zarr"
    with pytest.raises(ValueError, match=r"one str \(or None\) per axis \(2\)"):
        oc.create(path, (2, 3), "f4", dimension_names=("x",))
    with pytest.raises(ValueError, match="per axis"):
        oc.create(path, (2, 3), "f4", dimension_names="xy")
    with pytest.raises(TypeError, match="JSON values"):
        oc.create(path, (2, 3), "f4", attributes={"when": np.datetime64("2024-01-01")})
    with pytest.raises(TypeError, match="mapping with str keys"):
        oc.create(path, (2, 3), "f4", attributes=[("units", "K")])
    with pytest.raises(ValueError, match="no empty"):
        oc.create(path, (2, 3), "f4", dataset="../escape")
    assert not path.exists(), "nothing is written before the arguments are checked"
    zarr.open_group(tmp_path / "v2.zarr", mode="w", zarr_format=2)
    with pytest.raises(ValueError, match="zarr v2 group"):
        oc.create(tmp_path / "v2.zarr", (2,), "f4", dataset="x")
    np.save(tmp_path / "a.npy", np.zeros(3))
    with pytest.raises(ValueError, match=r"is a \.npy file"):
        oc.open(tmp_path / "a.npy", dataset="x")


def test_tensorstore_reads_what_oocarray_writes(written_by_oocarray: Path) -> None:
    ts = pytest.importorskip("tensorstore")
    store = ts.open(
        {"driver": "zarr3", "kvstore": {"driver": "file", "path": str(written_by_oocarray)}}
    ).result()
    assert np.array_equal(store.read().result(), DATA)


@pytest.mark.parametrize(
    "compressors",
    [
        None,
        zarr.codecs.ZstdCodec(level=1),
        zarr.codecs.BloscCodec(cname="lz4", shuffle="bitshuffle"),
        zarr.codecs.GzipCodec(level=1),
    ],
    ids=["none", "zstd", "blosc-bitshuffle", "gzip"],
)
def test_oocarray_reads_zarr_v3(tmp_path: Path, compressors: object) -> None:
    z = zarr.create_array(
        tmp_path / "v3.zarr",
        shape=DATA.shape,
        chunks=(8, 7),
        dtype=DATA.dtype,
        compressors=compressors,
        fill_value=0,
    )
    z[:40] = DATA[:40]  # the last chunks are never written: they hold the fill value
    x = oc.open(tmp_path / "v3.zarr")
    expected = DATA.copy()
    expected[40:] = 0
    assert x._store.direct  # type: ignore[attr-defined]
    assert np.array_equal(x[...], expected)
    assert np.array_equal(x[[44, 3], 6], expected[[44, 3], 6])


@pytest.mark.parametrize("separator", [".", "/"])
def test_oocarray_reads_zarr_v2(tmp_path: Path, separator: str) -> None:
    z = zarr.create_array(
        tmp_path / "v2.zarr",
        shape=DATA.shape,
        chunks=(8, 7),
        dtype=">f4",
        compressors=numcodecs.Zstd(level=1),
        zarr_format=2,
        fill_value=0,
        chunk_key_encoding={"name": "v2", "separator": separator},
    )
    z[...] = DATA
    x = oc.open(tmp_path / "v2.zarr")
    assert x._store.direct  # type: ignore[attr-defined]
    assert np.array_equal(x[...], DATA)
    w = oc.open(tmp_path / "v2.zarr", mode="r+")
    w[0] = 1.0
    assert np.array_equal(zarr.open_array(tmp_path / "v2.zarr")[0], np.ones(12, np.float32))


def test_oocarray_reads_and_writes_sharded_zarr(tmp_path: Path) -> None:
    z = zarr.create_array(
        tmp_path / "sharded.zarr",
        shape=DATA.shape,
        chunks=(5, 4),
        shards=(15, 12),
        dtype=DATA.dtype,
    )
    z[...] = DATA
    x = oc.open(tmp_path / "sharded.zarr", mode="r+")
    assert x._store.direct  # type: ignore[attr-defined]  # reads one inner chunk at a time
    assert np.array_equal(x[...], DATA)
    assert np.array_equal(x[3:33:4, ::-2], DATA[3:33:4, ::-2])
    x[10:20, 1] = -1.0
    expected = DATA.copy()
    expected[10:20, 1] = -1.0
    assert np.array_equal(zarr.open_array(tmp_path / "sharded.zarr")[...], expected)


@pytest.mark.parametrize("layout", ["contiguous", "chunked-gzip"])
def test_oocarray_reads_h5py(tmp_path: Path, layout: str) -> None:
    path = tmp_path / "f.h5"
    with h5py.File(path, "w") as f:
        if layout == "contiguous":
            f["x"] = DATA
        else:
            f.create_dataset("x", data=DATA, chunks=(9, 12), compression="gzip")
    x = oc.open(path)
    assert x.location == ("mmap" if layout == "contiguous" else "chunks")
    assert np.array_equal(x[...], DATA)
    assert np.array_equal(x[-5:, [0, 11]], DATA[-5:, [0, 11]])
    x.close()


@pytest.mark.parametrize("codec", golden.CODECS)
def test_golden_files_read_back(codec: str) -> None:
    x = oc.open(golden.HERE / f"{codec}.zarr")
    assert x.shape == golden.SHAPE
    assert x.chunks == golden.CHUNKS
    assert np.array_equal(x[...], golden.golden_data())


@pytest.mark.parametrize("codec", golden.CODECS)
def test_stores_written_before_checksums_still_read(codec: str) -> None:
    """What oocarray wrote without a checksum (zstd without its frame checksum, no crc32c
    codec) reads as before (paged reads of such chains: test_codecs.py)."""
    x = oc.open(golden.BEFORE_CHECKSUMS / f"{codec}.zarr")
    assert "crc32c" not in x._store.codec
    assert np.array_equal(x[...], golden.golden_data())
    assert np.array_equal(x[3:11, 1:5], golden.golden_data()[3:11, 1:5])


@pytest.mark.parametrize("codec", golden.CODECS)
def test_golden_files_carry_a_checksum(codec: str) -> None:
    meta = json.loads((golden.HERE / f"{codec}.zarr" / "zarr.json").read_text())
    names = [c["name"] for c in meta["codecs"]]
    assert names[-1] == "crc32c"


@pytest.mark.parametrize("codec", golden.CODECS)
def test_writing_again_matches_the_golden_files(codec: str, tmp_path: Path) -> None:
    fresh = golden.write(tmp_path, codec)
    stored = golden.HERE / f"{codec}.zarr"
    assert json.loads((fresh / "zarr.json").read_text()) == json.loads(
        (stored / "zarr.json").read_text()
    )
    fresh_chunks = sorted(p.relative_to(fresh) for p in fresh.rglob("*") if p.is_file())
    stored_chunks = sorted(p.relative_to(stored) for p in stored.rglob("*") if p.is_file())
    assert fresh_chunks == stored_chunks
    if codec == "none":
        for rel in fresh_chunks:
            assert (fresh / rel).read_bytes() == (stored / rel).read_bytes()


def test_golden_files_are_read_by_zarr_python(tmp_path: Path) -> None:
    for codec in golden.CODECS:
        copy = tmp_path / f"{codec}.zarr"
        shutil.copytree(golden.HERE / f"{codec}.zarr", copy)
        assert np.array_equal(zarr.open_array(copy, mode="r")[...], golden.golden_data())


def test_sharded_reads_take_only_the_inner_chunk_and_report_damage(tmp_path: Path) -> None:
    z = zarr.create_array(
        tmp_path / "s.zarr",
        shape=(64, 4),
        chunks=(4, 4),
        shards=(32, 4),
        dtype="i4",
        fill_value=-1,
    )
    z[:20] = np.arange(80, dtype=np.int32).reshape(20, 4)
    x = oc.open(tmp_path / "s.zarr")
    assert np.array_equal(x[5], [20, 21, 22, 23])
    assert np.array_equal(x[25], [-1, -1, -1, -1])  # an empty slot of a written shard
    assert np.array_equal(x[40], [-1, -1, -1, -1])  # a shard never written
    shard = tmp_path / "s.zarr" / "c" / "0" / "0"
    shard.write_bytes(shard.read_bytes()[:-200])  # cut into the index at the end
    with pytest.raises(oc.CorruptChunkError, match="shard"):
        oc.open(tmp_path / "s.zarr")[5]


# ---- dtypes: dates and durations, 0-d arrays, byte order ----

TIMES = np.datetime64("2024-01-01", "s") + np.arange(20).astype("timedelta64[s]") * 3600


@pytest.mark.parametrize("codec", ["none", "zstd", "lz4", "gzip"])
@pytest.mark.parametrize("dtype", ["datetime64[ns]", "timedelta64[s]"])
def test_dates_and_durations_round_trip_and_zarr_python_reads_them(
    tmp_path: Path, codec: str, dtype: str
) -> None:
    values = TIMES.astype(dtype) if dtype.startswith("datetime") else TIMES - TIMES[0]
    values = values.astype(dtype)
    x = oc.create(tmp_path / "t.zarr", values.shape, dtype, chunks=(6,), codec=codec)
    x[...] = values
    x[3] = values[0]  # a partial chunk: read, updated, written back
    expected = values.copy()
    expected[3] = values[0]
    y = oc.open(tmp_path / "t.zarr")
    assert y.dtype == np.dtype(dtype)
    assert np.array_equal(y[...], expected)
    assert np.array_equal(y[4:9], expected[4:9])
    assert np.array_equal(zarr.open_array(tmp_path / "t.zarr", mode="r")[...], expected)


@pytest.mark.parametrize("zarr_format", [2, 3])
@pytest.mark.parametrize("compressors", [None, "auto"])
def test_oocarray_reads_dates_written_by_zarr_python(
    tmp_path: Path, zarr_format: int, compressors: object
) -> None:
    z = zarr.create_array(
        tmp_path / "t.zarr",
        shape=TIMES.shape,
        chunks=(7,),
        dtype=TIMES.dtype,
        zarr_format=zarr_format,  # type: ignore[arg-type]
        compressors=compressors,  # type: ignore[arg-type]
    )
    z[...] = TIMES
    x = oc.open(tmp_path / "t.zarr")
    assert np.array_equal(x[...], TIMES)
    assert x[8] == TIMES[8]
    assert np.array_equal(x[[3, 15]], TIMES[[3, 15]])


@pytest.mark.parametrize("codec", ["zstd", "none", "lz4"])
def test_zero_dimensional_arrays_are_written_and_read(tmp_path: Path, codec: str) -> None:
    x = oc.create(tmp_path / "s.zarr", (), "float64", codec=codec)
    x[...] = 2.5
    y = oc.open(tmp_path / "s.zarr")
    assert y.shape == ()
    assert y[...] == 2.5
    assert y[()] == 2.5
    assert np.asarray(y).shape == ()
    assert zarr.open_array(tmp_path / "s.zarr", mode="r")[()] == 2.5
    assert oc.from_numpy(np.float64(2))[()] == 2.0
    t = oc.temp((), "int32")
    t[()] = 7
    assert t[...] == 7


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_oocarray_reads_zero_dimensional_zarr_python_arrays(
    tmp_path: Path, zarr_format: int
) -> None:
    z = zarr.create_array(
        tmp_path / "s.zarr",
        shape=(),
        dtype="int16",
        zarr_format=zarr_format,  # type: ignore[arg-type]
    )
    z[...] = -3
    assert oc.open(tmp_path / "s.zarr")[...] == -3


@pytest.mark.parametrize("dtype", [">f8", ">i4", "<f8", ">M8[ms]"])
def test_byte_order_round_trips(tmp_path: Path, dtype: str) -> None:
    values = np.arange(10).astype(dtype)
    x = oc.create(tmp_path / "b.zarr", values.shape, dtype, chunks=(4,))
    x[...] = values
    x[5] = values[1]
    values[5] = values[1]
    y = oc.open(tmp_path / "b.zarr")
    assert y.dtype == np.dtype(dtype)  # the byte order asked for, not the machine's
    assert y[...].dtype == np.dtype(dtype)
    assert np.array_equal(y[...], values)
    assert np.array_equal(zarr.open_array(tmp_path / "b.zarr", mode="r")[...], values)
    raw = oc.create(tmp_path / "raw.zarr", values.shape, dtype, chunks=(10,), codec="none")
    raw[...] = values
    stored = (tmp_path / "raw.zarr" / "c" / "0").read_bytes()  # then zarr's crc32c codec
    assert stored[:-4] == values.tobytes()
    assert int.from_bytes(stored[-4:], "little") == google_crc32c.value(values.tobytes())


@pytest.mark.parametrize(
    ("dtype", "filters", "compressor"),
    [
        ("i4", [numcodecs.Delta(dtype="i4")], numcodecs.Blosc(cname="lz4")),
        ("f8", [numcodecs.FixedScaleOffset(offset=0, scale=100, dtype="f8", astype="i4")], None),
        ("f8", [numcodecs.Quantize(digits=3, dtype="f8")], numcodecs.Zstd()),
        ("bool", [numcodecs.PackBits()], numcodecs.Zlib()),
    ],
)
def test_zarr_v2_filters_are_read_and_written_directly(
    tmp_path: Path, dtype: str, filters: list[object], compressor: object
) -> None:
    """v2 filters decode in oocarray's own chunk reader (with its framing checks) and
    encode in its writer, byte for byte as zarr-python does."""
    values = (np.arange(60).reshape(10, 6) * 1.37).astype(dtype)
    z = zarr.create_array(
        tmp_path / "f.zarr",
        shape=values.shape,
        chunks=(4, 6),
        dtype=dtype,
        zarr_format=2,
        filters=filters,  # type: ignore[arg-type]
        compressors=compressor,  # type: ignore[arg-type]
    )
    z[...] = values
    x = oc.open(tmp_path / "f.zarr", mode="r+")
    assert x.codec.split("+")[0] == filters[0].codec_id  # type: ignore[attr-defined]
    assert np.array_equal(x[...], z[...])
    assert np.array_equal(x[5:9, 2], z[5:9, 2])
    x[1:3] = values[5:7]  # a partial chunk, read, updated and written back
    x[8:] = values[:2]
    again = zarr.open_array(tmp_path / "f.zarr", mode="r")
    assert np.array_equal(oc.open(tmp_path / "f.zarr")[...], again[...])
    assert np.allclose(again[1:3], values[5:7], atol=1e-2)
