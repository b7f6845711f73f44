"""Streaming ingest: ChunkedArray.append, oc.from_batches and oc.read_parquet."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path

import h5py
import numpy as np
import pytest
import zarr
from hypothesis import given, settings
from hypothesis import strategies as st

import oocarray as oc
from oocarray._storage._zarr._store import ZarrStore

# ---- append ----


@pytest.mark.parametrize("shards", [None, (8, 3)])
def test_append_grows_along_axis_0(tmp_path: Path, shards: tuple[int, int] | None) -> None:
    y = oc.create(tmp_path / "y.zarr", (0, 3), "float32", chunks=(4, 3), shards=shards)
    expected = []
    for n in (1, 5, 0, 9, 2, 16):
        rows = np.arange(n * 3, dtype=np.float64).reshape(n, 3) + len(expected) * 100
        y.append(rows)
        expected.extend(rows.tolist())
    want = np.array(expected, dtype=np.float32)
    np.testing.assert_array_equal(y[:], want)
    np.testing.assert_array_equal(oc.open(tmp_path / "y.zarr")[:], want)
    np.testing.assert_array_equal(zarr.open_array(tmp_path / "y.zarr", mode="r")[:], want)


def test_append_to_an_array_with_rows_and_split_trailing_chunks(tmp_path: Path) -> None:
    start = np.arange(30, dtype=np.int64).reshape(10, 3)
    y = oc.create(tmp_path / "y.zarr", (10, 3), "int64", chunks=(4, 2))
    y[:] = start
    y.append(np.full((7, 3), -1, np.int32))
    np.testing.assert_array_equal(y[:10], start)
    np.testing.assert_array_equal(y[10:], -1)
    assert y.shape == (17, 3)


def test_a_failed_append_leaves_the_array_as_it_was(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    y = oc.create(tmp_path / "y.zarr", (0, 2), "float32", chunks=(4, 2))
    y.append(np.ones((6, 2)))
    real = ZarrStore._write_stored
    calls = []

    def failing(self: ZarrStore, *args: object) -> None:
        calls.append(1)
        if len(calls) > 1:
            raise OSError(28, "No space left on device")
        real(self, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(ZarrStore, "_write_stored", failing)
    with pytest.raises(OSError, match="No space"):
        y.append(np.full((40, 2), 7.0))
    monkeypatch.undo()
    # Some chunks past the end were written, the metadata was not: the old shape, old data.
    for z in (y, oc.open(tmp_path / "y.zarr")):
        assert z.shape == (6, 2)
        np.testing.assert_array_equal(z[:], 1.0)
    y.append(np.full((3, 2), 2.0))  # overwrites what the failed append left
    again = oc.open(tmp_path / "y.zarr")
    np.testing.assert_array_equal(again[:], np.r_[np.ones((6, 2)), np.full((3, 2), 2.0)])
    # Growing over stale chunks shows fill values, never the failed append's rows.
    y.append(np.zeros((20, 2)))
    assert not (oc.open(tmp_path / "y.zarr")[:] == 7.0).any()


@pytest.mark.parametrize(
    ("rows", "error", "match"),
    [
        (np.ones(3), ValueError, r"row\[None\]"),
        (np.ones((2, 4)), ValueError, r"shape \(n, 3\)"),
        (np.ones((2, 3), dtype=np.complex64), TypeError, "within one kind"),
        (np.array([["a", "b", "c"]]), TypeError, "astype"),
    ],
)
def test_append_errors(
    tmp_path: Path, rows: np.ndarray, error: type[Exception], match: str
) -> None:
    y = oc.create(tmp_path / "y.zarr", (2, 3), "float32")
    with pytest.raises(error, match=match):
        y.append(rows)
    assert y.shape == (2, 3)


def test_append_needs_a_writable_zarr_array(tmp_path: Path) -> None:
    oc.create(tmp_path / "y.zarr", (2, 3), "float32")
    with pytest.raises(oc.ReadOnlyError):
        oc.open(tmp_path / "y.zarr").append(np.ones((1, 3)))
    np.save(tmp_path / "a.npy", np.ones((2, 3)))
    with pytest.raises(TypeError, match="npy, which does not grow"):
        oc.open(tmp_path / "a.npy", "r+").append(np.ones((1, 3)))
    with h5py.File(tmp_path / "f.h5", "w") as f:
        f["x"] = np.ones((2, 3))
    with pytest.raises(TypeError, match="hdf5"):
        oc.open(tmp_path / "f.h5", "r+").append(np.ones((1, 3)))
    closed = oc.open(tmp_path / "y.zarr", "r+")
    closed.close()
    with pytest.raises(oc.ClosedError):
        closed.append(np.ones((1, 3)))
    scalar = oc.create(tmp_path / "s.zarr", (), "float32")
    with pytest.raises(TypeError, match="0-d"):
        scalar.append(np.ones(1))


# ---- from_batches ----


@settings(max_examples=25, deadline=None)
@given(
    sizes=st.lists(st.integers(0, 40), min_size=1, max_size=12),
    chunk_rows=st.integers(1, 16),
    sharded=st.booleans(),
)
def test_from_batches_writes_every_block_in_order(
    tmp_path_factory: pytest.TempPathFactory, sizes: list[int], chunk_rows: int, sharded: bool
) -> None:
    path = tmp_path_factory.mktemp("fb") / "y.zarr"
    total = sum(sizes)
    data = np.arange(total * 2, dtype=np.int32).reshape(total, 2)
    edges = np.cumsum([0, *sizes])
    blocks = [data[a:b] for a, b in itertools.pairwise(edges)]
    shards = (chunk_rows * 2, 2) if sharded else None
    y = oc.from_batches(blocks, path, chunks=(chunk_rows, 2), shards=shards)
    assert y.shape == (total, 2)
    assert y.chunks == (chunk_rows, 2)
    np.testing.assert_array_equal(oc.open(path)[:], data)


def test_from_batches_defaults_and_options(tmp_path: Path) -> None:
    blocks = (np.full((1000, 64), i, np.float64) for i in range(5))
    y = oc.from_batches(
        blocks,
        tmp_path / "y.zarr",
        dtype="float32",
        codec="lz4",
        dimension_names=("row", "feature"),
        attributes={"source": "test"},
    )
    assert y.dtype == np.float32
    assert y.chunks == (16384, 64)  # about 4 MiB, sized for a long array of these rows
    assert y.codec.startswith("blosc")
    z = zarr.open_array(tmp_path / "y.zarr", mode="r")
    assert z.metadata.dimension_names == ("row", "feature")
    assert z.attrs["source"] == "test"
    np.testing.assert_array_equal(y[::1000, 0], np.arange(5))
    with pytest.raises(FileExistsError):
        oc.from_batches([np.ones((1, 64))], tmp_path / "y.zarr", mode="w-")


def test_from_batches_memory_is_one_grid_row(tmp_path: Path) -> None:
    """40 MiB in blocks of 256 KiB, chunks of 1 MiB: the peak is a few chunks, not the data."""

    def blocks() -> Iterator[np.ndarray]:
        for i in range(160):
            yield np.full((1024, 64), i, np.float32)

    with oc.Manager("ingest", max_bytes="64M") as m:
        y = oc.from_batches(blocks(), tmp_path / "y.zarr", chunks=(4096, 64))
        peak = m.stats().peak_bytes
    assert y.shape == (160 * 1024, 64)
    assert peak < 8 << 20, peak
    np.testing.assert_array_equal(y[::1024, 0], np.arange(160))


@pytest.mark.parametrize(
    ("blocks", "error", "match"),
    [
        ([], ValueError, "empty iterable"),
        ([np.float32(1)], ValueError, "0-d"),
        ([np.ones((2, 3)), np.ones((2, 4))], ValueError, r"block 1 has shape \(2, 4\)"),
        ([np.ones((2, 3)), np.ones(3)], ValueError, "block 1"),
        ([np.ones((2, 3), np.int16), np.ones((2, 3))], TypeError, "block 1 is float64"),
    ],
)
def test_from_batches_errors(
    tmp_path: Path, blocks: list[np.ndarray], error: type[Exception], match: str
) -> None:
    with pytest.raises(error, match=match):
        oc.from_batches(iter(blocks), tmp_path / "y.zarr")


# ---- read_parquet ----


def test_read_parquet_feeds_from_batches(tmp_path: Path) -> None:
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    n = 10_000
    table = pa.table(
        {
            "id": np.arange(n, dtype=np.int64),
            "x": np.linspace(0, 1, n),
            "name": [f"r{i}" for i in range(n)],
        }
    )
    pq.write_table(table, tmp_path / "t.parquet", row_group_size=3000)
    blocks = oc.read_parquet(tmp_path / "t.parquet", ["x", "id"], batch_rows=1024)
    y = oc.from_batches(blocks, tmp_path / "y.zarr", chunks=(4096, 2))
    assert y.dtype == np.float64
    np.testing.assert_array_equal(y[:, 1], np.arange(n))
    np.testing.assert_allclose(y[:, 0], np.linspace(0, 1, n))
    with pytest.raises(TypeError, match="'name' is string"):
        next(oc.read_parquet(tmp_path / "t.parquet"))


def test_read_parquet_embeddings_nulls_and_dtype(tmp_path: Path) -> None:
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    vectors = pa.FixedSizeListArray.from_arrays(pa.array(np.arange(12, dtype=np.float32)), 4)
    pq.write_table(pa.table({"v": vectors}), tmp_path / "e.parquet")
    (block,) = oc.read_parquet(tmp_path / "e.parquet", dtype="float64")
    assert block.dtype == np.float64
    np.testing.assert_array_equal(block, np.arange(12).reshape(3, 4))
    pq.write_table(pa.table({"a": pa.array([1, None, 3])}), tmp_path / "n.parquet")
    with pytest.raises(TypeError, match="nulls"):
        list(oc.read_parquet(tmp_path / "n.parquet"))
    with pytest.raises(ValueError, match="batch_rows"):
        list(oc.read_parquet(tmp_path / "n.parquet", batch_rows=0))


def test_read_parquet_without_pyarrow(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(__import__("sys").modules, "pyarrow.parquet", None)
    with pytest.raises(ImportError, match=r"oocarray\[parquet\]"):
        next(oc.read_parquet(tmp_path / "t.parquet"))
