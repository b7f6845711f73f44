"""Argument parsing shared by the commands: a parser whose errors are one line, and the types
of the options (sizes, chunk shapes, axes)."""

from __future__ import annotations

import argparse
from typing import Any, NoReturn

from oocarray._memory import parse_size

__all__ = [
    "Parser",
    "UsageError",
    "add_common",
    "axis_argument",
    "shape_argument",
    "size_argument",
]


class UsageError(ValueError):
    """The command line itself is wrong (exit status 2).

    Parameters
    ----------
    message
        What was wrong, one line.
    prog
        The command it concerns, e.g. ``"oocarray stats"``.
    """

    def __init__(self, message: str, prog: str = "oocarray") -> None:
        super().__init__(message)
        self.prog = prog


class Parser(argparse.ArgumentParser):
    """An ``ArgumentParser`` that raises :class:`UsageError` instead of printing the usage and
    exiting, so every error of the command line is one line."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{message} (see {self.prog} --help)", self.prog)


def size_argument(text: str) -> int:
    """A size such as ``256M`` or ``1.5G`` (powers of 1024), for ``--max-ram`` and ``--size``.

    Examples
    --------
    >>> size_argument("256M")
    268435456
    """
    try:
        value = parse_size(text, "size")
    except (ValueError, TypeError) as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    assert value is not None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"a size must be positive, got {text!r}")
    return value


def shape_argument(text: str) -> tuple[int, ...]:
    """A chunk or shard shape: positive integers separated by commas, e.g. ``1024,64``.

    Examples
    --------
    >>> shape_argument("1024,64")
    (1024, 64)
    """
    try:
        shape = tuple(int(part) for part in text.replace("x", ",").split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected positive integers separated by commas such as 1024,64, got {text!r}"
        ) from None
    if not shape or any(n < 1 for n in shape):
        raise argparse.ArgumentTypeError(f"every length must be at least 1, got {text!r}")
    return shape


def axis_argument(text: str) -> int | None:
    """An axis number, or ``all`` (None: the whole array).

    Examples
    --------
    >>> axis_argument("1"), axis_argument("all")
    (1, None)
    """
    if text.lower() in ("all", "none"):
        return None
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected an axis number such as 0, or 'all', got {text!r}"
        ) from None


def storage_option_argument(text: str) -> tuple[str, Any]:
    """``KEY=VALUE``; ``true``/``false`` become booleans.

    Examples
    --------
    >>> storage_option_argument("anon=true"), storage_option_argument("region=eu-west-1")
    (('anon', True), ('region', 'eu-west-1'))
    """
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(
            f"expected KEY=VALUE such as region=us-east-1, got {text!r}"
        )
    flags = {"true": True, "false": False}
    return key.strip(), flags.get(value.strip().lower(), value)


def storage_options(args: argparse.Namespace) -> dict[str, Any] | None:
    """The ``--storage-option`` values of a command, or None where none were given."""
    return dict(getattr(args, "storage_options", None) or []) or None


def add_common(parser: argparse.ArgumentParser, *, max_ram: str | None = None) -> None:
    """Options several commands share: ``--dataset`` and, with a default, ``--max-ram``."""
    parser.add_argument(
        "--dataset",
        metavar="NAME",
        help="the array inside an HDF5 file or a zarr group, e.g. 'a/b' "
        "(not needed when it holds only one)",
    )
    parser.add_argument(
        "--storage-option",
        dest="storage_options",
        action="append",
        type=storage_option_argument,
        default=[],
        metavar="KEY=VALUE",
        help="for object-store URLs (s3://, gs://, az://, https://): an option of the store, "
        "e.g. endpoint=http://localhost:9000, region=eu-west-1, anon=true (repeat for more); "
        "give credentials in the AWS_*, GOOGLE_* or AZURE_* variables, not here",
    )
    if max_ram is not None:
        parser.add_argument(
            "--max-ram",
            type=size_argument,
            default=size_argument(max_ram),
            metavar="SIZE",
            help=f"RAM budget of the NumPy memory the command uses (default {max_ram}); "
            "sizes like 512M or 2G",
        )
