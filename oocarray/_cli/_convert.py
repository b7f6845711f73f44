"""``oocarray convert SRC DST``: between .npy, HDF5 and zarr, rechunking and recompressing in
bounded memory.

zarr outputs are written by the compute layer (``to_zarr``: chunks read, encoded and written in
parallel in a workspace); sharded zarr, HDF5 and ``.npy`` outputs by a loop over blocks of the
output's write grid (:mod:`._convert_writers`).  Everything runs in an ``oc.Manager`` with the
``--max-ram`` budget, and is written next to ``DST`` under a temporary name first, then
renamed: a failed or interrupted conversion leaves no partial output.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from typing import Any

import oocarray as oc
from oocarray._cli._args import (
    Parser,
    UsageError,
    add_common,
    shape_argument,
    storage_options,
)
from oocarray._cli._convert_writers import write_hdf5, write_npy, write_zarr
from oocarray._cli._info import describe
from oocarray._cli._open import open_array
from oocarray._cli._output import format_bytes
from oocarray._storage._objects._urls import Remote, locate
from oocarray._storage._replace import foreign_files, prepare_target
from oocarray._storage._zarr._create import unstable_dtypes_known

__all__ = ["add_parser", "output_format"]

FORMATS = ("zarr", "hdf5", "npy")
ZARR_CODECS = ("zstd", "lz4", "blosc", "gzip", "none")
HDF5_CODECS = ("gzip", "lzf", "none")
_EXTENSIONS = {
    ".zarr": "zarr",
    ".h5": "hdf5",
    ".hdf5": "hdf5",
    ".hdf": "hdf5",
    ".he5": "hdf5",
    ".npy": "npy",
}
_PROG = "oocarray convert"


def add_parser(commands: argparse._SubParsersAction[Parser]) -> None:
    """Register ``convert`` on the command line."""
    parser = commands.add_parser(
        "convert",
        help="convert between .npy, HDF5 and zarr, rechunking and recompressing",
        description="Copy an array between formats (.npy, HDF5, zarr v3 with or without "
        "shards; zarr v2 and sharded zarr are read too), with new chunks, shards or codec, in "
        "bounded memory. The output format comes from DST's extension (.zarr, .h5/.hdf5, "
        ".npy) or --to.",
    )
    parser.add_argument("src", help="the array to read: a zarr directory, an HDF5 or .npy file")
    parser.add_argument(
        "dst",
        help="where the copy goes (must not exist, or be an empty directory, unless --overwrite)",
    )
    add_common(parser, max_ram="1G")
    parser.add_argument("--to", choices=FORMATS, help="output format (default: from DST's name)")
    parser.add_argument(
        "--chunks",
        type=shape_argument,
        metavar="N,M,...",
        help="chunk shape of a zarr or HDF5 output (default: the source's chunks when it has "
        "any, else about 4 MiB)",
    )
    parser.add_argument(
        "--shards",
        type=shape_argument,
        metavar="N,M,...",
        help="shard shape of a zarr output, a multiple of the chunks",
    )
    parser.add_argument(
        "--codec",
        help=f"zarr: {', '.join(ZARR_CODECS)} (default zstd); "
        f"HDF5: {', '.join(HDF5_CODECS)} (default none)",
    )
    parser.add_argument(
        "--out-dataset",
        default="data",
        metavar="NAME",
        help="name of the dataset in an HDF5 output (default 'data')",
    )
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help="replace DST if it is an array of the output format: a zarr array (holding no "
        "other files), an HDF5 file holding only the --out-dataset dataset, or a .npy file; "
        "anything else at DST is never deleted",
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.set_defaults(run=run)


def output_format(dst: str, to: str | None) -> str:
    """The format to write: ``to``, else from the name (or content) of ``dst``.

    Examples
    --------
    >>> output_format("out.h5", None), output_format("out", "npy")
    ('hdf5', 'npy')
    """
    if to is not None:
        return to
    ext = os.path.splitext(dst.rstrip("/" + os.sep))[1].lower()
    if ext in _EXTENSIONS:
        return _EXTENSIONS[ext]
    if os.path.isdir(dst) and os.path.isfile(os.path.join(dst, "zarr.json")):
        return "zarr"
    raise UsageError(
        f"cannot tell the output format from {dst!r}: end it with .zarr, .h5 or .npy, or give "
        "--to zarr|hdf5|npy",
        _PROG,
    )


def run(args: argparse.Namespace) -> int:
    """Convert ``args.src`` to ``args.dst``."""
    options = storage_options(args)
    src = locate(args.src, _for_urls(args.src, options), "SRC")
    dst = locate(args.dst, _for_urls(args.dst, options), "DST", writing=True)
    if isinstance(dst, Remote):
        return _run_to_remote(args, src, dst, options)
    args.src, args.dst = (src.url if isinstance(src, Remote) else src), dst
    fmt = output_format(args.dst, args.to)
    codec = _check_options(args, fmt)
    if not isinstance(src, Remote) and not os.path.lexists(args.src):
        raise oc.StoreNotFoundError(f"no array at {args.src!r}: the path does not exist")
    if os.path.lexists(args.dst):
        if os.path.exists(args.src) and os.path.samefile(args.src, args.dst):
            raise UsageError(f"SRC and DST are the same: {args.src!r}", _PROG)
        if not _empty_directory(args.dst):
            if not args.overwrite:
                raise oc.StoreExistsError(f"{args.dst!r} exists; give --overwrite to replace it")
            _check_replaceable(args.dst, fmt, args.out_dataset)
    parent = os.path.dirname(os.path.abspath(args.dst))
    if not os.path.isdir(parent):
        raise FileNotFoundError(f"the directory of {args.dst!r} does not exist: {parent!r}")
    start = time.perf_counter()
    progress = not args.no_progress
    with oc.Manager("convert", max_bytes=args.max_ram) as manager:
        with open_array(args.src, args.dataset, _for_urls(args.src, options)) as x:
            shown_src = x.path if isinstance(src, Remote) else args.src
            partial = _partial_name(args.dst, fmt)
            try:
                if fmt == "zarr":
                    with unstable_dtypes_known():  # a string dtype is the source's: no warning
                        write_zarr(x, partial, args.chunks, args.shards, codec, progress)
                elif fmt == "hdf5":
                    limit = args.max_ram // 4
                    write_hdf5(x, partial, args.out_dataset, args.chunks, codec, limit, progress)
                else:
                    write_npy(x, partial, args.max_ram // 4, progress)
                _replace(partial, args.dst)
            except BaseException:
                _remove(partial)
                raise
        peak = manager.stats().peak_bytes
    seconds = time.perf_counter() - start
    _report(shown_src, args.dst, fmt, args, seconds, peak, None)
    return 0


def _for_urls(text: str, options: dict[str, Any] | None) -> dict[str, Any] | None:
    """``--storage-option`` values apply to the side of a conversion that is in a store."""
    return options if "://" in text and not text.startswith("file://") else None


def _run_to_remote(
    args: argparse.Namespace, src: Any, dst: Remote, options: dict[str, Any] | None
) -> int:
    """Convert into an object store: a zarr array written chunk by chunk, each chunk one
    object (an interrupted run leaves whole chunks; rerun with --overwrite)."""
    fmt = args.to or "zarr"
    if fmt != "zarr":
        raise UsageError(
            f"object-store outputs are zarr arrays; --to {fmt} needs a local DST", _PROG
        )
    codec = _check_options(args, fmt)
    source = src.url if isinstance(src, Remote) else src
    if not isinstance(src, Remote) and not os.path.lexists(source):
        raise oc.StoreNotFoundError(f"no array at {source!r}: the path does not exist")
    start = time.perf_counter()
    with oc.Manager("convert", max_bytes=args.max_ram) as manager:
        with open_array(source, args.dataset, _for_urls(source, options)) as x:
            shown_src = x.path if isinstance(src, Remote) else source
            with unstable_dtypes_known():
                write_zarr(
                    x,
                    dst.url,
                    args.chunks,
                    args.shards,
                    codec,
                    not args.no_progress,
                    mode="w" if args.overwrite else "w-",
                    storage_options=options,
                )
        peak = manager.stats().peak_bytes
    _report(shown_src, dst.url, fmt, args, time.perf_counter() - start, peak, options)
    return 0


def _report(
    src: str,
    dst: str,
    fmt: str,
    args: argparse.Namespace,
    seconds: float,
    peak: int,
    options: dict[str, Any] | None,
) -> None:
    info = describe(dst, args.out_dataset if fmt == "hdf5" else None, options)
    dst = info["path"]  # redacted where it is a URL
    layout = f"chunks {tuple(info['chunks'])}"
    if info["shards"]:
        layout += f", shards {tuple(info['shards'])}"
    ratio = info["compression_ratio"]
    print(
        f"{src} -> {dst}: {info['format']}, shape {tuple(info['shape'])}, "
        f"{info['dtype']}, {layout}, codec {info['codec']}"
    )
    print(
        f"  {format_bytes(info['logical_bytes'])} in memory, "
        f"{format_bytes(info['stored_bytes'])} stored"
        + (f" (ratio {ratio:.2f})" if ratio else "")
        + f", in {seconds:.1f} s; peak NumPy memory {format_bytes(peak)} of the "
        f"{format_bytes(args.max_ram)} budget"
    )


def _empty_directory(path: str) -> bool:
    return os.path.isdir(path) and not os.path.islink(path) and not os.listdir(path)


def _check_replaceable(dst: str, fmt: str, dataset: str) -> None:
    """``--overwrite`` replaces an array of the output's format and nothing else: no
    directory of other files, zarr group, HDF5 file with other datasets, or unrelated file."""
    what = "oocarray convert --overwrite"
    if fmt == "zarr":
        prepare_target(dst, "w", what)  # a zarr array, or raises
        foreign = foreign_files(dst)
        if foreign:
            shown = ", ".join(foreign[:5]) + (", ..." if len(foreign) > 5 else "")
            raise oc.StoreExistsError(
                f"{dst!r} is a zarr array that also holds other files ({shown}): {what} "
                "replaces the whole directory, so it leaves it alone; move them out first"
            )
        return
    signature = {"hdf5": b"\x89HDF\r\n\x1a\n", "npy": b"\x93NUMPY"}[fmt]
    head = b""
    if os.path.isfile(dst):
        with open(dst, "rb") as f:
            head = f.read(len(signature))
    if head != signature:
        kind = "a directory" if os.path.isdir(dst) else "a file"
        raise oc.StoreExistsError(
            f"{dst!r} is {kind} but not {'an HDF5' if fmt == 'hdf5' else 'a .npy'} file: "
            f"{what} never deletes it; choose another DST"
        )
    if fmt == "hdf5":
        import h5py

        with h5py.File(dst, "r") as f:
            members = sorted(f)
        if members != [dataset.strip("/")]:
            raise oc.StoreExistsError(
                f"{dst!r} is an HDF5 file holding {members}: {what} replaces the whole file, "
                f"so only one holding just the dataset {dataset!r}; choose another DST"
            )


def _check_options(args: argparse.Namespace, fmt: str) -> str:
    """The codec to write with, after checking that the options fit the output format."""
    if fmt == "npy":
        for name, value in (("--chunks", args.chunks), ("--shards", args.shards)):
            if value is not None:
                raise UsageError(
                    f"{name} does not apply to a .npy output (it has no chunks)", _PROG
                )
        if args.codec not in (None, "none"):
            raise UsageError(
                f".npy files are not compressed: --codec {args.codec} needs a zarr or HDF5 output",
                _PROG,
            )
        return "none"
    if fmt == "hdf5":
        if args.shards is not None:
            raise UsageError("--shards applies to zarr outputs only", _PROG)
        codec = args.codec or "none"
        if codec not in HDF5_CODECS:
            raise UsageError(
                f"HDF5 outputs take --codec {', '.join(HDF5_CODECS)}, got {codec!r} (zstd and "
                "lz4 need a zarr output)",
                _PROG,
            )
        return str(codec)
    codec = args.codec or "zstd"
    if codec not in ZARR_CODECS:
        raise UsageError(
            f"zarr outputs take --codec {', '.join(ZARR_CODECS)}, got {codec!r}", _PROG
        )
    return str(codec)


def _partial_name(dst: str, fmt: str) -> str:
    """A fresh name beside ``dst`` to write to before the rename."""
    parent, name = os.path.split(os.path.abspath(dst))
    handle, path = tempfile.mkstemp(prefix=f".{name}.", suffix=".partial", dir=parent)
    os.close(handle)
    if fmt == "zarr":
        os.unlink(path)  # a directory will be made there
    return path


def _replace(partial: str, dst: str) -> None:
    """Move the finished output over ``dst`` (removing what was there)."""
    if os.path.isdir(dst) and not os.path.islink(dst):
        shutil.rmtree(dst)
    elif os.path.lexists(dst) and (os.path.isdir(partial) or os.path.islink(dst)):
        os.unlink(dst)
    os.replace(partial, dst)


def _remove(path: str) -> None:
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, ignore_errors=True)
    elif os.path.lexists(path):
        os.unlink(path)
