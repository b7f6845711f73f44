"""``python -m benchmarks.table [FILE]``: the main table of a run record, as Markdown.

Without FILE, the newest record in ``benchmarks/results/runs/``.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

from benchmarks import _results


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args:
        path = Path(args[0])
    else:
        records = sorted(_results.RUNS.glob("*.json"))
        if not records:
            print(f"no run record in {_results.RUNS}: run python -m benchmarks", file=sys.stderr)
            return 1
        path = records[-1]
    print(_results.render_rows(_results.load(path)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
