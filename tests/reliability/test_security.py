"""Security (issue 15, item 7): private temporary files, no path escapes from a store's root,
no unpickling of store data by default, no symlink races on temporary files.

Decisions the tests pin down:

- Spill files, the small-array heap file and workspace arena files have no name
  (``O_TMPFILE``; where a file system lacks it, ``mkostemp`` 0600 and unlinked at once) in
  ``<spill_dir>/oocarray-<uid>`` (0700, owned by the user; a link or a directory of another
  user at that path is refused, never followed).  Temporary stores live in a 0700 session
  directory inside it.
- Store paths are built from integers (chunk keys) and from names checked against a group's
  members (``dataset=``), so ``..``, absolute names and empty parts never leave the root.
- Reading follows what the store's owner put in it (a chunk file or a group member that is a
  symbolic link is read through it, as zarr-python and HDF5 do); *writing* never goes
  through a link: every chunk and metadata file is written to a new ``mkstemp`` file (O_EXCL,
  so never a pre-created link) beside its name and renamed over it, which replaces a link
  instead of writing where it points.
- Python objects (object dtypes, the ``pickle`` codec) are refused unless
  ``allow_object=True``.
"""

from __future__ import annotations

import json
import os
import pickle
import stat
from pathlib import Path

import h5py
import numpy as np
import pytest
import zarr

import oocarray as oc
from oocarray._memory import _spill_files
from testkit.children import run_python


def _mode(path: str | Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


# ---- private temporary files and directories ----

PLACED_FILES = """
import os, stat, numpy as np, oocarray as oc
from oocarray._memory import _spill_files
base = _spill_files.private_dir()
with oc.Manager("m", max_bytes="1M"):
    big = np.ones(1 << 20)                      # over budget: a file of its own
    with oc.Manager("small", location="mmap"):
        small = np.ones(1024)                   # 8 KiB on disk: the heap file
    ws = oc.Workspace("w", location="mmap")
    with ws:
        t = np.ones(1 << 18)                    # the arena's file
        del t
    t2 = oc.temp((64, 64), "f8")
    t2[...] = 1.0
    files = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
            info = os.fstat(int(fd))
        except OSError:
            continue
        if target.startswith(base):
            files.append((target, oct(stat.S_IMODE(info.st_mode)), info.st_nlink))
    named = sorted(str(p) for p in __import__("pathlib").Path(base).rglob("*"))
    print({"base": oct(stat.S_IMODE(os.lstat(base).st_mode)), "files": files,
           "named": named, "temp": t2.path})
    ws.close()
"""


def test_spill_heap_and_arena_files_are_private_and_nameless(tmp_path: Path) -> None:
    result = run_python(PLACED_FILES, env={"OOCARRAY_SPILL_DIR": str(tmp_path)})
    assert result.returncode == 0, result.stderr[-3000:]
    seen = eval(result.stdout.strip().splitlines()[-1])  # our own child's repr
    assert seen["base"] == "0o700"
    assert len(seen["files"]) >= 3, seen  # the big array, the heap file, the arena
    for target, mode, links in seen["files"]:
        if target.endswith(".lock"):
            assert mode == "0o600", (target, mode)
            continue
        assert mode == "0o600", (target, mode)
        assert links == 0, f"{target} has a name: a crash would leave it behind"
    session = [p for p in seen["named"] if p.endswith(".lock")]
    assert len(session) == 1
    for name in seen["named"]:  # only the temporary store's session, all of it private
        assert "temps-" in name, name
    assert seen["temp"].startswith(str(tmp_path / f"oocarray-{os.getuid()}"))


def test_temporary_store_directories_are_private(tmp_path: Path) -> None:
    oc.configure(spill_dir=tmp_path)
    t = oc.temp((256, 8), "f8", chunks=(32, 8))
    t[...] = 1.0
    path = Path(t.path)
    # The store itself is made by zarr-python (0755 under the umask): the two directories
    # above it are private, so no other user reaches it.
    for directory in (path.parent.parent, path.parent):
        assert _mode(directory) == 0o700, directory
        assert os.lstat(directory).st_uid == os.getuid()
    lock = Path(str(path.parent) + ".lock")
    assert _mode(lock) == 0o600
    t.close()


def test_a_link_at_the_spill_directory_is_refused_not_followed(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o755)
    base = tmp_path / "base"
    base.mkdir()
    (base / f"oocarray-{os.getuid()}").symlink_to(elsewhere)  # planted before we run
    oc.configure(spill_dir=base)  # a refused directory is reported when it is first used
    with pytest.raises(oc.SpillError) as caught:
        _spill_files.private_dir()
    assert "not a directory owned by this user" in str(caught.value)
    assert _mode(elsewhere) == 0o755, "the link's target was changed"
    assert list(elsewhere.iterdir()) == []


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to make a directory of another user")
def test_a_spill_directory_of_another_user_is_refused(tmp_path: Path) -> None:
    planted = tmp_path / f"oocarray-{os.getuid()}"
    planted.mkdir(mode=0o777)
    os.chown(planted, 12345, 12345)
    oc.configure(spill_dir=tmp_path)
    with pytest.raises(oc.SpillError):
        _spill_files.private_dir()


# ---- stores: files written by oocarray ----


def test_store_files_follow_the_umask_like_zarr_python(tmp_path: Path) -> None:
    """Chunks and metadata are made private by mkstemp; they get the mode an ordinary file
    would (0666 less the umask), as zarr-python's do, so a store can be shared."""
    umask = os.umask(0o022)
    try:
        x = oc.create(tmp_path / "a.zarr", (64, 4), "f4", chunks=(16, 4))
        x[...] = 1.0
        x.append(np.ones((8, 4), "f4"))
        z = zarr.create_array(tmp_path / "z.zarr", shape=(64, 4), chunks=(16, 4), dtype="f4")
        z[...] = 1.0
    finally:
        os.umask(umask)
    assert _mode(tmp_path / "z.zarr" / "c" / "0" / "0") == 0o644
    assert _mode(tmp_path / "a.zarr" / "c" / "0" / "0") == 0o644
    assert _mode(tmp_path / "a.zarr" / "c" / "4" / "0") == 0o644
    assert _mode(tmp_path / "a.zarr" / "zarr.json") == 0o644


def test_writes_replace_a_linked_chunk_never_write_through_it(tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_bytes(b"do not touch")
    x = oc.create(tmp_path / "a.zarr", (32, 4), "f8", chunks=(8, 4), codec="none")
    x[...] = 1.0
    chunk = tmp_path / "a.zarr" / "c" / "1" / "0"
    chunk.unlink()
    chunk.symlink_to(secret)
    x[8:16] = 2.0  # a whole chunk
    x[17] = 3.0  # a part: read (through the link, the owner's choice), then replaced
    assert secret.read_bytes() == b"do not touch"
    assert not chunk.is_symlink()
    assert oc.open(tmp_path / "a.zarr")[8, 0] == 2.0


def test_append_replaces_linked_metadata(tmp_path: Path) -> None:
    x = oc.create(tmp_path / "a.zarr", (0, 4), "f8", chunks=(8, 4))
    meta = tmp_path / "a.zarr" / "zarr.json"
    outside = tmp_path / "meta.json"
    outside.write_text(meta.read_text())
    meta.unlink()
    meta.symlink_to(outside)
    before = outside.read_text()
    x.append(np.ones((3, 4)))
    assert outside.read_text() == before
    assert json.loads(meta.read_text())["shape"] == [3, 4]


@pytest.mark.parametrize(
    "dataset", ["../outside", "../outside/x", "/etc", "a/../../outside", "..", ".", "", "//"]
)
def test_dataset_names_never_leave_the_group(tmp_path: Path, dataset: str) -> None:
    oc.create(tmp_path / "outside", (4,), "f8")  # an array just outside the group
    group = tmp_path / "g.zarr"
    oc.create(group, (4,), "f8", dataset="a/x")
    with pytest.raises((oc.StoreNotFoundError, ValueError)):
        oc.open(group, dataset=dataset)
    before = sorted(p for p in tmp_path.rglob("*") if group not in p.parents)
    try:  # refused, or ("/etc") a name inside the group, as an absolute HDF5 name would be
        made = oc.create(group, (4,), "f8", dataset=dataset)
        assert group in Path(made.path).parents
    except ValueError:
        pass
    assert sorted(p for p in tmp_path.rglob("*") if group not in p.parents) == before
    assert oc.open(tmp_path / "outside").shape == (4,)


@pytest.mark.parametrize("dataset", ["../outside", "/x/../../outside", "x/../.."])
def test_hdf5_names_stay_in_the_file(tmp_path: Path, dataset: str) -> None:
    with h5py.File(tmp_path / "f.h5", "w") as f:
        f["x"] = np.arange(4.0)
    with pytest.raises((oc.StoreNotFoundError, ValueError, KeyError)):
        oc.open(tmp_path / "f.h5", dataset=dataset)


def test_hdf5_external_links_are_refused(tmp_path: Path) -> None:
    with h5py.File(tmp_path / "other.h5", "w") as f:
        f["secret"] = np.arange(4.0)
    with h5py.File(tmp_path / "f.h5", "w") as f:
        f["link"] = h5py.ExternalLink(str(tmp_path / "other.h5"), "/secret")
    with pytest.raises((ValueError, oc.StoreNotFoundError)):
        oc.open(tmp_path / "f.h5", dataset="link")


# ---- no unpickling ----


class _Planted:
    """Unpickling this touches a file: proof that store data was unpickled."""

    def __init__(self, mark: Path) -> None:
        self.mark = mark

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (os.mkdir, (str(self.mark),))


def _v2(path: Path, dtype: str, filters: object, compressor: object, payload: bytes) -> None:
    path.mkdir()
    meta = {
        "zarr_format": 2,
        "shape": [1],
        "chunks": [1],
        "dtype": dtype,
        "compressor": compressor,
        "fill_value": None,
        "order": "C",
        "filters": filters,
    }
    (path / ".zarray").write_text(json.dumps(meta))
    (path / "0").write_bytes(payload)


@pytest.mark.parametrize(
    ("dtype", "filters", "compressor"),
    [
        ("|O", [{"id": "pickle"}], None),
        ("<f8", [{"id": "pickle"}], None),
        ("<f8", None, {"id": "pickle"}),
        ("|O", None, {"id": "pickle"}),
    ],
    ids=["object+pickle-filter", "f8+pickle-filter", "f8+pickle-compressor", "object+pickle"],
)
def test_pickled_zarr_chunks_are_never_unpickled(
    tmp_path: Path, dtype: str, filters: object, compressor: object
) -> None:
    mark = tmp_path / "mark"
    _v2(tmp_path / "a.zarr", dtype, filters, compressor, pickle.dumps(_Planted(mark)))

    def read() -> object:
        return oc.open(tmp_path / "a.zarr")[...]

    with pytest.raises((ValueError, TypeError)):
        read()
    assert not mark.exists(), "store data was unpickled"


def test_an_object_npy_file_is_refused_without_allow_object(tmp_path: Path) -> None:
    mark = tmp_path / "mark"
    np.save(tmp_path / "o.npy", np.array([_Planted(mark)], dtype=object), allow_pickle=True)
    with pytest.raises(ValueError, match="allow_object"):
        oc.open(tmp_path / "o.npy")
    assert not mark.exists()
    x = oc.open(tmp_path / "o.npy", allow_object=True)  # trusted: the user said so
    assert mark.exists() and x.dtype == object
    x.close()


def test_an_object_hdf5_dataset_is_refused_without_allow_object(tmp_path: Path) -> None:
    with h5py.File(tmp_path / "s.h5", "w") as f:
        f.create_dataset("s", data=["a", "bb"], dtype=h5py.string_dtype())
    with pytest.raises(ValueError, match="allow_object"):
        oc.open(tmp_path / "s.h5")
