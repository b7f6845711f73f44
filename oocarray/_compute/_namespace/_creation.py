"""The standard's creation functions, none of which holds a large array in RAM.

Filled arrays (``zeros``, ``full``, ``*_like``) are expressions over one scalar; ranges and
grids (``arange``, ``linspace``, ``eye``, ``meshgrid``) are expressions whose blocks are made
from their positions when evaluated; ``tril``/``triu`` mask blocks of their input by position.
``asarray`` of NumPy data or Python values stores it in a temporary chunked array (owned by
the active manager, deleted when unreferenced); of an array of the namespace it is that array.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from oocarray._compute._array import Expr, LazyArray
from oocarray._compute._broadcast import Broadcast
from oocarray._compute._engine import StoreTarget, evaluate
from oocarray._compute._namespace._common import check_array, tree
from oocarray._compute._nodes import BlockReads, Constant, ExpandDims, Node, Region
from oocarray._compute._temporaries import temporary
from oocarray._storage import StoredArray

__all__ = [
    "arange",
    "asarray",
    "check_device",
    "empty",
    "empty_like",
    "eye",
    "from_dlpack",
    "full",
    "full_like",
    "linspace",
    "meshgrid",
    "ones",
    "ones_like",
    "store",
    "tril",
    "triu",
    "zeros",
    "zeros_like",
]


class Generated(Node):
    """An array whose block is ``make(region)``, computed from positions alone."""

    def __init__(
        self, shape: tuple[int, ...], dtype: np.dtype[Any], make: Callable[[Region], Any]
    ) -> None:
        self.shape = shape
        self.dtype = dtype
        self.make = make

    def evaluate(self, region: Region, reads: BlockReads) -> np.ndarray:
        return np.asarray(self.make(region)).astype(self.dtype, copy=False)


class Triangle(Node):
    """``part`` with the elements above (``lower``) or below its ``k``-th diagonal zeroed."""

    def __init__(self, part: Node, k: int, lower: bool) -> None:
        self.part = part
        self.k = k
        self.lower = lower
        self.shape = part.shape
        self.dtype = part.dtype

    def children(self) -> Sequence[Node]:
        return (self.part,)

    def evaluate(self, region: Region, reads: BlockReads) -> np.ndarray:
        block = np.broadcast_to(
            self.part.evaluate(region, reads), tuple(s.stop - s.start for s in region)
        )
        rows = np.arange(region[-2].start, region[-2].stop)[:, None]
        columns = np.arange(region[-1].start, region[-1].stop)[None, :]
        keep = columns <= rows + self.k if self.lower else columns >= rows + self.k
        return np.where(keep, block, np.zeros((), self.dtype))


def check_device(device: Any, function: str) -> None:
    if device not in (None, "cpu"):
        raise ValueError(f"{function}: oocarray arrays live on 'cpu' only, got device={device!r}")


def _shape(shape: Any) -> tuple[int, ...]:
    return (int(shape),) if isinstance(shape, int | np.integer) else tuple(int(n) for n in shape)


def _dtype(dtype: Any, default: Any) -> np.dtype[Any]:
    found: np.dtype[Any] = np.dtype(default if dtype is None else dtype)
    return found


def _default_dtype(value: Any) -> np.dtype[Any]:
    """The standard's default dtype of a Python scalar."""
    for kind, dtype in (
        (bool, "bool"),
        (int, "int64"),
        (float, "float64"),
        (complex, "complex128"),
    ):
        if isinstance(value, kind):
            return np.dtype(dtype)
    return np.asarray(value).dtype


def store(node: Node) -> StoredArray:
    """``node``'s values written to a temporary chunked array, block by block."""
    out = temporary(node.shape, node.dtype, chunks=node.chunks())
    evaluate([], [StoreTarget(node, out.__setitem__, out.shards or out.chunks)], False, "asarray")
    return out


def asarray(obj: Any, /, *, dtype: Any = None, device: Any = None, copy: bool | None = None) -> Any:
    """An array of the namespace: ``obj`` itself when it is one (lazily cast to ``dtype``),
    else its values stored in a temporary chunked array.

    ``copy=True`` of a chunked array or expression writes its values to a temporary chunked
    array, chunk by chunk; ``copy=False`` refuses whatever would need a copy.

    Examples
    --------
    >>> import oocarray.array_api as xp
    >>> x = xp.asarray([[1, 2], [3, 4]], dtype=xp.int32)
    >>> type(x).__name__, x.dtype == xp.int32, x.shape
    ('ChunkedArray', True, (2, 2))
    """
    check_device(device, "asarray")
    if isinstance(obj, LazyArray):
        obj = check_array(obj, "asarray")
        if dtype is not None and np.dtype(dtype) != obj.dtype:
            if copy is False:
                raise ValueError("asarray(copy=False) cannot change the dtype without a copy")
            return Expr(tree(obj.astype(dtype)))
        return store(tree(obj)) if copy else obj
    if copy is False:
        raise ValueError(
            "asarray(copy=False) of a non-oocarray value is impossible: its values are "
            "copied into chunks"
        )
    if dtype is None and isinstance(obj, bool | int | float | complex):
        dtype = _default_dtype(obj)
    array = np.asarray(obj, dtype=None if dtype is None else np.dtype(dtype))
    if array.dtype.kind not in "biufc":
        raise TypeError(f"asarray takes numbers and booleans, got dtype {array.dtype}")
    if array.dtype == np.dtype("float16") and dtype is None:
        array = array.astype(np.float32)  # not a standard dtype, unless asked for
    out = temporary(array.shape, array.dtype)
    out[...] = array
    return out


def _filled(shape: Any, value: Any, dtype: np.dtype[Any]) -> Expr:
    own = _shape(shape)
    return Expr(Constant(np.full((), value, dtype=dtype), own))


def zeros(shape: Any, *, dtype: Any = None, device: Any = None) -> Expr:
    """An array of zeros (lazy: nothing is stored)."""
    check_device(device, "zeros")
    return _filled(shape, 0, _dtype(dtype, "float64"))


def ones(shape: Any, *, dtype: Any = None, device: Any = None) -> Expr:
    """An array of ones (lazy: nothing is stored)."""
    check_device(device, "ones")
    return _filled(shape, 1, _dtype(dtype, "float64"))


def empty(shape: Any, *, dtype: Any = None, device: Any = None) -> Expr:
    """An array of unspecified values: zeros here (lazy: nothing is stored)."""
    check_device(device, "empty")
    return _filled(shape, 0, _dtype(dtype, "float64"))


def full(shape: Any, fill_value: Any, *, dtype: Any = None, device: Any = None) -> Expr:
    """An array of ``fill_value`` (lazy: nothing is stored).

    Examples
    --------
    >>> import numpy as np, oocarray.array_api as xp
    >>> np.asarray(xp.full((2, 3), 7))
    array([[7, 7, 7],
           [7, 7, 7]])
    """
    check_device(device, "full")
    if isinstance(fill_value, LazyArray):
        fill_value = np.asarray(fill_value)
    return _filled(shape, fill_value, _dtype(dtype, _default_dtype(fill_value)))


def _like(x: Any, value: Any, dtype: Any, device: Any, function: str) -> Expr:
    check_device(device, function)
    check_array(x, function)
    return _filled(x.shape, value, _dtype(dtype, x.dtype))


def zeros_like(x: Any, /, *, dtype: Any = None, device: Any = None) -> Expr:
    """Zeros of ``x``'s shape and dtype (lazy)."""
    return _like(x, 0, dtype, device, "zeros_like")


def ones_like(x: Any, /, *, dtype: Any = None, device: Any = None) -> Expr:
    """Ones of ``x``'s shape and dtype (lazy)."""
    return _like(x, 1, dtype, device, "ones_like")


def empty_like(x: Any, /, *, dtype: Any = None, device: Any = None) -> Expr:
    """An array of ``x``'s shape and dtype of unspecified values: zeros here (lazy)."""
    return _like(x, 0, dtype, device, "empty_like")


def full_like(x: Any, /, fill_value: Any, *, dtype: Any = None, device: Any = None) -> Expr:
    """``fill_value`` in ``x``'s shape and dtype (lazy)."""
    return _like(x, fill_value, dtype, device, "full_like")


def arange(
    start: Any, /, stop: Any = None, step: Any = 1, *, dtype: Any = None, device: Any = None
) -> Expr:
    """Evenly spaced values in ``[start, stop)`` (lazy: each block made from its positions).

    Examples
    --------
    >>> import numpy as np, oocarray.array_api as xp
    >>> np.asarray(xp.arange(2, 11, 3))
    array([2, 5, 8])
    """
    check_device(device, "arange")
    if stop is None:
        start, stop = 0, start
    if step == 0:
        raise ValueError("arange: step must not be zero")
    every_int = all(isinstance(v, int) for v in (start, stop, step))
    target = _dtype(dtype, "int64" if every_int else "float64")
    length = (
        max(0, math.ceil((stop - start) / step)) if not every_int else len(range(start, stop, step))
    )
    if every_int:
        first, delta = np.asarray(start, target), np.asarray(step, target)
    else:  # as NumPy: the first two values in the dtype, the rest first + i * their difference
        first = np.asarray(start, target)
        delta = np.asarray(np.asarray(start + step, target) - first, target)

    def make(region: Region) -> Any:
        positions = np.arange(region[0].start, region[0].stop)
        if every_int:
            return (start + step * positions).astype(target)
        return first + positions.astype(target) * delta

    return Expr(Generated((length,), target, make))


def linspace(
    start: Any,
    stop: Any,
    /,
    num: int,
    *,
    dtype: Any = None,
    device: Any = None,
    endpoint: bool = True,
) -> Expr:
    """``num`` evenly spaced values from ``start`` to ``stop`` (lazy), computed as NumPy's
    ``linspace`` computes them."""
    check_device(device, "linspace")
    if num < 0:
        raise ValueError(f"linspace: num must be non-negative, got {num}")
    is_complex = isinstance(start, complex) or isinstance(stop, complex)
    target = _dtype(dtype, "complex128" if is_complex else "float64")
    work = np.result_type(np.asarray(start), np.asarray(stop), float(num))
    begin, delta = np.asarray(start, work), np.asarray(stop, work) - np.asarray(start, work)
    div = (num - 1) if endpoint else num
    step = delta / div if div > 0 else np.nan

    def make(region: Region) -> Any:
        positions = np.arange(region[0].start, region[0].stop, dtype=work)
        if div > 0 and np.all(step == 0):
            values = positions / div * delta + begin
        elif div > 0:
            values = positions * step + begin
        else:
            values = positions * delta + begin
        if endpoint and num > 1 and region[0].stop == num:
            values[-1] = stop
        return values.astype(target)

    return Expr(Generated((num,), target, make))


def eye(
    n_rows: int,
    n_cols: int | None = None,
    /,
    *,
    k: int = 0,
    dtype: Any = None,
    device: Any = None,
) -> Expr:
    """Ones on the ``k``-th diagonal, zeros elsewhere (lazy)."""
    check_device(device, "eye")
    target = _dtype(dtype, "float64")
    columns = n_rows if n_cols is None else n_cols

    def make(region: Region) -> Any:
        rows = np.arange(region[0].start, region[0].stop)[:, None]
        cols = np.arange(region[1].start, region[1].stop)[None, :]
        return cols == rows + k

    return Expr(Generated((n_rows, columns), target, make))


def _triangle(x: Any, k: int, lower: bool, function: str) -> Expr:
    check_array(x, function)
    if x.ndim < 2:
        raise ValueError(f"{function} needs an array of at least 2 dimensions, got {x.ndim}")
    return Expr(Triangle(tree(x), k, lower))


def tril(x: Any, /, *, k: int = 0) -> Expr:
    """``x`` with the elements above its ``k``-th diagonal zeroed (lazy)."""
    return _triangle(x, k, True, "tril")


def triu(x: Any, /, *, k: int = 0) -> Expr:
    """``x`` with the elements below its ``k``-th diagonal zeroed (lazy)."""
    return _triangle(x, k, False, "triu")


def meshgrid(*arrays: Any, indexing: str = "xy") -> list[Expr]:
    """Coordinate grids from 1-D arrays (lazy broadcasts: nothing is copied)."""
    if indexing not in ("xy", "ij"):
        raise ValueError(f"meshgrid: indexing must be 'xy' or 'ij', got {indexing!r}")
    for a in arrays:
        check_array(a, "meshgrid")
        if a.ndim != 1:
            raise ValueError("meshgrid takes 1-D arrays")
    if len({a.dtype for a in arrays}) > 1:
        raise ValueError("meshgrid inputs must all have the same dtype")
    lengths = [a.shape[0] for a in arrays]
    places = list(range(len(arrays)))
    if indexing == "xy" and len(arrays) > 1:
        places[0], places[1] = 1, 0
    shape = [0] * len(arrays)
    for place, n in zip(places, lengths, strict=True):
        shape[place] = n
    grids = []
    for a, place in zip(arrays, places, strict=True):
        node = tree(a)
        for axis in range(len(arrays)):
            if axis != place:
                node = ExpandDims(node, axis)
        grids.append(Expr(node if node.shape == tuple(shape) else Broadcast(node, tuple(shape))))
    return grids


def from_dlpack(x: Any, /, *, device: Any = None, copy: bool | None = None) -> Any:
    """An array of the namespace holding the values of a DLPack producer (stored in chunks)."""
    check_device(device, "from_dlpack")
    if copy is False:
        raise ValueError("from_dlpack(copy=False) is impossible: the values are copied to chunks")
    return asarray(np.from_dlpack(x))
