"""Shared by the reliability tests: a child Python process with a time limit, and the
size of the long mode."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# OOCARRAY_RELIABILITY_LONG=1: more rounds of the loops and larger hard-limit workloads (for
# manual runs; the figures go to RELIABILITY.md).  The hypothesis tests grow with
# HYPOTHESIS_PROFILE=long instead.
LONG = os.environ.get("OOCARRAY_RELIABILITY_LONG", "") not in ("", "0")


def rounds(ci: int, long: int) -> int:
    """How many times a loop test repeats: ``ci`` by default, ``long`` in the long mode."""
    return long if LONG else ci


def child_env(**extra: str) -> dict[str, str]:
    """The environment for a child: no OOCARRAY_ settings of ours, the repo importable."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OOCARRAY_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env.update(extra)
    return env


def run_python(code: str, *, timeout: float = 60, **env: str) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a fresh interpreter; a hang fails the test through the timeout."""
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        cwd=ROOT,
        env=child_env(**env),
    )


def popen_python(code: str, **env: str) -> subprocess.Popen[str]:
    """Start ``code`` in a fresh interpreter, its stdout a pipe of text lines."""
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env=child_env(**env),
    )
