"""Parsing and formatting of byte sizes ("512M", "8G", "1.5GiB")."""

from __future__ import annotations

import math
import re
from numbers import Integral, Real

__all__ = ["format_bytes", "parse_size"]

# K, M, G, T, P alone or with "iB" are binary (1024-based, as in ulimit and -Xmx); with a plain
# "B" ("8GB") they are decimal, as disk vendors and dask use them.
_BINARY = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40, "p": 1 << 50}
_DECIMAL = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12, "p": 10**15}
_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)(?:[eE]([+-]?\d+))?\s*([kmgtp]?)(i?b?)\s*$", re.I)


def parse_size(value: object, setting: str = "size", *, allow_none: bool = False) -> int | None:
    """Return ``value`` as a number of bytes.

    Parameters
    ----------
    value
        An integer number of bytes, or a string such as ``"512M"``, ``"8G"``, ``"1.5GiB"`` or
        ``"2GB"`` (a plain ``B`` after the unit means powers of 1000).
    setting
        The name of the setting, used in error messages.
    allow_none
        Whether ``None`` (no limit) is accepted.

    Returns
    -------
    int or None
        The number of bytes; ``None`` only when ``value`` is ``None`` and ``allow_none``.

    Raises
    ------
    TypeError
        ``value`` is neither an integer nor a string.
    ValueError
        ``value`` is negative, not finite, or not a size.  A lowercase ``b`` (``"2Gb"``) means
        bits, which no setting counts in: it is refused rather than guessed.

    Examples
    --------
    >>> parse_size("1.5GiB")
    1610612736
    >>> parse_size("2GB")
    2000000000
    """
    example = f'e.g. {setting}="512M", "8G", "1.5GiB" or an int number of bytes'
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, (Integral, Real, str)):
        raise TypeError(f"{setting} must be an int or a size string ({example}), got {value!r}")
    if isinstance(value, Integral):
        result = int(value)
    elif isinstance(value, Real):
        value = float(value)
        if not math.isfinite(value) or value != int(value):
            raise ValueError(
                f"{setting} must be a whole number of bytes ({example}), got {value!r}"
            )
        result = int(value)
    else:
        match = _SIZE_RE.match(value)
        if match is None:
            raise ValueError(f"{setting} is not a size: {value!r} ({example})")
        number, exponent, unit, suffix = match.groups()
        if suffix.endswith("b"):
            raise ValueError(_bits_message(setting, value, number, exponent, unit))
        unit = unit.lower()
        suffix = suffix.lower()
        if suffix == "b" and unit:
            scale = _DECIMAL[unit]
        elif suffix == "i" or (suffix == "ib" and not unit):
            raise ValueError(f"{setting} has a malformed unit: {value!r} ({example})")
        else:
            scale = _BINARY[unit]
        magnitude = float(f"{number}e{exponent or 0}") * scale  # huge exponents become inf
        if not math.isfinite(magnitude) or magnitude > 2**62:
            raise ValueError(f"{setting} is absurdly large: {value!r} ({example})")
        if not unit and magnitude != int(magnitude):
            raise ValueError(
                f"{setting} must be a whole number of bytes ({example}), got {value!r}"
            )
        result = round(magnitude)
    if result < 0:
        raise ValueError(f"{setting} must not be negative, got {value!r} ({example})")
    if result > 2**62:
        raise ValueError(f"{setting} is absurdly large: {value!r} ({example})")
    return result


def _bits_message(setting: str, value: str, number: str, exponent: str | None, unit: str) -> str:
    amount = f"{number}{'e' + exponent if exponent else ''}{unit.upper()}"
    return (
        f"{setting} is {value!r}: a lowercase 'b' means bits, and sizes are in bytes. Write "
        f"{amount!r} or {amount + 'iB'!r} for powers of 1024, or {amount + 'B'!r} for powers "
        "of 1000"
        if unit
        else f"{setting} is {value!r}: a lowercase 'b' means bits, and sizes are in bytes. "
        f"Write {amount!r} or {amount + 'B'!r}"
    )


def format_bytes(n: int | None) -> str:
    """Format a byte count for people: ``format_bytes(1536)`` is ``'1.5 KiB'``.

    Examples
    --------
    >>> format_bytes(3 << 30)
    '3.0 GiB'
    """
    if n is None:
        return "unlimited"
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"):
        if abs(value) < 1024 or unit == "EiB":
            return f"{int(value)} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")
