"""A rechunk killed with SIGKILL part-way: the child process and the marker it leaves."""

from __future__ import annotations

import signal
import time
from pathlib import Path
from typing import Any

import pytest
import zarr

from oocarray._compute._rechunk._resume import MARKER, units
from testkit.children import start_python


def killed_mid_rechunk(script: str, source: str, out: Path) -> Any:
    """Run ``script`` (it prints "ready", then rechunks ``source`` into ``out``), kill -9 it
    once a few target blocks are recorded, and return the progress marker left in ``out``
    (the test is skipped where the child finished first)."""
    child = start_python(script, source, str(out))
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
        for _ in range(3000):  # until a few target blocks are recorded (not a timing check)
            try:
                marked = zarr.open_array(out, mode="r").attrs.get(MARKER, {})
                done = units(marked.get("done"))
            except Exception:  # the output not created yet
                done = set()
            if len(done) >= 3 or child.poll() is not None:
                break
            time.sleep(0.01)
    finally:
        child.send_signal(signal.SIGKILL)
        child.communicate(timeout=30)
    marker = zarr.open_array(out, mode="r").attrs.get(MARKER)
    if marker is None:
        pytest.skip("the child finished before it was killed")
    return marker
