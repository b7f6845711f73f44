"""Faults (issue 15, item 3): a full disk, ``kill -9``, Ctrl-C and ``fork()`` at bad moments.

Each is an exception (``SpillError``/``OSError`` with ``ENOSPC``, ``KeyboardInterrupt``) and
never a crash or a hang; what is on disk afterwards is consistent: stores open, every chunk
holds data that was written whole, spill directories hold no files.

Already covered elsewhere, and not repeated here: a full disk during ``oc.spill``, an
over-budget allocation and ``location="mmap"`` (tests/memory/test_spill.py), during a
workspace's learning cycle (test_workspace.py) and during ``x[...] = v`` of an unsharded zarr
array (tests/storage/test_chunk_writes.py); ``kill -9`` while one array is spilled and brought
back in a loop (test_spill.py); Ctrl-C during ``to_zarr`` (tests/compute/test_engine.py).

Code that touches native memory at a fault runs in a child interpreter, so that a crash
fails the test instead of killing pytest; every child has a timeout, so a hang fails too.
Loops repeat more with ``OOCARRAY_RELIABILITY_LONG=1``.
"""

from __future__ import annotations

import errno
import json
import random
import signal
import time
from pathlib import Path

import numpy as np
import pytest
import zarr

import oocarray as oc
from testkit.children import run_python, start_python
from tests.reliability._helpers import rounds

NOISE = np.random.default_rng(7).standard_normal((4096, 512)).astype(np.float32)  # 8 MiB


def _whole_chunks(path: Path, expected: np.ndarray, chunk_rows: int) -> None:
    """The array at ``path`` opens; each chunk of rows is the data written or the fill."""
    assert not list(path.rglob(".tmp-*")), "a temporary chunk file was left behind"
    got = oc.open(path)
    assert got.shape[1:] == expected.shape[1:]
    for start in range(0, got.shape[0], chunk_rows):
        block = got[start : start + chunk_rows]
        want = expected[start : start + len(block)]
        assert np.array_equal(block, want) or not block.any(), f"rows {start}: a mixed chunk"
    zarr.open_array(path, mode="r")  # zarr-python agrees that the metadata is whole


# ---- a full disk ----


def test_disk_full_during_to_zarr(tiny_tmpfs: Path) -> None:
    x = oc.from_numpy(NOISE, chunks=(256, 512))
    out = tiny_tmpfs / "out.zarr"
    with pytest.raises(OSError, match="No space left") as caught:
        (x * 2).to_zarr(out, chunks=(256, 512), progress=False)
    assert caught.value.errno == errno.ENOSPC
    _whole_chunks(out, NOISE * 2, 256)


def test_disk_full_during_a_sharded_write(tiny_tmpfs: Path) -> None:
    out = tiny_tmpfs / "s.zarr"
    y = oc.create(out, NOISE.shape, NOISE.dtype, chunks=(64, 512), shards=(512, 512))
    with pytest.raises(OSError, match="No space left") as caught:
        y[...] = NOISE
    assert caught.value.errno == errno.ENOSPC
    _whole_chunks(out, NOISE, 512)


def test_disk_full_during_append_keeps_the_old_length(tiny_tmpfs: Path) -> None:
    out = tiny_tmpfs / "a.zarr"
    y = oc.create(out, (0, 512), np.float32, chunks=(256, 512))
    y.append(NOISE[:300])  # a chunk and a part: the part is completed by the next append
    with pytest.raises(OSError, match="No space left") as caught:
        y.append(NOISE[300:])
    assert caught.value.errno == errno.ENOSPC
    assert oc.open(out).shape == (300, 512), "the metadata admits rows that were not written"
    assert np.array_equal(oc.open(out)[...], NOISE[:300])
    _whole_chunks(out, NOISE, 256)
    # Space freed (the chunks past the end that the failed append wrote): it grows again.
    for stray in (out / "c").iterdir():
        if int(stray.name) >= 2:
            for f in stray.rglob("*"):
                f.unlink()
    y2 = oc.open(out, mode="r+")
    y2.append(NOISE[300:400])
    assert np.array_equal(oc.open(out)[...], NOISE[:400])


def test_disk_full_during_from_batches_leaves_the_rows_written(tiny_tmpfs: Path) -> None:
    out = tiny_tmpfs / "b.zarr"
    blocks = (NOISE[i : i + 100] for i in range(0, len(NOISE), 100))
    with pytest.raises(OSError, match="No space left") as caught:
        oc.from_batches(blocks, out, chunks=(256, 512))
    assert caught.value.errno == errno.ENOSPC
    got = oc.open(out)
    assert got.shape[0] % 256 == 0 and got.shape[0] > 0
    assert np.array_equal(got[...], NOISE[: got.shape[0]])
    _whole_chunks(out, NOISE, 256)


DISK_FULL_NATIVE = """
import errno, numpy as np, oocarray as oc

def report(what, call):
    try:
        call()
        print(what, "ok")
    except OSError as error:  # SpillError, and MemoryBudgetError's cause
        print(what, type(error).__name__, errno.errorcode.get(error.errno, error.errno))
    except MemoryError as error:
        cause = error.__cause__ or error.__context__
        code = getattr(cause, "errno", None) if cause is not None else None
        text = "ENOSPC" if "ENOSPC" in str(error) or code == errno.ENOSPC else "?"
        print(what, type(error).__name__, text)

# evict: moving the oldest arrays out needs disk, and there is none
with oc.Manager("evict", max_bytes="24M", spill="evict") as m:
    keep = [np.full(1 << 20, i, np.float64) for i in range(3)]  # 24 MiB in RAM
    report("evict", lambda: keep.append(np.ones(1 << 20)))
    assert all((a == i).all() for i, a in enumerate(keep[:3])), "evicted data changed"

# small arrays placed on disk share a heap file: it cannot grow
with oc.Manager("small", location="mmap"):
    small = []
    def fill():
        for i in range(4000):  # 4000 x 8 KiB = 31 MiB, on a 4 MiB disk
            small.append(np.full(1024, i, np.float64))
    report("heap", fill)
    assert all((a == i).all() for i, a in enumerate(small)), "small arrays changed"
    del small

# a workspace arena in a file, growing cycle after cycle until the disk is full
ws = oc.Workspace("grow", location="mmap", learning="over_time", on_escape="pin")
def cycles():
    for n in range(1, 40):
        with ws:
            a = np.ones(n * 65536)  # 0.5 MiB more every cycle
            assert a.sum() == n * 65536
            del a
report("arena", cycles)
def after():  # the learned arena no longer fits the disk: refused again, the same way
    with ws:
        b = np.arange(1000.0)
        assert b.sum() == 499500.0
        del b
report("arena-after", after)
ws.close()
with oc.Workspace("ram", location="ram"):
    assert np.ones(1 << 20).sum() == 1 << 20

# an explicit spill of many arrays, one after another, until the disk is full
with oc.Manager("spill"):
    arrays = [np.full(262144, i, np.float64) for i in range(12)]  # 2 MiB each
    def spill_all():
        for a in arrays:
            oc.spill(a)
    report("spill", spill_all)
    assert all((a == i).all() for i, a in enumerate(arrays)), "spilled data changed"
    for a in arrays:
        if oc.location(a) == "mmap":
            oc.unspill(a)
    del arrays
print("exited normally")
"""


def test_disk_full_in_native_placement_is_an_error_never_a_crash(tiny_tmpfs: Path) -> None:
    result = run_python(DISK_FULL_NATIVE, env={"OOCARRAY_SPILL_DIR": str(tiny_tmpfs)})
    assert result.returncode == 0, result.stderr[-3000:]
    lines = dict(line.split(" ", 1) for line in result.stdout.splitlines() if " " in line)
    assert lines["evict"] in ("MemoryBudgetError ENOSPC", "ok"), lines
    assert lines["heap"].endswith("ENOSPC"), lines
    assert lines["arena"].endswith("ENOSPC"), lines
    assert lines["arena-after"] in ("SpillError ENOSPC", "ok"), lines
    assert lines["spill"] == "SpillError ENOSPC", lines
    assert "exited normally" in result.stdout
    leftovers = [p for p in tiny_tmpfs.rglob("*") if p.is_file()]
    assert leftovers == []


DISK_FULL_MESSAGE = """
import numpy as np, oocarray as oc

n = (3 << 20) // 8  # 3 MiB: the first array fits the 4 MiB disk, a second does not
with oc.Manager("budget", max_bytes="1M"):  # over budget: each array goes to disk
    try:
        np.ones(n) + np.ones(n)  # the first is a temporary, freed before NumPy raises
    except MemoryError as error:
        print(str(error).replace("\\n", " | "))
with oc.Manager("placed", location="mmap"):
    try:
        np.ones(n) + np.ones(n)
    except OSError as error:
        print(str(error))
"""


def _mib(text: str, pattern: str) -> float:
    """The size that ``pattern``'s group (a number and a unit) matches in ``text``, in MiB."""
    import re

    match = re.search(pattern, text)
    assert match, (pattern, text)
    number, unit = match.group(1).split()
    return float(number) * {"B": 1 / 1048576, "KiB": 1 / 1024, "MiB": 1.0, "GiB": 1024.0}[unit]


def test_a_full_disk_is_reported_as_it_was_at_the_failure(tiny_tmpfs: Path) -> None:
    """Issue 21, item 10: the message said "48.0 MiB free" (measured after the failed
    expression's temporary was freed) for a 30.5 MiB request refused by a full disk, and the
    tree said "0 B in 0 arrays" while that temporary was on disk."""
    result = run_python(DISK_FULL_MESSAGE, env={"OOCARRAY_SPILL_DIR": str(tiny_tmpfs)})
    assert result.returncode == 0, result.stderr[-3000:]
    budget, placed = result.stdout.strip().splitlines()
    for message in (budget, placed):
        assert "ENOSPC" in message, message
        needed = _mib(message, r"\(([\d.]+ \w+) needed")
        free = _mib(message, r"needed, ([\d.]+ \w+) free")
        held = _mib(message, r"arrays on disk there took ([\d.]+ \w+)\)")
        assert needed == 3.0
        assert free < needed, message  # what the disk had when it refused
        assert held >= 3.0, message  # the temporary, alive on disk at the failure
    assert "budget [open] 3.0 MiB in 1 arrays" in budget, budget
    assert "0 B in 0 arrays" not in budget


# ---- kill -9 ----

WRITE_LOOP = """
import sys, numpy as np, oocarray as oc
path, sharded = sys.argv[1], sys.argv[2] == "1"
rows, cols, chunk = 2048, 64, 128
x = oc.create(path, (rows, cols), np.int64, chunks=(chunk, cols), codec="zstd",
              shards=(512, cols) if sharded else None)
a = oc.create(path + ".append", (0, cols), np.int64, chunks=(chunk, cols))
print("ready", flush=True)
r = 1
while True:
    for start in range(0, rows, chunk * 2):  # two chunks a write, one shard in four
        block = np.arange(start * cols, (start + 2 * chunk) * cols).reshape(-1, cols) + r * 10**9
        x[start : start + 2 * chunk] = block
    n = a.shape[0]
    a.append(np.arange(n * cols, (n + 96) * cols).reshape(-1, cols))
    r += 1
"""


def _check_after_kill(path: Path, sharded: bool) -> dict[str, int]:
    x = oc.open(path)
    assert x.shape == (2048, 64)
    got = x[...]
    base = np.arange(2048 * 64).reshape(2048, 64)
    # What is whole: a chunk file; in a shard, the rows of one write (written in one file).
    unit = 256 if sharded else 128
    rounds_seen = set()
    for start in range(0, 2048, unit):
        part = got[start : start + unit] - base[start : start + unit]
        r = int(part[0, 0]) // 10**9
        assert (part == r * 10**9).all() or not got[start : start + unit].any(), (
            f"rows {start}: a chunk mixing two writes"
        )
        rounds_seen.add(r)
    appended = oc.open(str(path) + ".append")
    n = appended.shape[0]
    assert n % 96 == 0
    assert np.array_equal(appended[...], np.arange(n * 64).reshape(n, 64))
    zarr.open_array(path, mode="r")
    zarr.open_array(str(path) + ".append", mode="r")
    left = len(list(path.rglob(".tmp-*"))) + len(list(Path(str(path) + ".append").rglob(".tmp-*")))
    return {"rounds": len(rounds_seen), "appended": n, "tmp_left": left}


@pytest.mark.parametrize("sharded", [False, True], ids=["chunks", "shards"])
def test_kill_minus_nine_during_zarr_writes(tmp_path: Path, sharded: bool) -> None:
    rng = random.Random(15)
    seen = []
    for i in range(rounds(1, 20)):
        path = tmp_path / f"w{i}.zarr"
        code = WRITE_LOOP.replace("sys.argv[1]", repr(str(path))).replace(
            'sys.argv[2] == "1"', repr(sharded)
        )
        child = start_python(code)
        assert child.stdout is not None
        try:
            assert child.stdout.readline().strip() == "ready"
            time.sleep(rng.uniform(0.3, 1.2))
        finally:
            child.send_signal(signal.SIGKILL)
            child.communicate(timeout=30)
        assert child.returncode == -signal.SIGKILL
        seen.append(_check_after_kill(path, sharded))
    assert seen


SPILL_LOOP = """
import numpy as np, oocarray as oc
ws = oc.Workspace("loop", location="mmap", on_escape="pin")
with oc.Manager("m", max_bytes="8M", spill="evict"):
    print("ready", flush=True)
    i = 0
    while True:
        big = [np.full(1 << 19, i, np.float64) for _ in range(4)]  # 16 MiB: evicted
        small = [np.full(512, i) for _ in range(64)]  # heap-file slots
        for s in small[::2]:
            oc.spill(s)
        assert all((b == i).all() for b in big)  # read back from the files
        with ws:
            t = np.ones(1 << 18) * i
            del t
        del big, small
        i += 1
"""


def test_kill_minus_nine_during_spills_leaves_no_files(tmp_path: Path) -> None:
    rng = random.Random(9)
    for _ in range(rounds(1, 20)):
        child = start_python(SPILL_LOOP, env={"OOCARRAY_SPILL_DIR": str(tmp_path)})
        assert child.stdout is not None
        try:
            assert child.stdout.readline().strip() == "ready"
            time.sleep(rng.uniform(0.2, 1.0))
        finally:
            child.send_signal(signal.SIGKILL)
            child.communicate(timeout=30)
        assert child.returncode == -signal.SIGKILL
        assert [p for p in tmp_path.rglob("*") if not p.is_dir()] == []


# ---- Ctrl-C ----

# Synchronised on events, never on time: Ctrl-C is sent once the work has started, and the
# work is held until the interrupt has reached the main thread, so it can neither finish
# before the signal nor depend on this machine's speed.  Each child sets Python's default
# SIGINT handler first (through its own, which also records that the signal arrived): a shell
# starts a background job (``pytest &``, CI runners, nohup) with SIGINT ignored, and the
# child would inherit that.
CTRL_C_SETUP = """
import os, signal, threading
started, interrupted = threading.Event(), threading.Event()

def on_sigint(signum, frame):
    interrupted.set()
    signal.default_int_handler(signum, frame)  # raises KeyboardInterrupt

signal.signal(signal.SIGINT, on_sigint)

def ctrl_c_once_started():
    started.clear()
    interrupted.clear()

    def send():
        # To the main thread, as a terminal's Ctrl-C usually lands: a wait there wakes at once
        # (sent to the process, it may land on this thread and leave the main one asleep).
        if started.wait(60):
            signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)

    threading.Thread(target=send, daemon=True).start()

def hold():
    # Called by the work once it runs: it waits until the interrupt reached the main thread.
    # Short waits: a signal that lands just before a blocking wait begins is only acted on
    # when the wait ends.  6,000 of them (60 s or more) only guard against a hang.
    started.set()
    for _ in range(6000):
        if interrupted.wait(0.01):
            return
    raise RuntimeError("no Ctrl-C reached the main thread")
"""

CTRL_C_REDUCE = (
    CTRL_C_SETUP
    + """
import numpy as np, oocarray as oc
from oocarray._compute import _engine
_engine.TARGET_BLOCK_BYTES = 1  # a block per chunk
x = oc.from_numpy(np.arange(4096 * 64, dtype=np.float64).reshape(4096, 64), chunks=(16, 64))
calls = []
held = x.map_blocks(lambda b: (calls.append(1), hold(), b)[2], dtype=np.float64)
ctrl_c_once_started()
try:
    held.mean(axis=0, progress=False)
    print("not interrupted")
except KeyboardInterrupt:
    print("interrupted after", len(calls), "of", len(x) // 16, "blocks")
print("threads", [t.name for t in threading.enumerate() if t.name.startswith("oocarray-compute")])
assert np.allclose(x.mean(axis=0, progress=False), np.arange(4096 * 64.0).reshape(4096, 64).mean(0))
print("again ok")
"""
)


def test_ctrl_c_during_a_reduction(tmp_path: Path) -> None:
    from oocarray._compute import _engine

    result = run_python(CTRL_C_REDUCE, timeout=300)  # a hang guard only
    assert result.returncode == 0, result.stderr[-3000:]
    out = result.stdout.splitlines()
    assert out[0].startswith("interrupted after"), out
    # Promptly: no block starts after Ctrl-C (at most two per worker were handed out).
    assert 1 <= int(out[0].split()[2]) <= 2 * _engine.MAX_WORKERS
    assert out[1] == "threads []"
    assert out[2] == "again ok"


CTRL_C_FEED = (
    CTRL_C_SETUP
    + """
import sys, numpy as np, oocarray as oc
path = sys.argv[1]
data = np.arange(8192 * 16, dtype=np.float32).reshape(8192, 16)
x = oc.create(path, data.shape, data.dtype, chunks=(256, 16))
x[...] = data
x = oc.open(path)

def interrupted_after(loop):
    ctrl_c_once_started()
    steps = []
    try:
        loop(steps)
        return "not interrupted"
    except KeyboardInterrupt:
        return f"interrupted at step {len(steps)}"

def batches_loop(steps):
    with oc.Manager("feed", max_bytes="16M"):
        for xb in oc.batches(x, batch_size=64, shuffle="chunks", seed=0, prefetch=4):
            steps.append(1)
            if len(steps) == 3:  # mid-epoch, the prefetch thread running
                hold()

print("batches", interrupted_after(batches_loop), flush=True)
print("threads", [t.name for t in threading.enumerate() if t.name == "oocarray-batches"])
total = sum(
    float(xb.sum(dtype=np.float64)) for xb in oc.batches(x, batch_size=500, shuffle=True, seed=1)
)
print("again", total == float(data.sum(dtype=np.float64)), flush=True)

import torch
from torch.utils.data import DataLoader
ds = oc.batches(x, batch_size=64, shuffle="chunks", seed=0).torch()
def loader_loop(steps):
    for xb in DataLoader(ds, batch_size=None, num_workers=2, multiprocessing_context="fork"):
        steps.append(1)
        if len(steps) == 3:
            hold()
print("loader", interrupted_after(loader_loop), flush=True)
ds.set_epoch(1)
loader = DataLoader(ds, batch_size=None, num_workers=2, multiprocessing_context="fork")
rows = sum(len(xb) for xb in loader)
print("reloaded", rows, flush=True)
"""
)


def test_ctrl_c_during_batches_and_a_dataloader_epoch(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    code = CTRL_C_FEED.replace("sys.argv[1]", repr(str(tmp_path / "x.zarr")))
    result = run_python(code, timeout=300)  # a hang guard only
    assert result.returncode == 0, result.stderr[-3000:]
    out = dict(line.split(" ", 1) for line in result.stdout.splitlines())
    # The interrupt lands in the step that waits for it: no later batch is taken.
    assert out["batches"] == "interrupted at step 3", out
    assert out["threads"] == "[]", "the prefetch thread outlived the interrupted loop"
    assert out["again"] == "True"
    assert out["loader"] == "interrupted at step 3", out
    assert out["reloaded"] == "8192"


CTRL_C_MAP_CHUNKS = (
    CTRL_C_SETUP
    + """
import sys, numpy as np, oocarray as oc
data = np.arange(200 * 4 * 16, dtype=np.float64).reshape(200 * 4, 16)
x = oc.from_numpy(data, chunks=(4, 16))
out = sys.argv[1]

def double(block):
    hold()
    return block * 2

ctrl_c_once_started()
try:
    oc.map_chunks(double, x, out=out, dtype="float64", row_shape=(16,), progress=False)
    print("result not interrupted")
except KeyboardInterrupt:
    print("result interrupted")
print("threads", [t.name for t in threading.enumerate() if t.name.startswith("oocarray-map")])
done = sorted(int(n) for n in os.listdir(os.path.join(out, ".oocarray-map-chunks", "done")))
print("done", len(done))
y = oc.open(out)
for block in range(200):
    rows, expected = y[block * 4 : block * 4 + 4], data[block * 4 : block * 4 + 4] * 2
    # A marked block is written; one not marked was written whole or not at all.
    assert np.array_equal(rows, expected) or (block not in done and not rows.any()), block
interrupted.set()  # the rest runs unheld
y = oc.map_chunks(double, x, out=out, dtype="float64", row_shape=(16,), progress=False)
print("resumed", np.array_equal(y[...], data * 2))
"""
)


def test_ctrl_c_during_map_chunks(tmp_path: Path) -> None:
    from oocarray._feed._map import _threads as _map_threads

    code = CTRL_C_MAP_CHUNKS.replace("sys.argv[1]", repr(str(tmp_path / "y.zarr")))
    result = run_python(code, timeout=300)  # a hang guard only
    assert result.returncode == 0, result.stderr[-3000:]
    out = dict(line.split(" ", 1) for line in result.stdout.splitlines())
    assert out["result"] == "interrupted", out
    assert out["threads"] == "[]", "a worker thread outlived the interrupted run"
    # Promptly: no block starts after Ctrl-C; those handed out (two per worker) finish whole.
    assert 1 <= int(out["done"]) <= 2 * _map_threads.MAX_WORKERS
    assert out["resumed"] == "True"


# ---- fork ----

FORK_BUSY = """
import os, signal, sys, threading, numpy as np, oocarray as oc
data = np.arange(4096 * 8, dtype=np.float64).reshape(4096, 8)
x = oc.from_numpy(data, chunks=(128, 8))
ws = oc.Workspace("cycle", location="mmap")
results = {}
with oc.Manager("busy", max_bytes="4M") as m:
    parked = [np.full(1 << 17, i, np.float64) for i in range(6)]  # 6 MiB: some on disk
    total = 0.0
    it = iter(oc.batches(x, batch_size=64, shuffle="chunks", seed=3, prefetch=4))
    for step, xb in enumerate(it):
        total += float(xb.sum())
        if step == 10:
            with ws:  # mid-cycle, mid-epoch, prefetch thread running
                scratch = np.ones(1 << 16) * 2
                pid = os.fork()
                if pid == 0:
                    signal.alarm(30)  # a deadlock ends the child, and fails the test
                    try:
                        ok = all((a == i).all() for i, a in enumerate(parked))
                        with oc.Manager("child", max_bytes="2M"):
                            more = [np.ones(1 << 17) for _ in range(4)]  # spills in the child
                            ok = ok and sum(float(a.sum()) for a in more) == 4 * (1 << 17)
                            del more
                        seen = sum(float(b.sum()) for b in oc.batches(x, batch_size=512))
                        ok = ok and seen == float(data.sum())
                        ok = ok and scratch.sum() == 2 * (1 << 16)
                        ws2 = oc.Workspace("child-ws", location="mmap")
                        for _ in range(3):
                            with ws2:
                                t = np.ones(1 << 16)
                                ok = ok and t.sum() == 1 << 16
                                del t
                        ws2.close()
                    except BaseException as error:
                        print("child error", repr(error), flush=True)
                        os._exit(2)
                    os._exit(0 if ok else 1)
                del scratch
            _, status = os.waitpid(pid, 0)
            results["child"] = os.waitstatus_to_exitcode(status)
    results["epoch"] = total == float(data.sum())
    results["parked"] = all((a == i).all() for i, a in enumerate(parked))
    del parked
ws.close()
print(results)
"""


def test_fork_while_managers_workspaces_and_prefetch_are_busy(tmp_path: Path) -> None:
    for _ in range(rounds(1, 10)):
        result = run_python(FORK_BUSY, env={"OOCARRAY_SPILL_DIR": str(tmp_path)})
        assert result.returncode == 0, result.stderr[-3000:]
        assert result.stdout.strip().splitlines()[-1] == str(
            {"child": 0, "epoch": True, "parked": True}
        ), result.stdout + result.stderr[-2000:]
    assert [p for p in tmp_path.rglob("*") if not p.is_dir()] == []


def test_store_metadata_after_the_faults_is_plain_json(tmp_path: Path) -> None:
    """What append rewrites (zarr.json, renamed over) stays valid JSON of the new length."""
    y = oc.create(tmp_path / "m.zarr", (0, 4), np.float32, chunks=(8, 4))
    for _ in range(rounds(20, 500)):
        y.append(np.ones((3, 4), np.float32))
    meta = json.loads((tmp_path / "m.zarr" / "zarr.json").read_text())
    assert meta["shape"] == [3 * rounds(20, 500), 4]
