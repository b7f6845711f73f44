"""``python -m benchmarks.w11_hard``: the benchmark's command line, and the entry of its
children (``--child``) and of the reference (``--reference``)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import benchmarks.w11_hard
from benchmarks.w11_hard._child import child
from benchmarks.w11_hard._compute import compute_reference
from benchmarks.w11_hard._data import COLUMNS, WORKLOADS, Data, GiB
from benchmarks.w11_hard._report import run_benchmark


def _size(text: str) -> int:
    from oocarray._memory._units import parse_size

    value = parse_size(text)
    assert value is not None
    return value


def main(argv: list[str]) -> int:
    if argv[:1] == ["--child"]:
        workloads, side, directory, budget, spill, columns = argv[1:7]
        report = child(workloads.split(","), side, directory, int(budget), spill, int(columns))
        print(json.dumps(report))
        return 0
    if argv[:1] == ["--reference"]:
        data = Data(argv[1])
        ref = compute_reference(data)
        Path(data.reference_path).write_text(json.dumps(ref))
        return 0
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.w11_hard", description=benchmarks.w11_hard.__doc__
    )
    parser.add_argument("--size", type=_size, default=8 * GiB, help="logical bytes (8G)")
    parser.add_argument("--limit", type=_size, default=GiB, help="cgroup memory limit (1G)")
    parser.add_argument("--budget", type=_size, help="Manager(max_bytes=...) (3/4 of the limit)")
    parser.add_argument("--dir", help="where the data goes (default: a new temporary dir)")
    parser.add_argument("--keep", action="store_true", help="keep the data afterwards")
    parser.add_argument("--spill", default="mmap", choices=("mmap", "evict", "zarr"))
    parser.add_argument(
        "--only", default=",".join(WORKLOADS), help=f"workloads, of {','.join(WORKLOADS)}"
    )
    parser.add_argument("--percentile-columns", type=int, default=4)
    parser.add_argument("--timeout", type=float, default=3600, help="seconds per child")
    parser.add_argument(
        "--whole-timeout", type=float, default=420, help="seconds for percentile-whole"
    )
    args = parser.parse_args(argv)
    workloads = [w for w in args.only.split(",") if w]
    unknown = set(workloads) - set(WORKLOADS)
    if unknown:
        parser.error(f"unknown workloads {sorted(unknown)}; known: {', '.join(WORKLOADS)}")
    if COLUMNS % args.percentile_columns:
        parser.error(f"--percentile-columns must divide {COLUMNS}")
    result = run_benchmark(
        args.size,
        args.limit,
        args.budget if args.budget is not None else args.limit * 3 // 4,
        args.dir,
        args.keep,
        args.spill,
        workloads,
        args.percentile_columns,
        args.timeout,
        args.whole_timeout,
    )
    from benchmarks._timing import ROW_HEADERS, markdown_table

    print(f"python -m benchmarks.w11_hard {' '.join(argv)}")
    print(markdown_table(ROW_HEADERS, [r.cells() for r in result.rows]))
    for t in result.tables:
        print()
        print(t.render())
    print()
    for note in result.notes:
        print(f"- {note}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
