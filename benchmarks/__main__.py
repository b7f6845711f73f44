"""``python -m benchmarks [--only ID ...] [--quick] [--record DIR]``: run the benchmarks, print
the tables; a full run also writes its record (``benchmarks/_results.py``)."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from benchmarks import _results, standing
from benchmarks._registry import BENCHMARKS, COLD, LARGE
from benchmarks._timing import Result

__all__ = ["BENCHMARKS", "LARGE", "main"]


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    listing = "; ".join(f"{key}: {title}" for key, (title, _) in {**BENCHMARKS, **LARGE}.items())
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
    parser.add_argument(
        "--record",
        metavar="DIR",
        type=Path,
        help="write the run's record (JSON) into DIR; a full run (not --quick) writes it into "
        "benchmarks/results/runs/ by default",
    )
    parser.add_argument(
        "--cold",
        action="store_true",
        help=f"the read workloads ({', '.join(COLD)}) with their files evicted from the page "
        "cache before every side's run (data larger than RAM is never cached); only those run",
    )
    parser.add_argument(
        "--large",
        action="store_true",
        help="run the by-hand large benchmarks (W9: about 60 GiB of free disk); "
        "with --quick, a small smoke version of them",
    )
    return parser.parse_args(argv)


def selected(only: list[str] | None, large: bool = False, cold: bool = False) -> list[str]:
    known = {**BENCHMARKS, **LARGE} if large else BENCHMARKS
    if not only:
        return list(COLD) if cold else list(LARGE) if large else list(BENCHMARKS)
    wanted = [part.strip().upper() for item in only for part in item.split(",") if part.strip()]
    by_hand = [w for w in wanted if w in LARGE and not large]
    if by_hand:
        raise SystemExit(f"{by_hand} run by hand only: add --large")
    unknown = [w for w in wanted if w not in known]
    if unknown:
        raise SystemExit(f"unknown benchmark id(s) {unknown}; known: {', '.join(known)}")
    warm_only = [w for w in wanted if cold and w not in COLD]
    if warm_only:
        raise SystemExit(f"{warm_only} have no cold run; --cold runs {', '.join(COLD)}")
    return [key for key in known if key in wanted]


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    by_key: dict[str, Result] = {}
    known = {**BENCHMARKS, **LARGE}
    load_before = list(os.getloadavg())
    measured_at = _results.head_commit()
    for key in selected(args.only, args.large, args.cold):
        print(f"running {key}: {known[key][0]} ...", file=sys.stderr, flush=True)
        by_key[key] = COLD[key](args.quick, cold=True) if args.cold else known[key][1](args.quick)
    results = list(by_key.values())
    combined = Result(
        rows=[row for result in results for row in result.rows],
        tables=[table for result in results for table in result.tables],
        notes=[note for result in results for note in result.notes],
    )
    print(combined.render())
    folder = args.record or (None if args.quick else _results.RUNS)
    if folder is not None:
        cache = "cold" if args.cold else "warm"
        path = _results.write(
            by_key, args.quick, folder, load_before, page_cache=cache, measured_at=measured_at
        )
        print(f"run record: {path}", file=sys.stderr)
        if folder == _results.RUNS:
            standing.write()
            print(f"{standing.BENCHMARKS_MD.name}'s table regenerated", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
