"""The standard's set functions, through NumPy's ``unique`` (the compute layer's
out-of-core set functions).  NaNs are distinct values, as the standard asks."""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from oocarray._compute._namespace._common import array_result, check_array

__all__ = [
    "UniqueAllResult",
    "UniqueCountsResult",
    "UniqueInverseResult",
    "unique_all",
    "unique_counts",
    "unique_inverse",
    "unique_values",
]


class UniqueAllResult(NamedTuple):
    values: Any
    indices: Any
    inverse_indices: Any
    counts: Any


class UniqueCountsResult(NamedTuple):
    values: Any
    counts: Any


class UniqueInverseResult(NamedTuple):
    values: Any
    inverse_indices: Any


def _unique(x: Any, name: str, **returns: bool) -> tuple[Any, ...]:
    check_array(x, name)
    found = np.unique(x, equal_nan=False, **returns)  # type: ignore[call-overload]
    return found if isinstance(found, tuple) else (found,)


def _inverse_shaped(inverse: Any, x: Any) -> Any:
    result = array_result(inverse)
    if tuple(result.shape) != tuple(x.shape):
        result = array_result(np.reshape(result, x.shape))
    return result


def unique_values(x: Any, /) -> Any:
    """The distinct values of ``x``, sorted, flat."""
    return array_result(_unique(x, "unique_values")[0])


def unique_counts(x: Any, /) -> UniqueCountsResult:
    """The distinct values of ``x`` and how often each occurs."""
    values, counts = _unique(x, "unique_counts", return_counts=True)
    return UniqueCountsResult(array_result(values), array_result(counts))


def unique_inverse(x: Any, /) -> UniqueInverseResult:
    """The distinct values of ``x`` and, per element of ``x``, the position of its value."""
    values, inverse = _unique(x, "unique_inverse", return_inverse=True)
    return UniqueInverseResult(array_result(values), _inverse_shaped(inverse, x))


def unique_all(x: Any, /) -> UniqueAllResult:
    """The distinct values, the first position of each, the inverse and the counts."""
    values, indices, inverse, counts = _unique(
        x, "unique_all", return_index=True, return_inverse=True, return_counts=True
    )
    return UniqueAllResult(
        array_result(values),
        array_result(indices),
        _inverse_shaped(inverse, x),
        array_result(counts),
    )
