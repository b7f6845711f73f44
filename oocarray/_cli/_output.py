"""Text and JSON output of the command line: tables, numbers, sizes, and JSON without NaN."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from oocarray._memory import format_bytes

__all__ = ["format_bytes", "format_number", "print_json", "table", "to_json"]


def format_number(value: Any) -> str:
    """A number for a table: 6 significant digits, integers in full.

    Examples
    --------
    >>> format_number(3.14159265), format_number(12), format_number(float("nan"))
    ('3.14159', '12', 'nan')
    """
    if isinstance(value, (bool, np.bool_)):
        return str(bool(value))
    if isinstance(value, (int, np.integer)):
        return str(int(value))
    if isinstance(value, (complex, np.complexfloating)):
        return f"{complex(value):.6g}"
    return f"{float(value):.6g}"


def table(headers: Sequence[str], rows: Sequence[Sequence[str]], indent: int = 0) -> str:
    """Rows of cells under headers, left-aligned first column, right-aligned others.

    Examples
    --------
    >>> print(table(["name", "n"], [["a", "1"], ["bb", "22"]]))
    name   n
    a      1
    bb    22
    """
    widths = [max(len(str(cell)) for cell in column) for column in zip(headers, *rows, strict=True)]
    lines = []
    for row in [headers, *rows]:
        cells = [
            str(cell).ljust(width) if i == 0 else str(cell).rjust(width)
            for i, (cell, width) in enumerate(zip(row, widths, strict=True))
        ]
        lines.append(" " * indent + "  ".join(cells).rstrip())
    return "\n".join(lines)


def to_json(value: Any) -> Any:
    """``value`` with NumPy scalars and arrays as Python values and NaN/infinity as None
    (JSON has no NaN), ready for :func:`json.dumps`.

    Examples
    --------
    >>> to_json({"a": np.float32(1.5), "b": [float("nan"), np.int64(2)], "c": (1, 2)})
    {'a': 1.5, 'b': [None, 2], 'c': [1, 2]}
    """
    if isinstance(value, dict):
        return {str(k): to_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_json(v) for v in value]
    if isinstance(value, np.ndarray):
        return to_json(value.tolist())
    if isinstance(value, np.generic):
        return to_json(value.item())
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, complex):
        return [to_json(value.real), to_json(value.imag)]
    return value


def print_json(value: Any) -> None:
    """Print ``value`` as indented, strict JSON."""
    print(json.dumps(to_json(value), indent=2, allow_nan=False))
