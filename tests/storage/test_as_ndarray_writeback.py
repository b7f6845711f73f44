"""Chunk-backed ``"r+"`` ndarrays written back natively (native/writeback.c): under budget
pressure the least recently filled dirty chunks are encoded and written back, each whole, so
that an array written all over stays within its manager's budget; ``flush()`` and ``close()``
write the rest.  What is on disk is plain zarr: zarr-python reads every write.

Everything here needs userfaultfd with kernel-mode faults and is skipped without it."""

from __future__ import annotations

import errno
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numcodecs
import numpy as np
import pytest
import zarr
import zarr.codecs
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import oocarray as oc
from oocarray._storage._paged._arrays import paging_available
from oocarray._storage._zarr._chunk_files import new_file_mode
from testkit.children import start_python
from tests.reliability._helpers import rounds

pytestmark = pytest.mark.skipif(
    not paging_available()[0], reason=f"no chunk-backed ndarrays here: {paging_available()[1]}"
)

COLS = 64
BUDGET = 512 << 10
UNIT = 64 << 10  # a fill unit: 64 KiB
SLACK = 2 * UNIT  # a fill counts its unit before it drops others to make room


def _create(
    path: Path,
    rows: int,
    chunk_rows: int,
    *,
    zarr_format: int,
    codec: str,
    dtype: str = "float64",
    fill_value: float = -3,
    **kw: Any,
) -> np.ndarray:
    """A zarr array made by zarr-python, every chunk written; its values."""
    if codec == "zstd":
        compressors: Any = (
            numcodecs.Zstd(level=3, checksum=True)
            if zarr_format == 2
            else zarr.codecs.ZstdCodec(level=5, checksum=True)
        )
    else:
        compressors = None
    z = zarr.create_array(
        store=str(path),
        shape=(rows, COLS),
        chunks=(chunk_rows, COLS),
        dtype=dtype,
        fill_value=fill_value,
        zarr_format=zarr_format,
        compressors=compressors,
        **kw,
    )
    values = np.arange(rows * COLS, dtype=np.float64).reshape(rows, COLS).astype(dtype)
    z[...] = values
    return values


def _resident(x: oc.ChunkedArray) -> int:
    return x.paging_stats()[0]["resident_bytes"]


CASES = [
    pytest.param(3, "zstd", 128, "float64", {}, id="v3-zstd-checksum"),
    pytest.param(3, "none", 32, "float64", {}, id="v3-raw-4-chunks-a-unit"),
    pytest.param(
        3,
        "zstd",
        128,
        "int64",
        {"chunk_key_encoding": {"name": "v2", "separator": "/"}},
        id="v3-zstd-v2-keys",
    ),
    pytest.param(2, "zstd", 128, ">f8", {}, id="v2-zstd-big-endian"),
    pytest.param(2, "none", 128, "float64", {}, id="v2-raw"),
]


@pytest.mark.parametrize(("zarr_format", "codec", "chunk_rows", "dtype", "kw"), CASES)
def test_writes_over_the_budget_stay_within_it_and_zarr_reads_them(
    tmp_path: Path, zarr_format: int, codec: str, chunk_rows: int, dtype: str, kw: dict[str, Any]
) -> None:
    rows = 6000  # 3 MiB, six times the budget; the last chunk is cut short
    path = tmp_path / "a.zarr"
    model = _create(path, rows, chunk_rows, zarr_format=zarr_format, codec=codec, dtype=dtype, **kw)
    x = oc.open(path, mode="r+")
    rng = np.random.default_rng(5)
    with oc.Manager(max_bytes=BUDGET) as m:
        view = x.as_ndarray("r+")
        for start in range(0, rows, 100):  # row order
            view[start : start + 100] = -(start + 1)
            model[start : start + 100] = -(start + 1)
            assert _resident(x) <= BUDGET + SLACK
        stats = x.paging_stats()[0]
        assert stats["writebacks"] > 0 and stats["writeback_failures"] == 0
        assert stats["dirty_units"] * UNIT <= BUDGET
        # Written back under pressure, before any flush: the first half is on disk already.
        on_disk = zarr.open_array(str(path), mode="r")
        assert np.array_equal(on_disk[: rows // 2], model[: rows // 2])
        for k in range(400):  # at random, single rows and runs
            i = int(rng.integers(0, rows))
            n = int(rng.integers(1, 40))
            view[i : i + n] = k
            model[i : i + n] = k
            assert _resident(x) <= BUDGET + SLACK
        assert x.flush() > 0  # the units still dirty
        assert x.paging_stats()[0]["dirty_units"] == 0
        assert np.array_equal(view, model)  # what was dropped comes back from the store
        assert m.stats().peak_bytes <= BUDGET + SLACK
        del view
    got = zarr.open_array(str(path), mode="r")[...]
    assert got.dtype == np.dtype(dtype)
    assert np.array_equal(got, model)
    assert not list(path.rglob(".tmp-*")), "a temporary chunk file was left behind"
    for f in path.rglob("*"):
        if f.is_file() and not f.name.startswith((".z", "zarr.json")):
            assert f.stat().st_mode & 0o777 == new_file_mode(), f


def test_the_last_chunk_is_stored_whole_with_the_fill_value(tmp_path: Path) -> None:
    path = tmp_path / "e.zarr"
    model = _create(path, 1000, 128, zarr_format=3, codec="none", fill_value=7.25)
    x = oc.open(path, mode="r+")
    view = x.as_ndarray("r+")
    view[-5:] = 3.0  # chunk 7 holds rows 896-1023: 104 of the array, 24 past its end
    model[-5:] = 3.0
    assert x.flush() == 1
    stored = np.fromfile(path / "c" / "7" / "0", dtype="<f8").reshape(128, COLS)
    assert np.array_equal(stored[:104], model[896:])
    assert (stored[104:] == 7.25).all()
    del view
    assert np.array_equal(zarr.open_array(str(path), mode="r")[...], model)


def test_a_missing_chunk_directory_is_made(tmp_path: Path) -> None:
    path = tmp_path / "m.zarr"
    oc.create(path, (4096, COLS), "float64", chunks=(128, COLS), codec="zstd")  # no chunk yet
    assert not (path / "c").exists()
    x = oc.open(path, mode="r+")
    model = np.zeros((4096, COLS))
    with oc.Manager(max_bytes=BUDGET):
        view = x.as_ndarray("r+")
        view[::7] = 1.0
        model[::7] = 1.0
        assert x.paging_stats()[0]["writebacks"] > 0
        x.close()  # writes the rest back
        del view
    assert np.array_equal(zarr.open_array(str(path), mode="r")[...], model)


def test_writes_and_flushes_from_threads(tmp_path: Path) -> None:
    rows, writers = 8192, 4  # 4 MiB, eight times the budget
    path = tmp_path / "t.zarr"
    model = _create(path, rows, 128, zarr_format=3, codec="zstd")
    x = oc.open(path, mode="r+")
    errors: list[BaseException] = []
    peak = [0]
    done = threading.Event()
    with oc.Manager(max_bytes=BUDGET):
        view = x.as_ndarray("r+")

        def write(view: np.ndarray, t: int) -> None:
            try:
                rng = np.random.default_rng(t)
                mine = np.arange(t, rows, writers)  # rows of their own: the model is exact
                for k, i in enumerate(rng.permutation(mine)[:600]):
                    view[i] = t * 10**6 + k
                    model[i] = t * 10**6 + k
                    if k % 100 == 0:
                        peak[0] = max(peak[0], _resident(x))
            except BaseException as error:
                errors.append(error)

        def flush() -> None:
            try:
                while not done.is_set():
                    x.flush()  # beside eviction's write-backs, never the same unit at once
                    time.sleep(0.01)
            except BaseException as error:
                errors.append(error)

        threads = [threading.Thread(target=write, args=(view, t)) for t in range(writers)]
        flusher = threading.Thread(target=flush)
        flusher.start()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        done.set()
        flusher.join()
        assert not errors, errors
        assert peak[0] <= BUDGET + writers * SLACK  # each writer's fill counts before room is made
        assert x.paging_stats()[0]["writebacks"] > 0
        assert np.array_equal(view, model)
        x.flush()
        del view
    assert np.array_equal(zarr.open_array(str(path), mode="r")[...], model)


def _fill_up(path: Path) -> int | None:
    """Write to ``path`` until the disk refuses; its errno."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT)
    try:
        while True:
            try:
                os.write(fd, b"\1" * 4096)
            except OSError as error:
                return error.errno
    finally:
        os.close(fd)


def test_a_full_disk_keeps_the_writes_in_memory_and_flush_raises(
    tiny_tmpfs: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    path = tiny_tmpfs / "f.zarr"
    model = _create(path, 2048, 128, zarr_format=3, codec="none")  # 1 MiB of 4
    filler = tiny_tmpfs / "filler"
    assert _fill_up(filler) == errno.ENOSPC  # no room left for a new chunk file
    x = oc.open(path, mode="r+")
    with oc.Manager(max_bytes=256 << 10):
        view = x.as_ndarray("r+")
        view[...] = -model
        stats = x.paging_stats()[0]
        # Nothing could be written back: every unit stays dirty, in memory, over the budget.
        assert stats["writeback_failures"] > 0 and stats["dirty_units"] == 16
        assert _resident(x) == 2048 * COLS * 8
        assert x._paged is not None
        (pages,) = list(x._paged._pages)
        assert "No space left" in pages.writeback_error
        assert "under memory pressure failed" in capfd.readouterr().err
        with pytest.raises(OSError, match="No space left") as caught:
            x.flush()
        assert caught.value.errno == errno.ENOSPC
        assert np.array_equal(view, -model)  # nothing lost
        assert np.array_equal(zarr.open_array(str(path), mode="r")[...], model)  # old, whole
        filler.unlink()
        assert x.flush() == 16
        del view
    assert np.array_equal(zarr.open_array(str(path), mode="r")[...], -model)
    assert not list(path.rglob(".tmp-*"))


KILL_LOOP = """
import numpy as np, oocarray as oc
path = PATH
rows, cols, chunk = 4096, 64, 128
x = oc.open(path, mode="r+")
base = np.arange(rows * cols).reshape(rows, cols)
with oc.Manager(max_bytes="256K"):
    view = x.as_ndarray("r+")
    print("ready", flush=True)
    r = 1
    while True:
        for start in range(0, rows, chunk):  # each chunk in one assignment
            view[start : start + chunk] = base[start : start + chunk] + r * 10**9
        r += 1
"""


def test_kill_minus_nine_during_eviction_write_back_leaves_whole_chunks(tmp_path: Path) -> None:
    rng = random.Random(13)
    for i in range(rounds(2, 20)):
        path = tmp_path / f"k{i}.zarr"
        x = oc.create(path, (4096, COLS), np.int64, chunks=(128, COLS), codec="zstd")
        x[...] = np.arange(4096 * COLS).reshape(4096, COLS)
        child = start_python(KILL_LOOP.replace("PATH", repr(str(path))))
        assert child.stdout is not None
        try:
            assert child.stdout.readline().strip() == "ready"
            time.sleep(rng.uniform(0.3, 1.0))
        finally:
            child.send_signal(signal.SIGKILL)
            child.communicate(timeout=30)
        assert child.returncode == -signal.SIGKILL
        got = zarr.open_array(str(path), mode="r")[...]  # every chunk decodes
        base = np.arange(4096 * COLS).reshape(4096, COLS)
        rounds_seen = set()
        for start in range(0, 4096, 128):
            part = got[start : start + 128] - base[start : start + 128]
            r = int(part[0, 0]) // 10**9
            assert (part == r * 10**9).all(), f"rows {start}: a chunk mixing two writes"
            rounds_seen.add(r)
        assert max(rounds_seen) >= 1, "nothing was written back before the kill"


def test_closing_the_manager_writes_the_dirty_chunks_back(tmp_path: Path) -> None:
    path = tmp_path / "c.zarr"
    model = _create(path, 1024, 128, zarr_format=3, codec="zstd")
    x = oc.open(path, mode="r+")
    with oc.Manager(max_bytes=4 << 20):  # room for every unit: nothing goes back under pressure
        view = x.as_ndarray("r+")
        view[::3] = -1.5
        model[::3] = -1.5
        assert x.paging_stats()[0]["dirty_units"] > 0
        assert not np.array_equal(zarr.open_array(str(path), mode="r")[...], model)
    # the manager is closed, the view still alive: its chunks are on disk, and it stays usable
    assert x.paging_stats()[0]["dirty_units"] == 0
    assert np.array_equal(zarr.open_array(str(path), mode="r")[...], model)
    view[0] = 7
    model[0] = 7
    assert x.flush() >= 1
    assert np.array_equal(zarr.open_array(str(path), mode="r")[...], model)


def test_an_array_alive_at_exit_is_written_back(tmp_path: Path) -> None:
    """No flush(), no manager closed: the process ends with the view alive, and its writes
    are in the store."""
    path = tmp_path / "e.zarr"
    model = _create(path, 1024, 128, zarr_format=3, codec="zstd")
    script = (
        "import sys, oocarray as oc\n"
        "view = oc.open(sys.argv[1], mode='r+').as_ndarray('r+')\n"
        "view[5] = 7.0\n"
        "view[-1] = 9.0\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, str(path)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    model[5] = 7.0
    model[-1] = 9.0
    assert np.array_equal(zarr.open_array(str(path), mode="r")[...], model)


def test_a_failed_write_back_at_manager_close_warns_and_keeps_the_data(
    tiny_tmpfs: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    path = tiny_tmpfs / "f.zarr"
    model = _create(path, 2048, 128, zarr_format=3, codec="none")  # 1 MiB of 4
    filler = tiny_tmpfs / "filler"
    assert _fill_up(filler) == errno.ENOSPC
    x = oc.open(path, mode="r+")
    manager = oc.Manager(max_bytes=4 << 20)
    with manager.activate():
        view = x.as_ndarray("r+")
        view[...] = -model
    with pytest.warns(ResourceWarning, match="could not be written back when its manager"):
        manager.close()
    capfd.readouterr()
    assert np.array_equal(view, -model)  # nothing lost
    assert np.array_equal(zarr.open_array(str(path), mode="r")[...], model)  # old, whole
    filler.unlink()
    assert x.flush() == 16
    del view
    assert np.array_equal(zarr.open_array(str(path), mode="r")[...], -model)


# one write: (start row, rows, row step, value); applied through a view of the r+ array
Write = tuple[int, int, int, int]
writes = st.lists(
    st.tuples(st.integers(0, 2999), st.integers(1, 300), st.integers(1, 3), st.integers(-99, 99)),
    min_size=1,
    max_size=30,
)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    first=writes,
    second=writes,
    zarr_format=st.sampled_from([2, 3]),
    codec=st.sampled_from(["zstd", "none"]),
    budget_units=st.integers(1, 12),
)
def test_writes_through_views_and_threads_equal_the_array_in_ram(
    first: list[Write],
    second: list[Write],
    zarr_format: int,
    codec: str,
    budget_units: int,
) -> None:
    """Two threads write through views of one r+ array (the budget from one fill unit up:
    evictions and write-backs under pressure among the writes); what the array, its views,
    and zarr-python read afterwards equals the same writes made to an array in RAM."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "h.zarr"
        model = _create(path, 3000, 128, zarr_format=zarr_format, codec=codec, dtype="int64")
        x = oc.open(path, mode="r+")
        lock = threading.Lock()  # the model is written in the order the writes land
        with oc.Manager(max_bytes=budget_units * UNIT):
            view = x.as_ndarray("r+")
            columns = view[:, ::2]  # a view of a view: writes go to the same pages

            def write(batch: list[Write], target: np.ndarray, step0: int) -> None:
                for start, n, step, value in batch:
                    with lock:
                        target[start : start + n : step] = value
                        model[:, ::step0][start : start + n : step] = value

            threads = [
                threading.Thread(target=write, args=(first, view, 1)),
                threading.Thread(target=write, args=(second, columns, 2)),
            ]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            assert np.array_equal(view, model)
            assert np.array_equal(columns, model[:, ::2])
            x.flush()
            del view, columns
        assert np.array_equal(zarr.open_array(str(path), mode="r")[...], model)
        assert np.array_equal(oc.open(path)[...], model)
