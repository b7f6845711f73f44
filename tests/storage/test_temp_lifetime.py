"""Temporary chunked arrays (``oc.temp``, ``from_numpy``, ``from_dask``) live like ndarrays:
escapes are kept and counted by the parent, data goes with the last reference, at exit, or
after a crash at the next process's first temporary array; nothing is ever left behind."""

from __future__ import annotations

import gc
import os
import signal
import subprocess
import textwrap
import warnings
from collections.abc import Callable
from pathlib import Path

import dask.array as da
import numpy as np
import pytest

import oocarray as oc
from testkit.children import run_python, start_python

DATA = np.arange(60, dtype=np.float64).reshape(12, 5)

MAKERS: dict[str, Callable[[], oc.ChunkedArray]] = {
    "temp": lambda: _filled(oc.temp(DATA.shape, DATA.dtype, chunks=(4, 5))),
    "from_numpy": lambda: oc.from_numpy(DATA, chunks=(4, 5)),
    "from_dask": lambda: oc.from_dask(da.from_array(DATA, chunks=(4, 5))),
}


def _filled(t: oc.ChunkedArray) -> oc.ChunkedArray:
    t[...] = DATA
    return t


def _private_dir(spill_dir: Path) -> Path:
    return spill_dir / f"oocarray-{os.getuid()}"


def _leftovers(spill_dir: Path) -> list[str]:
    """Everything temporary arrays left in the private spill directory, sessions included."""
    private = _private_dir(spill_dir)
    return sorted(os.listdir(private)) if private.exists() else []


def _temp_arrays(spill_dir: Path) -> list[str]:
    """The directories of temporary arrays in the private spill directory, wherever they are."""
    return sorted(p.name for p in _private_dir(spill_dir).rglob("temp-*.zarr"))


@pytest.fixture
def spill_dir(tmp_path: Path) -> Path:
    oc.configure(spill_dir=tmp_path)
    return tmp_path


@pytest.mark.parametrize("maker", list(MAKERS))
def test_a_temporary_array_escapes_its_manager_like_an_ndarray(spill_dir: Path, maker: str) -> None:
    with oc.Manager("outer") as outer:
        with oc.Manager("inner"):
            escaped_ndarray = np.ones(1000)
            t = MAKERS[maker]()
            path = Path(t.path)
        stats = outer.stats()
        assert stats.escaped == 2, "the temporary counts as an escape, like the ndarray"
        assert stats.escaped_bytes == escaped_ndarray.nbytes + DATA.nbytes
        assert path.is_dir()
        assert np.array_equal(t[...], DATA), "reads after the close see the data, not zeros"
        t[0] = -1.0
        assert t[0, 0] == -1.0
    assert oc.system().stats().escaped >= 2, "handed on again when the parent closed"
    assert np.array_equal(t[1:], DATA[1:])
    del t
    gc.collect()
    assert not path.exists(), "deleted with its last reference"
    assert _temp_arrays(spill_dir) == []


def test_a_temporary_array_dropped_inside_its_manager_is_deleted_at_once(spill_dir: Path) -> None:
    with oc.Manager("owner") as owner:
        t = oc.temp((10, 3), np.int32)
        path = Path(t.path)
        del t
        assert not path.exists()
    assert owner.stats().escaped == 0


def test_a_closed_temporary_array_refuses_reads_and_writes(spill_dir: Path) -> None:
    with oc.Manager():
        t = oc.from_numpy(DATA, chunks=(4, 5))
        path = Path(t.path)
    t.close()
    assert t.closed
    assert not path.exists()
    with pytest.raises(oc.ClosedError, match="closed and its data deleted"):
        t[...]
    with pytest.raises(oc.ClosedError):
        t[3]
    with pytest.raises(oc.ClosedError):
        t[...] = 1.0
    with pytest.raises(oc.ClosedError):
        t.to_dask()
    assert not path.exists(), "a write after deletion never re-creates the directory"
    t.close()  # closing twice does nothing
    assert "temporary" in repr(t)


def test_on_close_raise_reports_an_escaped_temporary_array(spill_dir: Path) -> None:
    strict = oc.Manager("strict", on_close="raise")
    with strict.activate():
        t = oc.temp((8,), np.float32)
        t[...] = 2.0
    with pytest.raises(oc.ScopeLeakError, match="1 array"):
        strict.close()
    assert float(t[...].sum()) == 16.0, "still valid, as escaped ndarrays are"


def test_closed_arrays_of_every_format_raise_closed_error(tmp_path: Path) -> None:
    x = oc.create(tmp_path / "x.zarr", (4, 4), np.float32)
    x.close()
    with pytest.raises(oc.ClosedError, match="open it again"):
        x[0]


@pytest.mark.parametrize(
    "bad_call",
    [
        lambda: oc.temp((10,), object),
        lambda: oc.temp((10, 10), np.float32, chunks=(0, 5)),
        lambda: oc.temp((10,), np.float32, codec="nope"),
        lambda: oc.from_numpy(np.array([None, 1], dtype=object)),
        lambda: oc.from_dask(da.zeros((10,), chunks=5).map_blocks(_fail, dtype=float)),
    ],
    ids=["object-dtype", "bad-chunks", "bad-codec", "object-from-numpy", "failing-dask"],
)
def test_a_failed_call_leaves_no_directory(spill_dir: Path, bad_call: Callable[[], object]) -> None:
    with pytest.raises((ValueError, TypeError, ZeroDivisionError)):
        bad_call()
    gc.collect()
    assert _temp_arrays(spill_dir) == []


def _fail(block: np.ndarray) -> np.ndarray:
    raise ZeroDivisionError("a chunk that cannot be computed")


def _run(code: str, spill_dir: Path, **kwargs: object) -> subprocess.CompletedProcess[str]:
    """``code`` in a child whose temporary arrays go to ``spill_dir``."""
    return run_python(
        code, env={"OOCARRAY_SPILL_DIR": str(spill_dir)}, keep_settings=True, **kwargs
    )


MAKE_TEMPS = textwrap.dedent("""
    import os, sys
    import numpy as np
    import oocarray as oc

    outside = oc.temp((100, 10), np.float64)
    outside[...] = 1.0
    m = oc.Manager("never closed").__enter__()
    inside = oc.from_numpy(np.arange(1000.0))
    print(outside.path, inside.path, flush=True)
""")


def test_temporary_arrays_alive_at_exit_are_deleted(tmp_path: Path) -> None:
    result = _run(MAKE_TEMPS, tmp_path)
    assert result.returncode == 0, result.stderr
    for path in result.stdout.split():
        assert path.startswith(str(_private_dir(tmp_path)))
        assert not os.path.exists(path)
    assert _leftovers(tmp_path) == []


def test_what_a_killed_process_left_is_removed_by_the_next_one(tmp_path: Path) -> None:
    killed = _run(MAKE_TEMPS + "os.kill(os.getpid(), 9)\n", tmp_path)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    paths = killed.stdout.split()
    assert len(paths) == 2
    assert all(os.path.isdir(p) for p in paths), "a SIGKILL leaves the data behind"
    assert _leftovers(tmp_path) != []

    next_start = _run("import oocarray as oc\noc.temp((4,), 'i1')\n", tmp_path)
    assert next_start.returncode == 0, next_start.stderr
    assert not any(os.path.exists(p) for p in paths)
    assert _leftovers(tmp_path) == []


def test_the_temporary_arrays_of_a_live_process_are_left_alone(tmp_path: Path) -> None:
    code = MAKE_TEMPS + "sys.stdin.read()\nprint(float(outside[...].sum()), flush=True)\n"
    live = start_python(
        code,
        env={"OOCARRAY_SPILL_DIR": str(tmp_path)},
        keep_settings=True,
        stdin=subprocess.PIPE,
    )
    try:
        assert live.stdout is not None
        paths = live.stdout.readline().split()
        assert len(paths) == 2
        other = _run("import oocarray as oc\noc.temp((4,), 'i1')\n", tmp_path)
        assert other.returncode == 0, other.stderr
        assert all(os.path.isdir(p) for p in paths), "a live process's data is kept"
        out, err = live.communicate("", timeout=120)
    finally:
        if live.poll() is None:
            live.kill()
            live.wait()
    assert live.returncode == 0, err
    assert out.strip() == "1000.0"
    assert _leftovers(tmp_path) == []


def test_a_forked_child_leaves_its_parents_temporary_arrays_alone(tmp_path: Path) -> None:
    code = """
        import os, sys
        import numpy as np
        import oocarray as oc

        t = oc.temp((10,), np.int64)
        t[...] = 7
        pid = os.fork()
        if pid == 0:
            child = oc.temp((3,), np.int8)  # the child's own, deleted at its exit
            sys.exit(0)                      # runs the child's exit handlers
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        print(int(t[...].sum()), flush=True)
    """
    result = _run(code, tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "70"
    assert _leftovers(tmp_path) == []


def test_cleanup_touches_only_its_own_names_and_never_follows_links(tmp_path: Path) -> None:
    private = _private_dir(tmp_path)
    private.mkdir(mode=0o700)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "precious").write_text("keep me")
    dead = "temps-1-0123456789abcdef"
    (private / f"{dead}.lock").write_text("")  # a dead session whose directory is a link
    (private / dead).symlink_to(outside, target_is_directory=True)
    linked = "temps-2-0123456789abcdef"
    (private / f"{linked}.lock").symlink_to(outside / "precious")
    (private / linked).mkdir()
    (private / "temp-someone-else.zarr").mkdir()
    (private / "notes.txt").write_text("not ours")

    oc.configure(spill_dir=tmp_path)
    oc.temp((2,), np.int8)

    assert (outside / "precious").read_text() == "keep me"
    names = set(os.listdir(private))
    assert f"{dead}.lock" not in names, "the dead session's lock is removed"
    assert {dead, f"{linked}.lock", linked, "temp-someone-else.zarr", "notes.txt"} <= names


def test_a_temporary_array_of_strings_warns_of_nothing() -> None:
    # zarr-python warns that other libraries may not read fixed-width strings from a zarr v3
    # store; only oocarray reads a temporary one (found by the long hypothesis profile).
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        t = oc.temp((3,), "U4")
        t[...] = "ab"
        assert list(t[...]) == ["ab"] * 3
        t.close()
