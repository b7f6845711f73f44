"""Set functions of chunked arrays out of core: ``np.unique`` and its array-API variants, and
``np.isin``.

Distinct values, counts and first indices come from one streaming pass (``_unique``: per-block
tables merged in bounded memory, spilled and merged externally when there are many).  The
inverse (each element's index among the distinct values) has the input's shape, so it is a lazy
expression: a block is looked up in the distinct values with ``np.searchsorted`` when asked for.
``np.isin`` is a lazy elementwise expression; a chunked ``test_elements`` is reduced to its
distinct values first.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from oocarray._compute._engine import evaluate
from oocarray._compute._limits import require_memory
from oocarray._compute._nodes import Apply, BlockReads, Node, Region, as_node
from oocarray._compute._unique import Table, UniqueCount
from oocarray._storage import StoredArray

__all__ = ["FUNCTIONS", "Lookup", "distinct", "isin", "unique"]

# NumPy's named tuples for the array-API functions' results.
_ALL: Any = type(np.unique_all(np.zeros(0)))
_COUNTS: Any = type(np.unique_counts(np.zeros(0)))
_INVERSE: Any = type(np.unique_inverse(np.zeros(0)))


def distinct(x: Any, *, equal_nan: bool = True, first: bool = False, name: str = "unique") -> Table:
    """The sorted distinct values of ``x`` with their counts (and first flat indices), in one
    streaming pass: NumPy arrays when they fit, else temporary chunked arrays."""
    reduction = UniqueCount(as_node(x), equal_nan, first, name)
    evaluate([reduction], [], progress=True, name=name)
    return reduction.finish()


class Lookup(Node):
    """Each element's index among the sorted distinct ``values`` (the inverse of a unique).

    NaNs: with ``equal_nan`` every NaN is the one NaN entry; without it, each NaN is an entry
    of its own, in the order of their flat indices ``nan_positions``."""

    def __init__(self, part: Node, table: Table, equal_nan: bool) -> None:
        self.part = part
        self.shape = part.shape
        self.dtype = np.dtype(np.intp)
        self.values: np.ndarray = table.values
        self.equal_nan = equal_nan
        self.nan_start = len(self.values)
        self.nan_positions = np.empty(0, np.intp)
        self.nan_order = np.empty(0, np.intp)
        if self.values.dtype.kind in "fc" and len(self.values):
            nans = np.isnan(self.values)
            self.nan_start = int(np.searchsorted(nans, True))
            if not equal_nan and table.firsts is not None:
                positions = np.asarray(table.firsts)[self.nan_start :]
                self.nan_order = np.argsort(positions, kind="stable")
                self.nan_positions = positions[self.nan_order]

    def children(self) -> Sequence[Node]:
        return (self.part,)

    def evaluate(self, region: Region, reads: BlockReads) -> np.ndarray:
        shape = tuple(s.stop - s.start for s in region)
        block = np.broadcast_to(self.part.evaluate(region, reads), shape)
        index = np.asarray(np.searchsorted(self.values, block), dtype=np.intp).reshape(-1)
        if self.nan_start == len(self.values):
            return index.reshape(shape)
        nans = np.flatnonzero(np.isnan(block))
        if self.equal_nan or not nans.size:
            index[nans] = self.nan_start
            return index.reshape(shape)
        flat = nans  # (a 0-d array's one element is at 0)
        if shape:
            where = np.unravel_index(nans, shape)
            flat = np.ravel_multi_index(
                tuple(w + s.start for w, s in zip(where, region, strict=True)), self.shape
            )
        rank = np.searchsorted(self.nan_positions, flat)
        index[nans] = self.nan_start + self.nan_order[rank]
        return index.reshape(shape)


def _inverse(node: Node, table: Table, equal_nan: bool, function: str) -> Lookup:
    if not isinstance(table.values, np.ndarray):
        require_memory(
            f"{function} (the inverse looks elements up in the distinct values, held in memory)",
            2 * table.values.nbytes,
            smallest_bytes=2 * table.values.nbytes,
        )
        table.values = np.asarray(table.values[...])
    return Lookup(node, table, equal_nan)


def _no_axis(function: str, axis: Any) -> None:
    if axis is not None:
        raise TypeError(
            f"{function}(..., axis={axis!r}) is not supported on chunked arrays: only axis=None "
            "(the distinct elements); for unique rows, load the array with x[...]"
        )


def unique(
    ar: Any,
    return_index: bool = False,
    return_inverse: bool = False,
    return_counts: bool = False,
    axis: Any = None,
    *,
    equal_nan: bool = True,
    sorted: bool = True,
) -> Any:
    """``np.unique`` of a chunked array or expression (always sorted), in one streaming pass;
    the inverse is a lazy expression of the input's shape.

    Examples
    --------
    >>> import numpy as np, oocarray as oc
    >>> x = oc.from_numpy(np.array([3, 1, 3, 2, 1, 3]), chunks=(4,))
    >>> values, counts = np.unique(x, return_counts=True)
    >>> values.tolist(), counts.tolist()
    ([1, 2, 3], [2, 1, 3])
    >>> np.unique(x, return_inverse=True)[1].compute().tolist()
    [2, 0, 2, 1, 0, 2]
    """
    _no_axis("np.unique", axis)
    node = as_node(ar)
    first = return_index or (return_inverse and not equal_nan)
    table = distinct(node, equal_nan=equal_nan, first=first)
    if not (return_index or return_inverse or return_counts):
        return table.values
    result: list[Any] = [table.values]
    if return_index:
        result.append(table.firsts)
    if return_inverse:
        result.append(_inverse(node, table, equal_nan, "np.unique(..., return_inverse=True)"))
    if return_counts:
        result.append(table.counts)
    return tuple(result)


def unique_values(x: Any, /) -> Any:
    """``np.unique_values``: the distinct values (sorted here; NumPy leaves the order open)."""
    return distinct(x, equal_nan=False, name="unique_values").values


def unique_counts(x: Any, /) -> Any:
    """``np.unique_counts``: the distinct values and their counts (NaNs each distinct)."""
    table = distinct(x, equal_nan=False, name="unique_counts")
    return _COUNTS(table.values, table.counts)


def unique_inverse(x: Any, /) -> Any:
    """``np.unique_inverse``: the distinct values, and the inverse as a lazy expression."""
    node = as_node(x)
    table = distinct(node, equal_nan=False, first=True, name="unique_inverse")
    return _INVERSE(table.values, _inverse(node, table, False, "np.unique_inverse"))


def unique_all(x: Any, /) -> Any:
    """``np.unique_all``: distinct values, first indices, the inverse (lazy) and counts."""
    node = as_node(x)
    table = distinct(node, equal_nan=False, first=True, name="unique_all")
    inverse = _inverse(node, table, False, "np.unique_all")
    return _ALL(table.values, table.firsts, inverse, table.counts)


def isin(
    element: Any,
    test_elements: Any,
    assume_unique: bool = False,
    invert: bool = False,
    *,
    kind: Any = None,
) -> Any:
    """``np.isin``: lazy and elementwise over a chunked ``element``; a chunked
    ``test_elements`` is first reduced to its distinct values (which must fit in memory).

    Examples
    --------
    >>> import numpy as np, oocarray as oc
    >>> x = oc.from_numpy(np.arange(6), chunks=(4,))
    >>> np.isin(x, [1, 4, 9]).compute().tolist()
    [False, True, False, False, True, False]
    """
    if isinstance(test_elements, Node | StoredArray):
        table = distinct(test_elements, name="isin")
        if not isinstance(table.values, np.ndarray):
            require_memory(
                "np.isin (the distinct test elements are held in memory)",
                2 * table.values.nbytes,
                smallest_bytes=2 * table.values.nbytes,
            )
        # (not assume_unique=True: NumPy would take each block of ``element`` as unique too)
        test = np.asarray(table.values[...])
    else:
        test = np.asarray(test_elements)
    options = {"assume_unique": assume_unique, "invert": invert, "kind": kind}
    if not isinstance(element, Node | StoredArray):
        return np.isin(element, test, **options)
    node = as_node(element)
    np.isin(np.zeros(0, node.dtype), test, **options)  # NumPy's errors, before any work

    def member(block: np.ndarray) -> np.ndarray:
        return np.isin(block, test, **options)

    return Apply(member, [node], node.shape, np.dtype(bool), name="isin")


FUNCTIONS: dict[Any, Callable[..., Any]] = {
    np.unique: unique,
    np.unique_values: unique_values,
    np.unique_counts: unique_counts,
    np.unique_inverse: unique_inverse,
    np.unique_all: unique_all,
    np.isin: isin,
}
