"""Shapes as NumPy takes them."""

from __future__ import annotations

import operator
from collections.abc import Sequence

import numpy as np

__all__ = ["parse_shape"]


def parse_shape(shape: object) -> tuple[int, ...]:
    """``shape`` as a tuple of ints; like NumPy, any integer, integer sequence or integer
    array (``np.array([2, 3])``, a 0-d one) is a shape."""
    example = "e.g. (1024, 64), 1024 or np.array([1024, 64])"
    if isinstance(shape, (str, bytes, bool, np.bool_)):
        raise TypeError(f"shape must be an int or a sequence of ints, {example}; got {shape!r}")
    try:
        dims: tuple[object, ...] = (operator.index(shape),)  # type: ignore[arg-type]
    except TypeError:
        if not isinstance(shape, (Sequence, np.ndarray)):
            raise TypeError(
                f"shape must be an int or a sequence of ints, {example}; got {shape!r}"
            ) from None
        dims = tuple(shape)
    result = []
    for d in dims:
        if isinstance(d, (bool, np.bool_)):
            raise TypeError(f"shape entries must be ints, {example}; got {shape!r}")
        try:
            size = operator.index(d)  # type: ignore[arg-type]
        except TypeError:
            raise TypeError(f"shape entries must be ints, {example}; got {shape!r}") from None
        if size < 0:
            raise ValueError(f"shape entries must not be negative; got {shape!r}")
        result.append(size)
    return tuple(result)
