"""What writers may replace (issue 21, item 1): ``oc.create``'s default mode ``"w"`` wiped a
directory of unrelated files and replaced an existing array with zeros, silently, and so did
``from_batches``, ``to_zarr`` and ``map_chunks``.  Now the default (``"w-"``) refuses anything
at the path, ``"w"`` replaces a zarr array and only its own files, and nothing else is ever
deleted; URLs other than ``file://`` are refused as not supported yet (item 10).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr

import oocarray as oc
from oocarray._storage import _replace


def _documents(path: Path) -> dict[str, str]:
    """A directory of someone's files, named like an output by a typo."""
    path.mkdir()
    (path / "sub").mkdir()
    files = {"thesis.tex": "years of work", "sub/data.csv": "1,2,3"}
    for name, text in files.items():
        (path / name).write_text(text)
    return files


def _unchanged(path: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        assert (path / name).read_text() == text, name
    assert sorted(p.name for p in path.rglob("*")) == sorted(
        {*(Path(n).name for n in files), "sub"}
    )


def _array(path: Path, value: float = 7.0) -> oc.ChunkedArray:
    x = oc.create(path, (10, 4), np.float64, chunks=(2, 4))
    x[...] = value
    return x


WRITERS: dict[str, Callable[[Path, str | None], Any]] = {
    "create": lambda p, mode: oc.create(p, (4,), "f8", **({} if mode is None else {"mode": mode})),
    "from_batches": lambda p, mode: oc.from_batches(
        [np.ones((3, 2))], p, **({} if mode is None else {"mode": mode})
    ),
    "to_zarr": lambda p, mode: (oc.from_numpy(np.ones(6), chunks=3) * 2).to_zarr(
        p, **({} if mode is None else {"mode": mode})
    ),
    "ChunkedArray.to_zarr": lambda p, mode: oc.from_numpy(np.ones(6), chunks=3).to_zarr(
        p, **({} if mode is None else {"mode": mode})
    ),
}


@pytest.mark.parametrize("writer", sorted(WRITERS))
@pytest.mark.parametrize("mode", [None, "w-", "x", "w"])
def test_no_writer_deletes_a_directory_of_other_files(
    tmp_path: Path, writer: str, mode: str | None
) -> None:
    docs = tmp_path / "docs"
    files = _documents(docs)
    with pytest.raises(oc.StoreExistsError, match="not a zarr array") as caught:
        WRITERS[writer](docs, mode)
    assert isinstance(caught.value, FileExistsError)
    assert str(docs) in str(caught.value)
    _unchanged(docs, files)


@pytest.mark.parametrize("writer", sorted(WRITERS))
@pytest.mark.parametrize("mode", [None, "w"])
def test_no_writer_deletes_a_file(tmp_path: Path, writer: str, mode: str | None) -> None:
    target = tmp_path / "results.zarr"
    target.write_text("a file named like a store")
    with pytest.raises(oc.StoreExistsError, match="a file"):
        WRITERS[writer](target, mode)
    assert target.read_text() == "a file named like a store"


@pytest.mark.parametrize("writer", sorted(WRITERS))
def test_the_default_never_replaces_an_array(tmp_path: Path, writer: str) -> None:
    path = tmp_path / "a.zarr"
    _array(path)
    with pytest.raises(oc.StoreExistsError, match="mode='w'") as caught:
        WRITERS[writer](path, None)
    assert str(path) in str(caught.value)
    got = oc.open(path)
    assert got.shape == (10, 4) and (got[...] == 7).all()  # not replaced by zeros


@pytest.mark.parametrize("writer", sorted(WRITERS))
def test_mode_w_replaces_an_array_and_keeps_the_users_files(tmp_path: Path, writer: str) -> None:
    path = tmp_path / "a.zarr"
    _array(path)
    (path / "README.txt").write_text("what this is")
    WRITERS[writer](path, "w")
    got = oc.open(path)
    assert got.shape != (10, 4)
    assert (path / "README.txt").read_text() == "what this is"
    assert not (path / _replace.REPLACING).exists()
    zarr.open_array(path, mode="r")  # plain zarr still


def test_a_replaced_array_keeps_no_old_chunk(tmp_path: Path) -> None:
    path = tmp_path / "a.zarr"
    _array(path)
    y = oc.create(path, (10, 4), np.float64, chunks=(2, 4), mode="w")  # the same chunk keys
    assert not y[...].any(), "an old chunk was read as the new array's"
    v2 = tmp_path / "v2.zarr"
    old = zarr.create_array(v2, shape=(6,), chunks=(2,), dtype="i4", zarr_format=2)
    old[...] = 5
    oc.create(v2, (6,), "i4", chunks=(2,), mode="w")
    assert sorted(os.listdir(v2)) == ["zarr.json"]


def test_empty_directories_may_be_written_in_every_mode(tmp_path: Path) -> None:
    for mode in ("w-", "x", "w"):
        empty = tmp_path / f"empty-{mode}"
        empty.mkdir()
        assert oc.create(empty, (3,), "f4", mode=mode).shape == (3,)


def test_a_group_is_never_replaced_and_its_siblings_stay(tmp_path: Path) -> None:
    group = tmp_path / "g.zarr"
    oc.create(group, (3,), "f8", dataset="a")[...] = 1
    oc.create(group, (3,), "f8", dataset="b/c")[...] = 2
    for mode in ("w", "w-"):
        with pytest.raises(oc.StoreExistsError, match="zarr group"):
            oc.create(group, (3,), "f8", mode=mode)
        with pytest.raises(oc.StoreExistsError, match="zarr group"):
            oc.create(group, (3,), "f8", dataset="b", mode=mode)  # b holds c
    with pytest.raises(oc.StoreExistsError, match="mode='w'"):
        oc.create(group, (5,), "f8", dataset="a")
    oc.create(group, (5,), "f8", dataset="a", mode="w")
    assert oc.open(group, dataset="a").shape == (5,)
    assert (oc.open(group, dataset="b/c")[...] == 2).all()
    with pytest.raises(oc.StoreExistsError, match="zarr group"):
        oc.from_batches([np.ones((2, 2))], group, mode="w")
    assert (oc.open(group, dataset="b/c")[...] == 2).all()


def test_dataset_in_a_directory_that_is_not_a_group(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    files = _documents(docs)
    for mode in ("w", "w-"):
        with pytest.raises(oc.StoreExistsError, match="not a zarr group"):
            oc.create(docs, (3,), "f8", dataset="a", mode=mode)
    _unchanged(docs, files)
    assert not (docs / "zarr.json").exists()


def test_from_batches_refuses_before_reading_the_stream(tmp_path: Path) -> None:
    path = tmp_path / "a.zarr"
    _array(path)
    read: list[int] = []

    def blocks() -> Iterator[np.ndarray]:
        read.append(1)
        yield np.ones((2, 4))

    with pytest.raises(oc.StoreExistsError):
        oc.from_batches(blocks(), path)
    assert read == []


def test_map_chunks_replaces_only_its_own_outputs(tmp_path: Path) -> None:
    x = oc.from_numpy(np.arange(12.0).reshape(6, 2), chunks=(2, 2))
    docs = tmp_path / "docs"
    files = _documents(docs)
    with pytest.raises(oc.StoreExistsError, match="not a zarr array"):
        oc.map_chunks(lambda b: b * 2, x, out=docs)
    _unchanged(docs, files)
    data = tmp_path / "data.zarr"
    _array(data)
    with pytest.raises(oc.StoreExistsError, match="map_chunks did not write"):
        oc.map_chunks(lambda b: b * 2, x, out=data)
    assert (oc.open(data)[...] == 7).all()
    out = tmp_path / "y.zarr"
    oc.map_chunks(lambda b: b * 2, x, out=out)
    again = oc.map_chunks(lambda b: b * 3, x, out=out, resume=False)  # its own: replaced
    np.testing.assert_array_equal(again[...], x[...] * 3)


def test_an_interrupted_replacement_reads_as_no_array_and_w_finishes_it(tmp_path: Path) -> None:
    path = tmp_path / "a.zarr"
    _array(path)
    os.replace(path / "zarr.json", path / _replace.REPLACING)  # as a crash mid-way leaves it
    with pytest.raises(ValueError, match="not a zarr array"):
        oc.open(path)
    with pytest.raises(oc.StoreExistsError, match="mode='w'"):
        oc.create(path, (3,), "f8")
    y = oc.create(path, (10, 4), np.float64, chunks=(2, 4), mode="w")
    assert not y[...].any()
    assert sorted(os.listdir(path)) == ["zarr.json"]


SECRET_URL = "{scheme}://AKIAKEY:hunter2@bucket/x.zarr?X-Amz-Signature=abc"
# A closed port on loopback, tried once: the call fails without any traffic leaving the machine.
CLOSED = {"endpoint": "http://127.0.0.1:1", "retries": 0, "key": "k", "secret": "s"}


def test_urls_name_no_credentials_when_the_store_cannot_be_reached(tmp_path: Path) -> None:
    url = SECRET_URL.format(scheme="s3")
    calls: list[Callable[[], Any]] = [
        lambda: oc.open(url, storage_options=CLOSED),
        lambda: oc.create(url, (3,), "f8", storage_options=CLOSED),
        lambda: oc.from_batches([np.ones((2, 2))], url, storage_options=CLOSED),
        lambda: oc.from_numpy(np.ones(4), chunks=2).to_zarr(url, storage_options=CLOSED),
        lambda: oc.map_chunks(lambda b: b, np.ones(4), out=url, storage_options=CLOSED),
    ]
    for call in calls:
        with pytest.raises(oc.ObjectStoreError) as caught:
            call()
        text = str(caught.value)
        assert "s3://bucket/x.zarr" in text
        assert "hunter2" not in text and "AKIAKEY" not in text and "Signature" not in text
    with pytest.raises(PermissionError, match="read-only"):
        oc.create("https://user:hunter2@127.0.0.1:1/x.zarr", (3,), "f8")


def test_file_urls_are_local_paths(tmp_path: Path) -> None:
    url = "file://" + str(tmp_path / "my array.zarr").replace(" ", "%20")
    oc.create(url, (3,), "f8")[...] = 4
    assert (oc.open(tmp_path / "my array.zarr")[...] == 4).all()
    assert (oc.open(url)[...] == 4).all()
    assert oc.from_batches([np.ones((2, 2))], "file://" + str(tmp_path / "b.zarr")).shape == (2, 2)


def test_mode_w_never_replaces_an_input_of_the_write(tmp_path: Path) -> None:
    path = tmp_path / "a.zarr"
    x = _array(path)
    with pytest.raises(ValueError, match="which it also reads"):
        (x * 2).to_zarr(path, mode="w")
    with pytest.raises(ValueError, match="which it also reads"):
        x.to_zarr(path, mode="w")
    y = oc.map_chunks(lambda b: b + 1, x, out=tmp_path / "y.zarr")
    with pytest.raises(ValueError, match="which it also reads"):
        oc.map_chunks(lambda b: b * 2, y, out=tmp_path / "y.zarr")
    assert (oc.open(path)[...] == 7).all()
    assert (oc.open(tmp_path / "y.zarr")[...] == 8).all()


def test_mode_w_removes_a_link_where_chunks_go_but_not_what_it_points_to(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    _array(elsewhere / "a.zarr")
    path = tmp_path / "b.zarr"
    path.mkdir()
    (path / "zarr.json").write_bytes((elsewhere / "a.zarr" / "zarr.json").read_bytes())
    (path / "c").symlink_to(elsewhere / "a.zarr" / "c")  # its chunks are the other array's
    (path / "notes").symlink_to(tmp_path)  # a user's link stays
    y = oc.create(path, (10, 4), np.float64, chunks=(2, 4), mode="w")
    assert not y[...].any()
    assert (oc.open(elsewhere / "a.zarr")[...] == 7).all()
    assert (path / "notes").is_symlink()
