"""NumPy's own test suite with an oocarray manager active around every test.

``python -m benchmarks.numpy_suite [--max-bytes SIZE] [--location ram|mmap] [--spill POLICY]
[-- PYTEST ARGS]`` runs ``pytest --pyargs numpy`` inside one active manager, so every NumPy
allocation of the session's main thread (collection and every test) is owned, counted, placed
and spilled by oocarray.  ``--plain`` runs the suite with no manager, for the
baseline to compare failures with.  Not part of the test suite: it takes minutes.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

import pytest

import oocarray as oc


class ManagerReport:
    """Prints what the manager saw at the end of the run."""

    def __init__(self, manager: oc.Manager) -> None:
        self.manager = manager

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        stats = self.manager.stats()
        terminalreporter.write_line(
            f"oocarray: manager {self.manager.name!r}: {stats.total_count} allocations, "
            f"peak {stats.peak_bytes} bytes, {stats.spills} spills, "
            f"{stats.mmap_bytes} bytes on disk now"
        )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.numpy_suite")
    parser.add_argument("--plain", action="store_true", help="no manager: the baseline")
    parser.add_argument("--max-bytes", default=None, help='the manager\'s budget, e.g. "1M"')
    parser.add_argument("--location", default="ram", choices=["ram", "mmap"])
    parser.add_argument("--spill", default="mmap", choices=["mmap", "evict", "fail"])
    parser.add_argument("pytest_args", nargs="*", help="passed to pytest after --")
    args = parser.parse_args(argv)
    pytest_args = ["--pyargs", "numpy", "-q", "-p", "no:cacheprovider", *args.pytest_args]
    if args.plain:
        return int(pytest.main(pytest_args))
    with oc.Manager(
        "numpy-suite", max_bytes=args.max_bytes, location=args.location, spill=args.spill
    ) as manager:
        return int(pytest.main(pytest_args, plugins=[ManagerReport(manager)]))


if __name__ == "__main__":
    sys.exit(main())
