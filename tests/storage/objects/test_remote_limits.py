"""Reading an array in S3 under a hard memory limit (a cgroup of our own, needs root): a
reduction and an epoch of batches of 320 MiB of data in a process limited to 300 MiB, with a
64 MiB budget, are not killed; and an interrupted write leaves every chunk whole or absent."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import oocarray as oc
from testkit import cgroup
from testkit.children import run_python

MiB = 1 << 20
ROWS, COLUMNS = 320 * 1024, 256  # 320 MiB of float32

CHILD = """
import json, sys
import numpy as np
import oocarray as oc
url, options = sys.argv[1], json.loads(sys.argv[2])
x = oc.open(url, storage_options=options)
with oc.Manager(max_bytes="64M") as m:
    mean = x.mean(axis=0)
    rows = 0
    for batch in oc.batches(x, batch_size=8192, shuffle="chunks"):
        rows += len(batch)
    peak = m.stats().peak_bytes
print(json.dumps({"mean0": float(mean[0]), "rows": rows, "peak": peak}))
"""


def test_a_remote_reduction_and_epoch_are_not_killed_under_a_hard_limit(s3):
    options = s3.storage_options
    x = oc.create(s3.url("big.zarr"), (ROWS, COLUMNS), "float32", storage_options=options)
    block = 16384
    for start in range(0, ROWS, block):
        x[start : start + block] = np.full((block, COLUMNS), start // block, np.float32)
    expected = float(np.mean(np.arange(ROWS // block)))
    try:
        with cgroup.memory_cgroup(300 * MiB) as group:
            result = run_python(
                CHILD, s3.url("big.zarr"), json.dumps(options), timeout=300, wrap=group.command
            )
            kills = group.oom_kills()
    except cgroup.CgroupUnavailable as why:
        pytest.skip(str(why))
    assert result.returncode == 0, f"rc {result.returncode}, OOM kills {kills}: {result.stderr}"
    assert kills in (None, 0)
    out = json.loads(result.stdout.strip().splitlines()[-1])
    assert out["rows"] == ROWS and out["mean0"] == pytest.approx(expected)
    assert out["peak"] <= 64 * MiB


WRITER = """
import json
import signal
import sys
import numpy as np
import oocarray as oc
# Ctrl-C as a terminal's child gets it, even where the tests run in the background (SIGINT
# ignored, and inherited so)
signal.signal(signal.SIGINT, signal.default_int_handler)
url, options = sys.argv[1], json.loads(sys.argv[2])
x = oc.open(url, "r+", storage_options=options)
print("writing", flush=True)
for round in range(1000):
    x[...] = np.full(x.shape, round % 7 + 1, np.int32)
"""


@pytest.mark.parametrize("stop", [signal.SIGKILL, signal.SIGINT], ids=["kill-9", "ctrl-c"])
def test_a_write_stopped_midway_leaves_each_chunk_whole_or_absent(s3, stop):
    options = s3.storage_options
    oc.create(s3.url("w.zarr"), (4096, 64), "int32", chunks=(64, 64), storage_options=options)
    child = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(WRITER), s3.url("w.zarr"), json.dumps(options)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "writing"
        # Let it write: some chunks of several rounds, then stop it in the middle of puts.
        written = 0
        while written < 40:
            listed = s3.server.boto3().list_objects_v2(Bucket=s3.name, Prefix="w.zarr/c/")
            written = listed.get("KeyCount", 0)
        child.send_signal(stop)
        # Ctrl-C stops the writer: it does not hang on its requests.  (communicate() reads
        # the pipes while it waits: a child blocked writing a long stderr would never exit.)
        _, errors = child.communicate(timeout=120)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        for stream in (child.stdout, child.stderr):
            if stream is not None:
                stream.close()
    if stop == signal.SIGINT:
        assert child.returncode != 0 and "KeyboardInterrupt" in errors, errors[-2000:]
    y = oc.open(s3.url("w.zarr"), storage_options=options)
    values = y[...]  # every chunk decodes (checksums pass): whole, or absent (zeros)
    for c in range(64):
        chunk = values[c * 64 : (c + 1) * 64]
        assert (chunk == chunk.flat[0]).all(), f"chunk {c} mixes values"
