"""``oocarray stats PATH``: mean, std, min, max and NaN count per column, out of core."""

from __future__ import annotations

import argparse
import warnings
from typing import Any

import numpy as np

import oocarray as oc
from oocarray._cli._args import (
    Parser,
    UsageError,
    add_common,
    axis_argument,
    storage_options,
)
from oocarray._cli._open import open_array
from oocarray._cli._output import format_bytes, format_number, print_json, table

__all__ = ["add_parser", "column_stats"]

_SHOWN_ROWS = 20  # rows of the text table unless --all


def add_parser(commands: argparse._SubParsersAction[Parser]) -> None:
    """Register ``stats`` on the command line."""
    parser = commands.add_parser(
        "stats",
        help="mean, std, min, max and NaN count per column, in one pass out of core",
        description="Statistics of an array of any size, in one streaming pass under a RAM "
        "budget: mean, standard deviation, min, max and NaN count along an axis (default 0: "
        "one row of results per column). NaNs are left out of the other statistics.",
    )
    parser.add_argument("path", help="a zarr directory, an HDF5 file or a .npy file")
    add_common(parser, max_ram="1G")
    parser.add_argument(
        "--axis",
        type=axis_argument,
        default=0,
        metavar="N",
        help="the axis reduced (default 0: statistics per column); 'all' for the whole array",
    )
    parser.add_argument("--json", action="store_true", help="print the statistics as JSON")
    parser.add_argument(
        "--all", action="store_true", help=f"print every row (default: the first {_SHOWN_ROWS})"
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Compute and print the statistics of ``args.path``."""
    with oc.Manager("stats", max_bytes=args.max_ram) as manager:
        with open_array(args.path, args.dataset, storage_options(args)) as x:
            shape, dtype = x.shape, x.dtype
            stats = column_stats(x, args.axis, progress=not args.no_progress)
        peak = manager.stats().peak_bytes
    if args.json:
        print_json(
            {
                "path": args.path,
                "dataset": args.dataset,
                "shape": list(shape),
                "dtype": str(dtype),
                "axis": args.axis,
                "columns": stats,
                "peak_managed_bytes": peak,
            }
        )
        return 0
    what = "the whole array" if args.axis is None else f"along axis {args.axis}"
    print(f"{args.path}: shape {shape}, {dtype}; statistics {what}")
    shown = stats if args.all else stats[:_SHOWN_ROWS]
    headers = ["column", "mean", "std", "min", "max", "nan"]
    rows = [
        [
            str(s["index"]),
            *(format_number(s[k]) for k in ("mean", "std", "min", "max")),
            str(s["nan_count"]),
        ]
        for s in shown
    ]
    print(table(headers, rows))
    if len(shown) < len(stats):
        print(f"... {len(stats) - len(shown):,} more rows (--all prints them, --json too)")
    print(f"peak NumPy memory {format_bytes(peak)} of the {format_bytes(args.max_ram)} budget")
    return 0


def column_stats(
    x: oc.ChunkedArray, axis: int | None, progress: bool = True
) -> list[dict[str, Any]]:
    """Mean, std, min, max and NaN count of ``x`` along ``axis``, in one pass.

    Returns one dict per position of the axes left (``index``: the column, or a tuple of
    indices when more than one axis is left).  NaNs are counted and left out of the others.

    Examples
    --------
    >>> x = oc.from_numpy(np.array([[1.0, np.nan], [3.0, 4.0]]), chunks=(1, 2))
    >>> [(s["mean"], s["nan_count"]) for s in column_stats(x, 0, progress=False)]
    [(2.0, 0), (4.0, 1)]
    """
    if x.dtype.kind not in "biufc":
        raise ValueError(
            f"stats needs a numeric array, got dtype {x.dtype} (strings, bytes, dates and "
            "objects have no mean)"
        )
    if x.size == 0:
        raise ValueError(f"the array is empty (shape {x.shape}): there are no statistics")
    if axis is not None and not -x.ndim <= axis < max(x.ndim, 1):
        raise UsageError(
            f"--axis {axis} is out of range for an array of {x.ndim} dimension(s)", "oocarray stats"
        )
    if x.ndim == 0:
        axis = None
    floats = x.dtype.kind in "fc"
    if floats:  # NaNs are counted, and left out of the other statistics
        lazy = [_lazy(x, name, axis) for name in ("nanmean", "nanstd", "nanmin", "nanmax")]
    else:
        lazy = [_lazy(x, name, axis) for name in ("mean", "std", "min", "max")]
    if floats:
        nans: Any = np.isnan(x)  # lazy: an expression over the chunks
        lazy.append(nans.sum(axis=axis, compute=False))
    with np.errstate(all="ignore"), warnings.catch_warnings():
        # All-NaN columns: NumPy warns and gives NaN, which is the answer here.
        warnings.simplefilter("ignore", RuntimeWarning)
        results = [np.asarray(r) for r in oc.compute(*lazy, progress=progress)]
    nan_counts = results[4] if floats else np.zeros(results[0].shape, np.int64)
    columns = []
    for index in np.ndindex(results[0].shape):
        columns.append(
            {
                "index": index[0] if len(index) == 1 else (list(index) if index else None),
                "mean": results[0][index].item(),
                "std": results[1][index].item(),
                "min": results[2][index].item(),
                "max": results[3][index].item(),
                "nan_count": int(nan_counts[index]),
            }
        )
    return columns


def _lazy(x: oc.ChunkedArray, name: str, axis: int | None) -> oc.LazyResult:
    """The reduction ``name`` of ``x`` (``"nanmean"`` too), not yet computed."""
    from oocarray._compute._ops import reduce_lazy

    result: oc.LazyResult = reduce_lazy(name, x, axis, compute=False)
    return result
