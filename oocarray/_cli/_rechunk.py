"""``oocarray rechunk SRC DST --chunks 1000,-1,-1``: a zarr copy in new chunks, in a RAM
budget, printing its plan first; a rerun after a crash continues where it stopped."""

from __future__ import annotations

import argparse
from typing import Any

import oocarray as oc
from oocarray._cli._args import Parser, UsageError, add_common, shape_argument, storage_options
from oocarray._cli._open import open_array
from oocarray._cli._output import format_bytes

__all__ = ["add_parser", "chunks_argument", "run"]

_PROG = "oocarray rechunk"


def chunks_argument(text: str) -> Any:
    """``1000,-1,-1`` (``-1`` the whole axis, ``_`` keep) or ``auto``.

    Examples
    --------
    >>> chunks_argument("1000,-1,_")
    (1000, -1, None)
    """
    if text.strip() == "auto":
        return "auto"
    sizes: list[int | None] = []
    for part in text.split(","):
        part = part.strip()
        if part in ("_", "none", "None"):
            sizes.append(None)
        elif part == "auto":
            raise argparse.ArgumentTypeError("'auto' is for all axes: give --chunks auto")
        else:
            try:
                size = int(part)
            except ValueError:
                raise argparse.ArgumentTypeError(f"not a chunk size: {part!r}") from None
            if size == 0 or size < -1:
                raise argparse.ArgumentTypeError(f"a chunk size is positive or -1: {part!r}")
            sizes.append(size)
    return tuple(sizes)


def add_parser(commands: argparse._SubParsersAction[Parser]) -> None:
    """Register ``rechunk`` on the command line."""
    parser = commands.add_parser(
        "rechunk",
        help="copy an array into a zarr array with new chunks, in a RAM budget (resumable)",
        description="Rechunk SRC (zarr, HDF5, .npy, or an object-store URL) into the zarr "
        "array DST in bounded memory: one pass, direct when the blocks fit or through a "
        "scatter buffer (or as appended zstd frames), else two through a temporary store. "
        "The plan is printed first; a rerun after a crash continues with the chunks not yet "
        "written.",
    )
    parser.add_argument("src", help="the array to read: a zarr directory, an HDF5 or .npy file")
    parser.add_argument("dst", help="the zarr array to write (must not exist, unless resuming)")
    add_common(parser, max_ram="1G")
    parser.add_argument(
        "--chunks",
        type=chunks_argument,
        required=True,
        metavar="N,M,...",
        help="target chunks per axis: a size, -1 for the whole axis, _ to keep; or auto "
        "(write --chunks=-1,... when it starts with -1)",
    )
    parser.add_argument("--shards", type=shape_argument, metavar="N,M,...", help="shard shape")
    parser.add_argument("--codec", default="zstd", help="zstd, lz4, blosc, gzip or none")
    parser.add_argument(
        "--recompress",
        action="store_true",
        help="encode every target chunk as one zstd frame (by default chunks merged whole "
        "are their source chunks' frames one after the other, which numcodecs reads from "
        "0.16.4 on)",
    )
    parser.add_argument("--dry-run", action="store_true", help="print the plan only")
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help="replace DST if it is a zarr array (anything else is never deleted)",
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Rechunk ``args.src`` into ``args.dst``."""
    options = storage_options(args)
    with oc.Manager("rechunk", max_bytes=args.max_ram) as manager:
        with open_array(args.src, args.dataset, options) as x:
            if isinstance(args.chunks, tuple) and len(args.chunks) != x.ndim:
                raise UsageError(
                    f"--chunks has {len(args.chunks)} sizes for a {x.ndim}-d array", _PROG
                )
            # The plan printed is the one run: the same output options.
            chosen = {"shards": args.shards, "codec": args.codec, "recompress": args.recompress}
            plan = oc.rechunk(x, args.chunks, dry_run=True, **chosen)
            print(plan, flush=True)
            if args.dry_run:
                return 0
            oc.rechunk(
                x,
                args.chunks,
                args.dst,
                mode="w" if args.overwrite else "w-",
                storage_options=options,
                progress=not args.no_progress,
                **chosen,
            )
        peak = manager.stats().peak_bytes
    print(f"wrote {args.dst} (peak {format_bytes(peak)})")
    return 0
