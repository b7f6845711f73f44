"""oc.rechunk after kill -9 resumes with what is unwritten; under a hard memory limit it
stays in its budget."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest
import zarr

import oocarray as oc
from oocarray._compute._rechunk._resume import MARKER, units
from testkit import cgroup
from testkit.children import start_python
from tests.compute._rechunk_kill import killed_mid_rechunk

MiB = 1 << 20

SLOW_RECHUNK = """
import sys, oocarray as oc
x = oc.open(sys.argv[1])
print("ready", flush=True)
oc.rechunk(x, (2, 16), sys.argv[2], progress=False)
"""


def _chunk_files(path: Path) -> dict[str, int]:
    return {str(p): p.stat().st_mtime_ns for p in (path / "c").rglob("*") if p.is_file()}


def test_kill_minus_nine_then_resume(tmp_path: Path) -> None:
    # 3000 blocks to write: the child is still far from done when a few are recorded
    values = np.arange(12000 * 16, dtype="f8").reshape(12000, 16)
    x = oc.create(tmp_path / "src.zarr", values.shape, values.dtype, chunks=(4, 16))
    x[...] = values
    out = tmp_path / "out.zarr"
    marker = killed_mid_rechunk(SLOW_RECHUNK, str(x.path), out)
    written = _chunk_files(out)
    recorded = units(marker["done"])
    y = oc.rechunk(x, (2, 16), out, progress=False)
    np.testing.assert_array_equal(y[...], values)
    after = _chunk_files(out)
    # A recorded block (target rows 4b..4b+3: chunks 2b, 2b+1) is not written again.
    for block in recorded:
        for chunk in (2 * block, 2 * block + 1):
            name = str(out / "c" / str(chunk) / "0")
            assert after[name] == written[name]
    assert MARKER not in zarr.open_array(out, mode="r").attrs


BUDGET = MiB // 2

LIMITED = """
import sys, json, oocarray as oc
x = oc.open(sys.argv[1])
with oc.Manager("warm-up"):
    oc.rechunk(x, (8, 8, 8), progress=False)
print("ready", flush=True)
sys.stdin.readline()  # the parent moved this process into the cgroup
with oc.Manager("limited", max_bytes=int(sys.argv[3])) as m:
    plan = oc.rechunk(x, (-1, 16, 16), dry_run=True)
    oc.rechunk(x, (-1, 16, 16), sys.argv[2], progress=False)
    peak = m.stats().peak_bytes
print(json.dumps({"peak": peak, "strategy": plan.strategy}), flush=True)
"""


def test_rechunk_under_a_hard_memory_limit(tmp_path: Path) -> None:
    rng = np.random.default_rng(26)
    values = rng.random((32, 128, 128)).astype("f4")  # 2 MiB, 4x the budget
    x = oc.create(tmp_path / "src.zarr", values.shape, values.dtype, chunks=(1, 128, 128))
    x[...] = values
    out = tmp_path / "out.zarr"
    child = start_python(LIMITED, str(x.path), str(out), str(BUDGET), stdin=subprocess.PIPE)
    try:
        output = cgroup.run_after_warm_up(child, BUDGET + 64 * MiB, timeout=300)
    except cgroup.CgroupUnavailable as why:
        pytest.skip(str(why))
    result = json.loads(output.strip().splitlines()[-1])
    assert result["strategy"] == "scatter" and result["peak"] <= BUDGET
    np.testing.assert_array_equal(oc.open(out)[...], values)
    assert os.path.isdir(out)


INTERRUPTED = """
import itertools, os, signal, sys, oocarray as oc
from oocarray._compute._rechunk import _scatter
# Ctrl-C as a terminal's child gets it, even where the tests run in the background (SIGINT
# ignored, and inherited so)
signal.signal(signal.SIGINT, signal.default_int_handler)
x = oc.open(sys.argv[1])
reads = itertools.count(1)  # (next() is atomic: two workers never both see, or skip, 3)
original = _scatter._scatter_into
def counted(*args):
    original(*args)
    # Ctrl-C, as a terminal sends it, once the pass is under way (in 64K it reads the 64
    # source chunks in 8 groups)
    if next(reads) == 3:
        os.kill(os.getpid(), signal.SIGINT)
_scatter._scatter_into = counted
try:
    oc.rechunk(x, (-1, 4), sys.argv[2], max_mem="64K", progress=False)
except KeyboardInterrupt:
    print("interrupted", flush=True)
"""


def test_ctrl_c_stops_cleanly_and_the_output_resumes(tmp_path: Path) -> None:
    values = np.arange(256 * 64, dtype="f4").reshape(256, 64)
    x = oc.create(tmp_path / "src.zarr", values.shape, values.dtype, chunks=(4, 64))
    x[...] = values
    out = tmp_path / "out.zarr"
    child = start_python(INTERRUPTED, str(x.path), str(out))
    stdout, stderr = child.communicate(timeout=120)
    assert child.returncode == 0, stderr
    assert "interrupted" in stdout
    assert MARKER in zarr.open_array(out, mode="r").attrs
    y = oc.rechunk(x, (-1, 4), out, max_mem="64K", progress=False)
    np.testing.assert_array_equal(y[...], values)
    assert MARKER not in zarr.open_array(out, mode="r").attrs


def test_a_full_disk_is_an_error_and_a_rerun_with_space_resumes(tiny_tmpfs: Path) -> None:
    rng = np.random.default_rng(3)
    values = rng.random((64, 128, 128)).astype("f4")  # 4 MiB, incompressible
    source = tiny_tmpfs.parent / "src.zarr"
    x = oc.create(source, values.shape, values.dtype, chunks=(1, 128, 128), codec="none")
    x[...] = values
    out = tiny_tmpfs / "out.zarr"
    with pytest.raises(OSError, match="space"):
        oc.rechunk(x, (-1, 32, 32), out, codec="none", max_mem="1M", progress=False)
    marker = zarr.open_array(out, mode="r").attrs[MARKER]
    z = zarr.open_array(out, mode="r")
    for flat in units(marker["done"]):  # every chunk the marker names is whole
        i, j = divmod(flat, 4)
        region = (slice(None), slice(32 * i, 32 * i + 32), slice(32 * j, 32 * j + 32))
        np.testing.assert_array_equal(z[region], values[region])
    subprocess.run(["mount", "-o", "remount,size=16m", str(tiny_tmpfs)], check=True)
    y = oc.rechunk(x, (-1, 32, 32), out, codec="none", max_mem="1M", progress=False)
    np.testing.assert_array_equal(y[...], values)
    assert MARKER not in zarr.open_array(out, mode="r").attrs
