"""What ``x.as_ndarray()`` refuses, per format, and the message that says how to rewrite the
store or turn paging on.  (What every format promises is the store contract,
``test_store_contract.py``.)"""

from __future__ import annotations

import os
from pathlib import Path

import h5py
import numcodecs
import numpy as np
import pytest
import zarr

import oocarray as oc
from oocarray._storage._paged._arrays import paging_available

# ---- zarr ----


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_a_0d_zarr_array_reads_as_its_value_and_r_plus_is_refused(tmp_path: Path, zarr_format):
    """One element in a chunk of its own key (``c`` or ``0``): read, not paged."""
    z = zarr.create_array(tmp_path / "z.zarr", shape=(), dtype="f8", zarr_format=zarr_format)
    z[...] = 3.5
    a = oc.open(tmp_path / "z.zarr").as_ndarray()
    assert a.shape == () and a.dtype == np.float64 and float(a) == 3.5
    assert not a.flags.writeable
    with pytest.raises(NotImplementedError, match=r"0-d.*x\[\.\.\.\] = value"):
        oc.open(tmp_path / "z.zarr", mode="r+").as_ndarray("r+")


def test_unpageable_stores_are_refused_with_the_rewrite(tmp_path: Path) -> None:
    x = oc.create(tmp_path / "cols.zarr", (100, 8), "float32", chunks=(10, 4))
    with pytest.raises(NotImplementedError, match="span every axis but the first"):
        x.as_ndarray()
    y = oc.create(tmp_path / "blosc.zarr", (100, 8), "float32", chunks=(10, 8), codec="lz4")
    del y  # paged read-only; the native writer encodes raw and zstd only
    with pytest.raises(NotImplementedError, match=r"mode='r'.*codec='zstd'"):
        oc.open(tmp_path / "blosc.zarr", mode="r+").as_ndarray("r+")
    bz2 = zarr.create_array(
        tmp_path / "bz2.zarr",
        shape=(100, 8),
        chunks=(10, 8),
        dtype="f4",
        zarr_format=2,
        compressors=numcodecs.BZ2(),
    )
    del bz2  # a codec only Python decodes
    with pytest.raises(NotImplementedError, match="codec='zstd'"):
        oc.open(tmp_path / "bz2.zarr").as_ndarray()
    s = oc.create(tmp_path / "s.zarr", (100, 8), "float32", chunks=(10, 8), shards=(20, 8))
    with pytest.raises(NotImplementedError, match="sharded"):
        oc.open(tmp_path / "s.zarr", mode="r+").as_ndarray("r+")
    del s
    odd = oc.create(tmp_path / "odd.zarr", (100, 3), "float32", chunks=(10, 3))
    with pytest.raises(NotImplementedError, match="rows per chunk"):
        oc.open(tmp_path / "odd.zarr", mode="r+").as_ndarray("r+")
    del odd


def test_the_kill_switch_says_how_to_turn_it_back_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    x = oc.create(tmp_path / "a.zarr", (10, 4), "float32")
    monkeypatch.setenv("OOCARRAY_USERFAULTFD", "0")
    with pytest.raises(oc.PagingUnavailableError, match="OOCARRAY_USERFAULTFD"):
        x.as_ndarray()
    assert issubclass(oc.PagingUnavailableError, OSError)


def test_the_message_without_userfaultfd_says_how_to_enable_it() -> None:
    from oocarray._storage._paged import _arrays as _paged

    saved = dict(_paged._checked)
    _paged._checked[os.getpid()] = (1, False)  # as if EPERM
    try:
        ok, why = paging_available()
    finally:
        _paged._checked.clear()
        _paged._checked.update(saved)
    assert not ok
    assert "vm.unprivileged_userfaultfd=1" in why and "/dev/userfaultfd" in why


# ---- HDF5 ----


def test_unpageable_datasets_are_refused_with_the_rewrite(tmp_path: Path) -> None:
    path = tmp_path / "f.h5"
    values = np.arange(400 * 8, dtype="<f4").reshape(400, 8)
    with h5py.File(path, "w") as f:
        f.create_dataset("cols", data=values, chunks=(40, 4))
        f.create_dataset("lzf", data=values, chunks=(40, 8), compression="lzf")
        f.create_dataset("scaleoffset", data=values, chunks=(40, 8), scaleoffset=2)
        pair = np.dtype([("a", "<i4"), ("b", "<f8")])
        f.create_dataset("compound", shape=(10,), dtype=pair, chunks=(5,))
        f.create_dataset("strings", data=np.array([b"ab", b"cd"] * 5), chunks=(5,))
        f.create_dataset("odd", data=values[:, :3], chunks=(40, 3))
        dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
        dcpl.set_layout(h5py.h5d.COMPACT)
        space = h5py.h5s.create_simple((4, 8))
        tid = h5py.h5t.py_create(np.dtype("<f4"))
        h5py.Dataset(h5py.h5d.create(f.id, b"compact", tid, space, dcpl=dcpl))[...] = values[:4]
        f.create_dataset("empty", shape=(100, 8), dtype="<f4", fillvalue=2.5)
        layout = h5py.VirtualLayout(shape=(400, 8), dtype="<f4")
        layout[:] = h5py.VirtualSource(f["odd"].file.filename, "cols", shape=(400, 8))
        f.create_virtual_dataset("virtual", layout)
    cases = {
        "cols": "span every axis but the first",
        "lzf": "stored with lzf.*to_zarr",
        "scaleoffset": "stored with scaleoffset",
        "compound": "stored as an HDF5 type",
        "strings": "stored as an HDF5 type",
        "virtual": "virtual dataset",
    }
    for name, message in cases.items():
        with pytest.raises(NotImplementedError, match=message):
            oc.open(path, dataset=name).as_ndarray()
    with pytest.raises(NotImplementedError, match="rows per chunk"):
        oc.open(path, dataset="odd", mode="r+").as_ndarray("r+")
    compact = oc.open(path, dataset="compact").as_ndarray()
    assert np.array_equal(compact, values[:4]) and not compact.flags.writeable
    empty = oc.open(path, dataset="empty").as_ndarray()
    assert (empty == 2.5).all() and empty.shape == (100, 8)
    for name in ("compact", "empty"):
        with pytest.raises(NotImplementedError, match="r\\+"):
            oc.open(path, dataset=name, mode="r+").as_ndarray("r+")
