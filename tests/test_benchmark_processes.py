"""The benchmarks' memory samplers find a side's child processes, grandchildren too."""

from __future__ import annotations

import os
import subprocess
import sys

from benchmarks._processes import descendants


def test_children_and_grandchildren_are_found_and_nothing_else():
    # The child starts a grandchild, says both pids, then waits for a line on stdin.
    code = (
        "import subprocess, sys\n"
        "g = subprocess.Popen([sys.executable, '-c', 'import sys; sys.stdin.read()'],"
        " stdin=subprocess.PIPE)\n"
        "print(g.pid, flush=True)\n"
        "sys.stdin.readline()\n"
        "g.stdin.close(); g.wait()\n"
    )
    with subprocess.Popen(
        [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    ) as child:
        try:
            grandchild = int(child.stdout.readline())
            assert sorted(descendants(child.pid)) == [grandchild]
            assert {child.pid, grandchild} <= set(descendants(os.getpid()))
            assert descendants(grandchild) == []
        finally:
            child.stdin.write("\n")
            child.stdin.close()
            child.wait(timeout=60)
    assert descendants(child.pid) == []  # gone: nothing, no error
