"""Shared by the reliability tests: the size of the long mode.  (Children run through
:mod:`testkit.children`.)"""

from __future__ import annotations

import os

# OOCARRAY_RELIABILITY_LONG=1: more rounds of the loops and larger hard-limit workloads (for
# manual runs; the figures go to RELIABILITY.md).  The hypothesis tests grow with
# HYPOTHESIS_PROFILE=long instead.
LONG = os.environ.get("OOCARRAY_RELIABILITY_LONG", "") not in ("", "0")


def rounds(ci: int, long: int) -> int:
    """How many times a loop test repeats: ``ci`` by default, ``long`` in the long mode."""
    return long if LONG else ci
