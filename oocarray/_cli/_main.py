"""The ``oocarray`` command line."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

import numpy as np

__all__ = ["main"]


# The demo's batches are a sixteenth of the budget: below this they would be empty.
_DEMO_MIN_BUDGET_BYTES = 1 << 20


def _demo_budget(text: str) -> int:
    """The ``--budget`` of the demo, checked against what the demo and the machine need."""
    from oocarray._memory._spill_files import private_dir
    from oocarray._memory._units import format_bytes, parse_size

    budget = parse_size(text, "--budget")
    assert budget is not None
    if budget < _DEMO_MIN_BUDGET_BYTES:
        raise ValueError(
            f"--budget must be at least {format_bytes(_DEMO_MIN_BUDGET_BYTES)} for the demo, "
            f"got {text!r}; try --budget 256M"
        )
    disk = os.statvfs(private_dir())
    free = disk.f_bavail * disk.f_frsize
    if budget + (256 << 20) > free:
        raise ValueError(
            f"--budget {text}: the demo places an array larger than the budget on disk, and the "
            f"spill directory has {format_bytes(free)} free; choose a smaller budget or set "
            "OOCARRAY_SPILL_DIR to a larger disk"
        )
    return budget


def _demo(args: argparse.Namespace) -> int:
    import oocarray as oc
    from oocarray._memory._units import format_bytes

    budget = _demo_budget(args.budget)
    # A batch is a sixteenth of the budget, and of a quarter of RAM when the budget is larger
    # than RAM: its arrays and temporaries live in RAM.
    ram = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    rows = max(min(budget, ram // 4) // (8 * 1024 * 16), 1)
    print(f"oocarray {oc.__version__} demo: NumPy code under a {format_bytes(budget)} budget\n")
    with oc.Manager("etl", max_bytes=budget) as etl:
        totals = np.zeros(1024)
        for step in range(4):
            with etl.sub(f"batch-{step}") as batch:
                x = np.random.default_rng(step).standard_normal((rows, 1024))
                y = np.tanh(x) * 2 + 1  # x, y and the temporaries are owned by the batch scope
                totals += y.sum(axis=0)
                if step == 3:
                    print("1. Inside the last batch scope, every NumPy allocation is counted:")
                    print(etl.debug_dump(), "\n")
                    batch.keep(y)  # an intended escape, handed to 'etl' when the batch closes
                    del x
                else:
                    del x, y  # nothing escapes this batch
        big = np.ones((budget // 8 // 1024 + 128, 1024))  # more than the whole budget
        print(
            f"2. An array of {format_bytes(big.nbytes)}, more than the whole budget, was placed "
            f"on disk instead of failing: oc.location(big) = {oc.location(big)!r}, "
            f"big[::1024].sum() = {big[::1024].sum():,.0f}."
        )
        moved = oc.spill(y)
        print(
            f"3. oc.spill(y) moved {format_bytes(moved)} to disk at the same address "
            f"(y[0, :2] = {np.round(y[0, :2], 3)}); RAM in use now "
            f"{format_bytes(etl.stats().ram_bytes)}."
        )
        oc.unspill(y)
        with etl.sub("strict", spill="fail"):
            try:
                np.ones(budget // 8 + 1)
            except oc.MemoryBudgetError as error:
                first_line = str(error).splitlines()[0]
                print(
                    f"4. With spill='fail' the same request raises MemoryBudgetError:\n"
                    f"   {first_line}"
                )
        del big
    print(
        f"\n5. Closed: etl.closed={etl.closed}; the arrays it handed on stay valid "
        f"(totals[:3]={np.round(totals[:3], 2)})."
    )
    print("\nThe whole tree now:")
    print(oc.system().debug_dump())
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``oocarray`` command line."""
    import oocarray as oc

    parser = argparse.ArgumentParser(prog="oocarray", description=__doc__)
    parser.add_argument("--version", action="version", version=f"oocarray {oc.__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    demo = commands.add_parser("demo", help="run a small demonstration of managed memory")
    demo.add_argument("--budget", default="256M", help="RAM budget of the demo (default 256M)")
    demo.set_defaults(run=_demo)
    args = parser.parse_args(argv)
    try:
        return int(args.run(args))
    except (ValueError, TypeError) as error:
        print(f"oocarray: error: {error}", file=sys.stderr)
        return 2
    except (oc.OOCArrayError, MemoryError, OSError) as error:
        first_line = str(error).splitlines()[0] if str(error) else type(error).__name__
        print(f"oocarray: error: {first_line}", file=sys.stderr)
        return 1
    except BrokenPipeError:  # output piped into `head`: stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(main())
