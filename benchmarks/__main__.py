"""``python -m benchmarks [--only ID ...] [--quick]``: run the benchmarks, print the tables."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

from benchmarks import large_alloc, w2_small_alloc
from benchmarks._timing import ROW_HEADERS, Result, markdown_table

BENCHMARKS: dict[str, tuple[str, Callable[[bool], Result]]] = {
    "W2": ("small-allocation overhead inside a manager", w2_small_alloc.run),
    "L1": ("64 MiB allocate + first touch inside a manager", large_alloc.run_large),
    "L2": ("small/large threshold sweep, 16 KiB to 32 MiB", large_alloc.run_sweep),
}


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    listing = "; ".join(f"{key}: {title}" for key, (title, _) in BENCHMARKS.items())
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks",
        description="oocarray benchmarks; ratios of sides measured in alternating rounds.",
        epilog=f"Benchmarks: {listing}.",
    )
    parser.add_argument(
        "--only",
        action="append",
        metavar="ID",
        help="run only this benchmark (repeatable, or comma-separated), e.g. --only W2",
    )
    parser.add_argument(
        "--quick", action="store_true", help="fewer rounds: a smoke run, not for the record"
    )
    return parser.parse_args(argv)


def selected(only: list[str] | None) -> list[str]:
    if not only:
        return list(BENCHMARKS)
    wanted = [part.strip().upper() for item in only for part in item.split(",") if part.strip()]
    unknown = [w for w in wanted if w not in BENCHMARKS]
    if unknown:
        raise SystemExit(f"unknown benchmark id(s) {unknown}; known: {', '.join(BENCHMARKS)}")
    return [key for key in BENCHMARKS if key in wanted]


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    results = []
    for key in selected(args.only):
        print(f"running {key}: {BENCHMARKS[key][0]} ...", file=sys.stderr, flush=True)
        results.append(BENCHMARKS[key][1](args.quick))
    rows = [row.cells() for result in results for row in result.rows]
    tables = [table for result in results for table in result.tables]
    sections = []
    if rows:
        sections.append(markdown_table(ROW_HEADERS, rows))
    sections += [table.render() for table in tables]
    print("\n\n".join(sections))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
