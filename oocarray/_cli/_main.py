"""The ``oocarray`` command line: the parser, the dispatch to each command, and errors as one
line on stderr.

Exit status: 0 on success, 1 when the work failed (a missing or damaged file, a format
oocarray does not read, a full disk), 2 when the command line is wrong, 130 on Ctrl-C.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from oocarray._cli import _bench, _convert, _demo, _info, _rechunk, _stats
from oocarray._cli._args import Parser, UsageError

__all__ = ["build_parser", "main"]

EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130


def build_parser() -> Parser:
    """The parser of the whole command line, with a subcommand per job."""
    import oocarray as oc

    parser = Parser(
        prog="oocarray",
        description="NumPy on data larger than RAM: describe, summarise and convert arrays "
        "on disk (zarr, HDF5, .npy) in bounded memory, see the main job run (demo), and run "
        "the benchmarks.",
        epilog="Run 'oocarray COMMAND --help' for a command's options.",
    )
    parser.add_argument("--version", action="version", version=f"oocarray {oc.__version__}")
    parser.add_argument(
        "--traceback",
        action="store_true",
        help="on an error, show the full Python traceback instead of one line",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for module in (_info, _stats, _convert, _rechunk, _demo, _bench):
        module.add_parser(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``oocarray`` command line with ``argv`` (default: ``sys.argv[1:]``) and return
    its exit status.

    Examples
    --------
    >>> main(["--version"])
    oocarray 0.1.0
    0
    """
    args_list = list(sys.argv[1:] if argv is None else argv)
    prog = "oocarray"
    show_traceback = "--traceback" in args_list
    try:
        try:
            args = build_parser().parse_args(args_list)
        except SystemExit as stop:  # --help and --version
            return stop.code if isinstance(stop.code, int) else 0
        prog = f"oocarray {args.command}"
        return int(args.run(args))
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # output piped into `head`: stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except UsageError as error:
        if show_traceback:
            raise
        _error(error.prog, str(error))
        return EXIT_USAGE
    except Exception as error:
        if show_traceback:
            raise
        _error(prog, _describe(error))
        return EXIT_FAILED


def _describe(error: BaseException) -> str:
    """The first line of an error, and its kind where the message alone would be unclear."""
    import oocarray as oc

    text = str(error).strip()
    first = text.splitlines()[0] if text else ""
    if isinstance(error, OSError) and error.filename and not first:
        first = f"{error.strerror or 'failed'}: {error.filename}"
    if isinstance(error, KeyError | ImportError | MemoryError) and not isinstance(
        error, oc.OOCArrayError
    ):
        return f"{type(error).__name__}: {first}" if first else type(error).__name__
    if (
        isinstance(error, oc.OOCArrayError | OSError | ValueError | TypeError | NotImplementedError)
        and first
    ):
        return first
    # Anything else is unexpected: name it, and say how to see where it came from.
    return (
        f"unexpected {type(error).__name__}: {first} (run again with --traceback for details)"
        if first
        else f"unexpected {type(error).__name__} (run again with --traceback for details)"
    )


def _error(prog: str, message: str) -> None:
    print(f"{prog}: error: {message}", file=sys.stderr)
    sys.stderr.flush()


if __name__ == "__main__":
    sys.exit(main())
