"""Damaged stores (issue 15, item 5): runs the fuzz tests of ``_damaged_store_cases.py`` in a
child ``pytest``, so that a crash (a segfault in a decoder, HDF5 or NumPy) fails this test
with the child's exit status and output instead of ending the whole run, and a hang ends
the child (``faulthandler`` in each example, and a timeout here)."""

from __future__ import annotations

import json
import os

from testkit import children

CASES = "tests/reliability/_damaged_store_cases.py"


def test_damaged_stores_raise_documented_errors_only() -> None:
    long = os.environ.get("HYPOTHESIS_PROFILE") == "long"
    result = children.run(
        ["-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "0", "-x", CASES],
        timeout=3600 if long else 300,
    )
    tail = (result.stdout + result.stderr)[-6000:]
    assert result.returncode == 0, f"child exit status {result.returncode}:\n{tail}"
    counts = json.loads(result.stdout.split("COUNTS ", 1)[1].splitlines()[0])
    print(counts)
    assert sum(counts.values()) >= (5 * 2000 if long else 400), counts
