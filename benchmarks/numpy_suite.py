"""NumPy's own test suite with an oocarray manager active around every test.

``python -m benchmarks.numpy_suite [--max-bytes SIZE] [--location ram|mmap|zarr] [--spill POLICY]
[-- PYTEST ARGS]`` runs ``pytest --pyargs numpy`` with a manager active around every test: one
manager for the whole session (collection included), and under it a fresh child with the given
budget, location and spill policy for each test's call, so every NumPy allocation a test makes
on its own thread is owned, counted, placed and spilled by oocarray, and each test starts with
its whole budget (arrays that NumPy's test modules build at import do not fill it).
``--plain`` runs the suite with no manager, for the
baseline to compare failures with.  Not part of the test suite: it takes minutes.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator, Sequence
from typing import Any

import pytest

import oocarray as oc


class ManagerPerTest:
    """A fresh child manager around the call of every test; prints what they saw."""

    def __init__(self, manager: oc.Manager, **policy: Any) -> None:
        self.manager = manager
        self.policy = policy

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_call(self, item: Any) -> Iterator[None]:
        with self.manager.sub(item.name[:60], **self.policy):
            yield

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        stats = self.manager.stats()
        terminalreporter.write_line(
            f"oocarray: {stats.total_count} allocations in manager {self.manager.name!r} and "
            f"a child per test with {self.policy}; peak {stats.peak_bytes} bytes in RAM, "
            f"{stats.spills} spills"
        )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.numpy_suite")
    parser.add_argument("--plain", action="store_true", help="no manager: the baseline")
    parser.add_argument("--max-bytes", default=None, help='the manager\'s budget, e.g. "1M"')
    parser.add_argument("--location", default="ram", choices=["ram", "mmap", "zarr"])
    parser.add_argument("--spill", default="mmap", choices=["mmap", "evict", "zarr", "fail"])
    parser.add_argument("pytest_args", nargs="*", help="passed to pytest after --")
    args = parser.parse_args(argv)
    pytest_args = ["--pyargs", "numpy", "-q", "-p", "no:cacheprovider", *args.pytest_args]
    if args.plain:
        return int(pytest.main(pytest_args))
    policy = {"max_bytes": args.max_bytes, "location": args.location, "spill": args.spill}
    with oc.Manager("numpy-suite") as manager:
        return int(pytest.main(pytest_args, plugins=[ManagerPerTest(manager, **policy)]))


if __name__ == "__main__":
    sys.exit(main())
