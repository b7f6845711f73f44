"""Workspaces with ``location="zarr"``: the arena is compressed-spill memory (issue 13 item 4).

Pages a cycle touches come into RAM and count on the budget (the arena's size does not);
over the budget written units are encoded to a private file and paged back on touch at the
same address, so an arena several times the budget works; at the end of a cycle every unit
is dropped without being encoded, and the next cycle starts from zeros.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path

import numpy as np
import pytest

import oocarray as oc
from oocarray import _native
from oocarray._memory import _compressed
from testkit.children import run_python

MiB = 1 << 20
# Over the budget by the units being filled at that moment: a fill is charged before room is
# made, and one that finds every written unit already being encoded by another worker goes in
# anyway (the pager's rule, as for location="zarr" manager arrays).
SLACK = 4 * MiB

needs_pager = pytest.mark.skipif(
    not _compressed.available()[0], reason="compressed spill needs kernel-mode userfaultfd"
)


@pytest.fixture
def spill_dir(tmp_path: Path) -> Iterator[Path]:
    oc.configure(spill_dir=tmp_path)
    yield tmp_path
    oc.configure(spill_dir=None)
    _native.region_cache(-1)


def spill_file_bytes(directory: Path) -> int:
    """Bytes in the (unnamed) files this process has open in the spill directory."""
    total = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{fd}").startswith(str(directory)):
                total += os.stat(f"/proc/self/fd/{fd}").st_size
        except OSError:
            continue
    return total


def numpy_work(x: np.ndarray) -> tuple[np.ndarray, float]:
    """A cycle's worth of temporaries: about five times x."""
    y = np.sin(x) * 2 + x
    z = np.sort(y)
    w = np.zeros_like(y)
    w[::3] = z[::3]
    c = np.concatenate([w, y])
    return oc.detach(c[::97]), float(c.sum())


def run_cycles(ws: oc.Workspace, inputs: list[np.ndarray]) -> list[tuple[np.ndarray, float]]:
    results = []
    for x in inputs:
        with ws:
            results.append(numpy_work(x))
    return results


@needs_pager
def test_cycles_equal_a_ram_workspace_with_an_arena_four_times_the_budget(
    spill_dir: Path,
) -> None:
    rng = np.random.default_rng(0)
    inputs = [rng.standard_normal(MiB // 2) for _ in range(4)]  # 4 MiB each
    ram = oc.Workspace("ram", location="ram")
    expected = run_cycles(ram, inputs)
    ram.close()
    ws = oc.Workspace("zarr", location="zarr", max_bytes="4M")
    assert ws.location == ws.config.location == "zarr"
    got = run_cycles(ws, inputs)
    for (a, total_a), (b, total_b) in zip(expected, got, strict=True):
        np.testing.assert_array_equal(a, b)
        assert total_a == total_b
        assert oc.location(b) == "ram"  # detached: copied out to the parent
    s = ws.stats()
    assert s.size_bytes >= 4 * 4 * MiB, "the arena is several times the budget"
    assert s.arena_allocations > 0
    assert s.memory.peak_bytes <= 4 * MiB + SLACK, s.memory.peak_bytes
    assert s.memory.ram_bytes == 0, "a cycle's pages are dropped when it ends"
    assert s.memory.compressed_disk_bytes == 0
    ws.close()


@needs_pager
def test_each_cycle_starts_from_zeros_and_nothing_is_encoded_at_its_end(spill_dir: Path) -> None:
    ws = oc.Workspace("zeros", location="zarr", max_bytes="4M", learning="none", initial_size="16M")
    used_before = _native.spill_used()
    addresses = set()
    for k in range(4):
        with ws:
            a = np.zeros((12, MiB // 8), np.int64)  # 12 MiB, three times the budget
            addresses.add(a.ctypes.data)
            assert oc.location(a) == "workspace"
            assert not a.any(), f"cycle {k} read data of an earlier cycle"
            a[:] = k + 1  # every unit written: most are encoded under the budget
            assert ws.stats().memory.compressed_disk_bytes > 0
            assert (a == k + 1).all()  # paged back at the same address
            e = np.empty(1000)  # unspecified contents, but a valid block
            e[:] = 1.0
            del a, e
        s = ws.stats().memory
        assert (s.ram_bytes, s.compressed_disk_bytes) == (0, 0)
        assert spill_file_bytes(spill_dir) == 0, "the arena's file grows cycle after cycle"
        assert _native.spill_used() == used_before
    assert len(addresses) == 1
    assert ws.stats().memory.peak_bytes <= 4 * MiB + SLACK
    ws.close()


@needs_pager
def test_stats_count_resident_pages_not_the_arena(spill_dir: Path) -> None:
    with oc.Manager("parent", max_bytes="64M") as parent:
        ws = oc.Workspace("st", location="zarr", learning="none", initial_size="32M")
        with ws:
            s = ws.stats()
            assert s.size_bytes == 32 * MiB
            assert s.memory.ram_bytes == 0 and parent.stats().ram_bytes == 0
            assert s.memory.compressed_bytes == s.memory.spilled_bytes == 32 * MiB
            a = np.zeros(3 * MiB // 8, np.int64)  # zeros already: only the header is touched
            assert ws.stats().memory.ram_bytes <= MiB
            a[::512] = 1  # every page of 3 MiB
            ram = ws.stats().memory.ram_bytes
            assert 3 * MiB <= ram <= 7 * MiB, ram
            assert parent.stats().ram_bytes == ram, "counted once, up the tree"
            assert a.sum() == a.size // 512
            del a
        assert "workspace: arena 32.0 MiB" in parent.debug_dump()
        s = ws.stats()
        assert (s.memory.ram_bytes, s.memory.compressed_disk_bytes) == (0, 0)
        assert s.memory.compressed_bytes == 32 * MiB
        ws.close()
        s = parent.stats()
        assert (s.ram_bytes, s.compressed_bytes, s.compressed_disk_bytes) == (0, 0, 0)


@needs_pager
def test_a_workspace_inherits_location_zarr(spill_dir: Path) -> None:
    with oc.Manager("z", location="zarr", max_bytes="8M"):
        ws = oc.Workspace("loop")
        assert ws.location == ws.config.location == "zarr"
        for _ in range(2):
            with ws:
                a = np.ones(2 * MiB // 8)
                assert oc.location(a) == ("zarr" if ws.stats().cycles == 0 else "workspace")
                assert a.sum() == a.size
                del a
        ws.close()


@needs_pager
@pytest.mark.parametrize("on_escape", ["raise", "pin"])
def test_escaped_arena_arrays_stay_valid_under_pressure(spill_dir: Path, on_escape: str) -> None:
    ws = oc.Workspace(
        "esc",
        location="zarr",
        max_bytes="4M",
        learning="none",
        initial_size="16M",
        on_escape=on_escape,
    )
    kept = []
    for k in range(3):
        leak: AbstractContextManager[object] = (
            pytest.raises(oc.WorkspaceLeakError, match="still referenced")
            if on_escape == "raise"
            else contextlib.nullcontext()
        )
        with leak, ws:
            a = np.full(MiB, k, dtype=np.int64)  # 8 MiB
            b = a + 1
            assert int(b[-1]) == k + 1
            del b
            kept.append(a)
            del a
    s = ws.stats()
    assert (s.escapes, s.pinned_bytes) == (3, 3 * 16 * MiB)
    with ws:  # more work under the budget: escaped units are encoded and dropped
        c = np.full(12 * MiB // 8, 7, dtype=np.int64)
        assert (c == 7).all()
        del c
    for k, a in enumerate(kept):
        assert (a == k).all(), "an escaped array lost its data"
        assert oc.location(a) == "workspace"
    assert ws.stats().memory.peak_bytes <= 4 * MiB + SLACK
    kept.clear()
    del a
    s = ws.stats()
    assert s.pinned_bytes == 0
    assert s.memory.compressed_bytes == s.size_bytes  # the retired arenas are gone
    assert (s.memory.ram_bytes, s.memory.compressed_disk_bytes) == (0, 0)
    ws.close()
    s = ws.stats().memory
    assert (s.ram_bytes, s.compressed_bytes, s.compressed_disk_bytes) == (0, 0, 0)


@needs_pager
def test_arena_full_policies(spill_dir: Path) -> None:
    ext = oc.Workspace("ext", location="zarr", learning="none", initial_size="2M", max_bytes="4M")
    with ext:
        a = np.arange(MiB, dtype=np.int64)  # 8 MiB: outside the arena, compressed too
        assert oc.location(a) == "zarr"
        assert int(a[-1]) == MiB - 1 and ext.stats().spilled_allocations == 1
        del a
    ext.close()
    grow = oc.Workspace("grow", location="zarr", learning="none", spill="reallocate")
    for _ in range(2):
        with grow:
            a = np.arange(MiB, dtype=np.int64)
            where = oc.location(a)
            assert int(a[-1]) == MiB - 1
            del a
    assert where == "workspace" and grow.stats().size_bytes >= 8 * MiB
    grow.close()
    fail = oc.Workspace("fail", location="zarr", learning="none", initial_size="2M", spill="fail")
    with pytest.raises(oc.WorkspaceFullError), fail:
        np.ones(MiB)
    fail.close()


@needs_pager
@pytest.mark.parametrize(
    ("mode", "expected"),
    [("bypass", "zarr 2 False 0 True"), ("spill_everything", "zarr 2 True 3 True")],
)
def test_debug_switches(mode: str, expected: str) -> None:
    result = run_python(
        """
        import numpy as np, oocarray as oc
        ws = oc.Workspace("dbg", location="zarr", max_bytes="4M", on_escape="pin")
        for k in range(3):
            with ws:
                a = np.full(2 * 2**20, k, dtype=np.int64)  # 16 MiB
                b = a * 2
                assert int(b.sum()) == 4 * 2**20 * k, b.sum()
                del b
        s = ws.stats()
        print(oc.location(a), int(a[-1]), s.external_allocations >= 6, s.escapes,
              s.memory.peak_bytes <= 8 * 2**20)
        """,
        env={"OOCARRAY_WORKSPACES": mode},
        keep_settings=True,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == expected


@needs_pager
def test_one_workspace_per_thread(spill_dir: Path) -> None:
    errors: list[BaseException] = []
    peaks: list[int] = []

    def loop(seed: int) -> None:
        try:
            ws = oc.Workspace(
                f"t{seed}", location="zarr", max_bytes="4M", learning="none", initial_size="12M"
            )
            for k in range(3):
                with ws:
                    a = np.full(MiB, seed * 10 + k, dtype=np.int64)  # 8 MiB
                    b = a * 3
                    assert (b == 3 * (seed * 10 + k)).all()
                    assert (a == seed * 10 + k).all()
                    del a, b
            peaks.append(ws.stats().memory.peak_bytes)
            oc.destroy_workspaces()
        except BaseException as error:  # pragma: no cover - reported below
            errors.append(error)

    threads = [threading.Thread(target=loop, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert len(peaks) == 3 and max(peaks) <= 4 * MiB + SLACK, peaks


@needs_pager
def test_fork_mid_cycle_child_reads_the_arena(spill_dir: Path) -> None:
    ws = oc.Workspace(
        "forked", location="zarr", max_bytes="4M", learning="none", initial_size="24M"
    )
    with ws:
        a = np.arange(MiB, dtype=np.int64)  # 8 MiB
        b = a * 3  # 8 MiB: a's units were encoded to make room
        assert ws.stats().memory.compressed_disk_bytes > 0
        _ = b[:10].sum()
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child
            code = 1
            try:
                ok = bool((a == np.arange(MiB)).all() and (b == 3 * np.arange(MiB)).all())
                a[:] = -1  # the child's writes stay in the child
                ok = ok and bool((a == -1).all())
                del a, b
                ws.__exit__(None, None, None)
                for k in range(2):  # the child's own cycles, on the inherited arena
                    with ws:
                        c = np.zeros(2 * MiB, np.int64)  # 16 MiB
                        ok = ok and not c.any()
                        c[:] = k
                        ok = ok and bool((c == k).all())
                        del c
                code = 0 if ok else 1
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0, "the child saw other data"
        np.testing.assert_array_equal(a, np.arange(MiB))
        np.testing.assert_array_equal(b, 3 * np.arange(MiB))
        del a, b
    with ws:
        c = np.zeros(2 * MiB, np.int64)
        assert not c.any()
        del c
    assert ws.stats().memory.ram_bytes == 0
    ws.close()


def test_falls_back_to_mmap_with_one_warning() -> None:
    result = run_python(
        """
        import warnings, numpy as np, oocarray as oc
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            ws = oc.Workspace("fb", location="zarr")
            with oc.Manager(location="zarr"):
                inner = oc.Workspace("inherits")
        print(len(caught), caught[0].category.__name__, ws.location, ws.config.location,
              inner.location)
        for _ in range(3):
            with ws:
                a = np.ones(500_000)
                total = float((a * 2).sum())
                where = oc.location(a)
                del a
        print(where, total, ws.stats().size_bytes > 0)
        """,
        env={"OOCARRAY_USERFAULTFD": "0"},
        keep_settings=True,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == [
        "1",
        "CompressedSpillFallbackWarning",
        "mmap",
        "mmap",
        "mmap",
        "workspace",
        "1000000.0",
        "True",
    ]


@needs_pager
def test_an_arena_file_that_cannot_be_made_raises_spill_error(spill_dir: Path) -> None:
    ws = oc.Workspace("nofile", location="zarr", learning="none", initial_size="4M")
    shutil.rmtree(spill_dir / f"oocarray-{os.getuid()}")  # file creation fails: ENOENT
    try:
        with pytest.raises(oc.SpillError, match="compressed arena of workspace") as caught, ws:
            pass
        assert caught.value.errno == errno.ENOENT
        assert ws.stats().cycles == 0
    finally:
        ws.close()


@needs_pager
def test_max_spill_bytes_reached_while_encoding_keeps_the_data_in_ram(spill_dir: Path) -> None:
    oc.configure(max_spill_bytes="2M")
    noise = np.random.default_rng(1).random(MiB)  # 8 MiB that does not compress
    ws = oc.Workspace(
        "capped", location="zarr", max_bytes="4M", learning="none", initial_size="24M"
    )
    for k in range(2):
        with ws:
            a = noise + k
            b = a * 2
            np.testing.assert_array_equal(b, (noise + k) * 2)
            s = ws.stats().memory
            assert s.ram_bytes > 4 * MiB, "over the budget, counted, rather than lost"
            del a, b
        assert ws.stats().memory.ram_bytes == 0
        assert _native.spill_used() == 0
    ws.close()


CHILD_ON_A_FULL_DISK = """
import errno, numpy as np, oocarray as oc
MiB = 2**20
noise = np.random.default_rng(0).random(MiB)  # 8 MiB of noise on a 4 MiB disk
ws = oc.Workspace("full", location="zarr", max_bytes="4M", learning="none", initial_size="24M")
for k in range(2):
    with ws:
        a = noise + k
        b = a * 2
        print("cycle", k, bool(np.array_equal(b, (noise + k) * 2)))
        del a, b
with ws:
    c = np.empty(4 * MiB)  # 32 MiB, more than the arena: outside it, compressed
    c[:MiB] = noise
    try:
        oc.spill(c)
    except oc.SpillError as error:
        print("spill", error.errno == errno.ENOSPC)
    print("kept", bool(np.array_equal(c[:MiB], noise)))
    del c
s = ws.stats().memory
print("after", s.ram_bytes, s.peak_bytes > 12 * MiB)  # held in RAM, counted, over budget
ws.close()
print("exited normally")
"""


def test_a_full_disk_while_encoding_is_not_a_crash(tiny_tmpfs: Path) -> None:
    if not _compressed.available()[0]:
        pytest.skip("compressed spill needs kernel-mode userfaultfd")
    result = run_python(
        CHILD_ON_A_FULL_DISK, env={"OOCARRAY_SPILL_DIR": str(tiny_tmpfs)}, keep_settings=True
    )
    assert result.returncode == 0, result.stderr
    lines: list[str] = result.stdout.splitlines()
    check: Callable[[str], bool] = lines.__contains__
    assert check("cycle 0 True") and check("cycle 1 True"), result.stdout
    assert check("spill True") and check("kept True"), result.stdout
    assert check("after 0 True") and check("exited normally"), result.stdout
