"""Damaged stores, fuzzed (issue 15, item 5): metadata garbage, wrong shapes, missing keys,
shard indexes with valid checksums but wild offsets, damaged HDF5 files and ``.npy`` headers.

Run in a child interpreter by ``test_damaged_stores.py`` (``python -m pytest`` on this file),
so that a crash shows as the child's exit status instead of killing the test run; every
example arms ``faulthandler.dump_traceback_later`` so that a hang ends the child with the
stack of every thread.  Opening and small reads must succeed or raise one of ``ALLOWED``:
never another exception, a crash or a hang.  Example counts: the ``ci`` hypothesis profile
(derandomized) as set below; ``HYPOTHESIS_PROFILE=long`` runs 2000 each.
"""

from __future__ import annotations

import contextlib
import faulthandler
import json
import os
import shutil
import struct
import tempfile
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest
import zarr
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import oocarray as oc
from oocarray._storage._paged import _arrays as oc_paged

# Documented: oocarray's errors subclass ValueError, OSError, MemoryError or RuntimeError;
# zarr-python's metadata errors are ValueError/TypeError/KeyError; h5py's are OSError/KeyError.
ALLOWED = (oc.OOCArrayError, ValueError, TypeError, OSError, KeyError, IndexError)
LONG = os.environ.get("HYPOTHESIS_PROFILE") == "long"
HANG_S = int(os.environ.get("OOCARRAY_FUZZ_HANG_S", "60"))
DATA = np.arange(32 * 6, dtype=np.float64).reshape(32, 6)

PAGING = oc_paged.paging_available()[0]
COUNTS: dict[str, int] = {}  # examples run per test, printed at the end for RELIABILITY.md


def _examples(ci: int) -> Any:
    return settings(
        max_examples=2000 if LONG else ci,
        deadline=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )


@contextmanager
def _guarded(name: str) -> Iterator[None]:
    COUNTS[name] = COUNTS.get(name, 0) + 1
    faulthandler.dump_traceback_later(HANG_S, exit=True)
    try:
        with warnings.catch_warnings():
            # zarr-python warns about metadata it accepts against the spec: not a failure.
            warnings.simplefilter("ignore")
            yield
    finally:
        faulthandler.cancel_dump_traceback_later()


def _read_some(path: Path, **kwargs: Any) -> None:
    """Open and read a little; only documented exceptions may come out.  Reads are small so
    that a damaged shape of 10**15 rows reads a few rows, not all of them."""
    try:
        x = oc.open(path, **kwargs)
    except ALLOWED:
        return
    n = x.ndim
    for key in ((slice(0, 2),) * n, (slice(-1, None),) * n, (0,) * n, (slice(None),) * n):
        if key and key[0] == slice(None) and x.size > 4096:
            continue  # the whole array only when it is small, whatever the shape says
        try:
            with oc.Manager("fuzz", max_bytes="64M", spill="fail"):
                x[key]
        except ALLOWED:
            pass
    with contextlib.suppress(*ALLOWED, NotImplementedError):  # layouts it does not page
        _read_paged(x)
    with contextlib.suppress(ALLOWED):
        repr(x)
    x.close()


def _read_paged(x: Any) -> None:
    """The same small reads through ``x.as_ndarray()``: a chunk that cannot be read there is a
    ``CorruptChunkError`` in this thread, raised as the call that touched it returns, never a
    SIGBUS (issue 21)."""
    if not PAGING:
        return
    with oc.Manager("fuzz-paged", max_bytes="64M", spill="fail"):
        view = x.as_ndarray()
        n = view.ndim
        for key in ((slice(0, 2),) * n, (slice(-1, None),) * n):
            np.array(view[key])


# ---- the stores ----


def _v3(path: Path) -> None:
    oc.create(path, DATA.shape, DATA.dtype, chunks=(8, 6))[...] = DATA


def _v3_sharded(path: Path) -> None:
    oc.create(path, DATA.shape, DATA.dtype, chunks=(8, 6), shards=(16, 6), codec="none")[...] = DATA


def _v2(path: Path) -> None:
    z = zarr.create_array(path, shape=DATA.shape, chunks=(8, 6), dtype=DATA.dtype, zarr_format=2)
    z[...] = DATA


MAKERS: dict[str, tuple[Callable[[Path], None], str]] = {
    "v3": (_v3, "zarr.json"),
    "v3-sharded": (_v3_sharded, "zarr.json"),
    "v2": (_v2, ".zarray"),
}


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("pristine")
    made = {}
    for name, (make, _) in MAKERS.items():
        made[name] = root / f"{name}.zarr"
        make(made[name])
    h5 = root / "f.h5"
    with h5py.File(h5, "w") as f:
        f.create_dataset("c", data=DATA, chunks=(8, 6), compression="gzip")
        f["plain"] = DATA
    made["hdf5"] = h5
    return made


@contextmanager
def _copy(source: Path) -> Iterator[Path]:
    with tempfile.TemporaryDirectory() as scratch:
        path = Path(scratch) / source.name
        if source.is_dir():
            shutil.copytree(source, path)
        else:
            shutil.copy(source, path)
        yield path


# ---- metadata ----

JSON_LEAF = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
    st.sampled_from(["<f8", "|O", "float64", "object", "int8", "bool", "V8", "<U4", "S0", ""]),
)
JSON_VALUE = st.recursive(
    JSON_LEAF,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=8,
)
SHAPES = st.lists(st.integers(-3, 2**62), max_size=4)

# A damage: set a key (a path into the metadata) to a value, or delete it.
KEYS = [
    ("shape",),
    ("chunks",),
    ("dtype",),
    ("data_type",),
    ("fill_value",),
    ("order",),
    ("compressor",),
    ("filters",),
    ("codecs",),
    ("codecs", 0),
    ("codecs", 0, "name"),
    ("codecs", 0, "configuration"),
    ("codecs", 0, "configuration", "chunk_shape"),
    ("codecs", 0, "configuration", "index_location"),
    ("codecs", 0, "configuration", "codecs"),
    ("codecs", 0, "configuration", "index_codecs"),
    ("chunk_grid", "configuration", "chunk_shape"),
    ("chunk_grid", "name"),
    ("chunk_key_encoding",),
    ("chunk_key_encoding", "configuration", "separator"),
    ("zarr_format",),
    ("node_type",),
    ("dimension_separator",),
    ("dimension_names",),
]
DAMAGE = st.tuples(
    st.sampled_from(KEYS),
    st.one_of(st.just("<delete>"), JSON_VALUE, SHAPES),
)


def _apply(meta: Any, key: tuple[Any, ...], value: Any) -> None:
    target = meta
    for part in key[:-1]:
        try:
            target = target[part]
        except (KeyError, IndexError, TypeError):
            return
    try:
        if value == "<delete>":
            del target[key[-1]]
        else:
            target[key[-1]] = value
    except (KeyError, IndexError, TypeError):
        pass


@_examples(150)
@given(
    name=st.sampled_from(sorted(MAKERS)),
    damages=st.lists(DAMAGE, min_size=1, max_size=3),
)
def test_damaged_zarr_metadata(
    pristine: dict[str, Path], name: str, damages: list[tuple[tuple[Any, ...], Any]]
) -> None:
    with _copy(pristine[name]) as path, _guarded("zarr metadata: keys damaged"):
        meta_file = path / MAKERS[name][1]
        meta = json.loads(meta_file.read_text())
        for key, value in damages:
            _apply(meta, key, value)
        meta_file.write_text(json.dumps(meta))
        _read_some(path)


@_examples(50)
@given(
    name=st.sampled_from(sorted(MAKERS)),
    garbage=st.one_of(
        st.binary(max_size=64),
        st.floats(0, 1, exclude_max=True),
        JSON_VALUE.map(lambda v: json.dumps(v).encode()),
    ),
)
def test_garbage_zarr_metadata_files(
    pristine: dict[str, Path], name: str, garbage: bytes | float
) -> None:
    with _copy(pristine[name]) as path, _guarded("zarr metadata: file replaced or cut"):
        meta_file = path / MAKERS[name][1]
        if isinstance(garbage, float):  # cut short
            raw = meta_file.read_bytes()
            meta_file.write_bytes(raw[: int(garbage * len(raw))])
        else:
            meta_file.write_bytes(garbage)
        _read_some(path)


def _crc32c(data: bytes) -> int:
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 & -(crc & 1))
    return crc ^ 0xFFFFFFFF


U64 = st.one_of(
    st.integers(0, 2**64 - 1),
    st.sampled_from([0, 1, 2**63, 2**64 - 1, 2**64 - 2, 383, 384, 385, 10**6]),
)


@_examples(100)
@given(
    entries=st.lists(st.tuples(U64, U64), min_size=2, max_size=2),
    fix_crc=st.booleans(),
)
def test_shard_indexes_with_wild_offsets(
    pristine: dict[str, Path], entries: list[tuple[int, int]], fix_crc: bool
) -> None:
    """The index of a shard of two inner chunks: offsets and sizes anywhere, and a checksum
    that matches them (so only the bounds checks stand between them and a wild read)."""
    with _copy(pristine["v3-sharded"]) as path, _guarded("shard index: offsets, sizes, crc"):
        shard = path / "c" / "0" / "0"
        raw = shard.read_bytes()
        index = b"".join(struct.pack("<QQ", offset, size) for offset, size in entries)
        crc = _crc32c(index) if fix_crc else struct.unpack("<I", raw[-4:])[0]
        shard.write_bytes(raw[: -len(index) - 4] + index + struct.pack("<I", crc))
        _read_some(path)
        try:
            got = oc.open(path)[16:]  # the other shard is whole
        except ALLOWED as error:
            raise AssertionError(f"an undamaged shard did not read: {error!r}") from error
        assert np.array_equal(got, DATA[16:])


@_examples(50)
@given(
    cut=st.floats(0, 1, exclude_max=True),
    edits=st.lists(st.tuples(st.floats(0, 1, exclude_max=True), st.integers(0, 255)), max_size=6),
)
def test_damaged_hdf5_files(
    pristine: dict[str, Path], cut: float, edits: list[tuple[float, int]]
) -> None:
    with _copy(pristine["hdf5"]) as path, _guarded("hdf5: bytes changed, file cut"):
        raw = bytearray(path.read_bytes())
        for where, value in edits:
            raw[int(where * len(raw))] = value
        if not edits:
            raw = raw[: int(cut * len(raw))]
        path.write_bytes(bytes(raw))
        for dataset in ("c", "plain"):
            _read_some(path, dataset=dataset)


NPY_DESCR = st.one_of(
    st.sampled_from(["<f8", "|O", "<U3", "V0", "|V8", "<M8[s]", ">i2", "x", "", "<f8 ", "|b1"]),
    st.lists(st.tuples(st.text(max_size=3), st.sampled_from(["<f8", "|O", "<i4"])), max_size=3),
    JSON_LEAF,
)


@_examples(100)
@given(
    descr=NPY_DESCR,
    shape=st.one_of(st.lists(st.integers(-2, 2**40), max_size=3).map(tuple), JSON_LEAF),
    fortran=st.one_of(st.booleans(), JSON_LEAF),
    cut=st.one_of(st.none(), st.integers(0, 400)),
)
def test_damaged_npy_headers(
    tmp_path_factory: pytest.TempPathFactory, descr: Any, shape: Any, fortran: Any, cut: int | None
) -> None:
    """A .npy header saying anything (the data after it: 48 float64 values), or a file cut."""
    with tempfile.TemporaryDirectory() as scratch, _guarded(".npy: header fields, cut"):
        path = Path(scratch) / "a.npy"
        header = repr({"descr": descr, "fortran_order": fortran, "shape": shape})
        header_bytes = header.encode("latin1", "replace")
        pad = 64 - (10 + len(header_bytes) + 1) % 64
        body = header_bytes + b" " * pad + b"\n"
        raw = b"\x93NUMPY\x01\x00" + struct.pack("<H", len(body)) + body + DATA[:8].tobytes()
        path.write_bytes(raw if cut is None else raw[:cut])
        _read_some(path)


def test_counts(capsys: pytest.CaptureFixture[str]) -> None:
    """Print the examples each fuzz test ran (the parent test reads them)."""
    with capsys.disabled():
        print("\nCOUNTS " + json.dumps(COUNTS))
