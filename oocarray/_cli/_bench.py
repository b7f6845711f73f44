"""``oocarray bench``: the benchmark runner (``python -m benchmarks``), in this process.

The benchmarks live in the source tree (``benchmarks/``), not in the installed package: they
are found on ``sys.path``, in the current directory, or beside an editable install.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from types import ModuleType

from oocarray._cli._args import Parser, UsageError

__all__ = ["add_parser", "find_runner"]

_PROG = "oocarray bench"


def add_parser(commands: argparse._SubParsersAction[Parser]) -> None:
    """Register ``bench`` on the command line."""
    parser = commands.add_parser(
        "bench",
        help="run the benchmarks (quick by default; from a source checkout)",
        description="Run oocarray's benchmarks against their peers and print the tables "
        "(python -m benchmarks). Quick by default (fewer rounds: a smoke run, not for the "
        "record); --full for the recorded numbers. Needs a source checkout: run it from the "
        "repository's directory.",
    )
    parser.add_argument(
        "--full", action="store_true", help="all rounds, as BENCHMARKS.md records them"
    )
    parser.add_argument(
        "--only",
        action="append",
        metavar="ID",
        help="run only this benchmark (repeatable or comma-separated), e.g. --only W5",
    )
    parser.add_argument(
        "--cold",
        action="store_true",
        help="the read workloads (W5, W7, W7r, W8, W11) from a cold page cache: their files are "
        "evicted before every side's run",
    )
    parser.add_argument("--list", action="store_true", help="list the benchmarks and exit")
    parser.set_defaults(run=run)


def find_runner() -> ModuleType:
    """``benchmarks.__main__`` of the source checkout: from ``sys.path``, the current
    directory, or the directory above an editable install of oocarray."""
    import oocarray

    roots = ["", os.getcwd(), os.path.dirname(os.path.dirname(os.path.abspath(oocarray.__file__)))]
    for root in roots:
        if root and not os.path.isfile(os.path.join(root, "benchmarks", "__main__.py")):
            continue
        if root and root not in sys.path:
            sys.path.insert(0, root)
        try:
            runner = importlib.import_module("benchmarks.__main__")
        except ImportError:
            continue
        if hasattr(runner, "BENCHMARKS"):
            return runner
    raise UsageError(
        "the benchmarks ship with the source, not the installed package: run `oocarray bench` "
        "in a checkout of oocarray (the directory holding benchmarks/)",
        _PROG,
    )


def run(args: argparse.Namespace) -> int:
    """Run the selected benchmarks and print their tables."""
    runner = find_runner()
    if args.list:
        for key, (title, _) in {**runner.BENCHMARKS, **runner.LARGE}.items():
            by_hand = "  (by hand: python -m benchmarks --large)" if key in runner.LARGE else ""
            print(f"{key:6} {title}{by_hand}")
        return 0
    argv = ([] if args.full else ["--quick"]) + (["--cold"] if args.cold else [])
    for only in args.only or ():
        argv += ["--only", only]
    try:
        return int(runner.main(argv) or 0)
    except SystemExit as stop:  # the runner's own argument errors
        if isinstance(stop.code, str):
            raise UsageError(stop.code, _PROG) from None
        return int(stop.code or 0)
