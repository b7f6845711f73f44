"""The compute layer's array types: :class:`ChunkedArray` (the stored array users get) and
:class:`Expr` (a lazy expression), both :class:`LazyArray`: NumPy's ufunc and function
protocols and materialising, defined here in their class bodies; operators and elementwise
methods (``_compute._elementwise_methods``), reshaping (``_compute._shape_methods``), writing
(``_compute._output_methods``) and reductions (``_compute._reductions``) in base classes.

An :class:`Expr` holds an expression tree (``_compute._nodes``), as dask's ``Array`` holds a
graph; a :class:`ChunkedArray` is a storage-layer :class:`StoredArray` (data access: shape,
indexing, writing, ``as_ndarray``, pickling) that is also lazy.  What NumPy asks goes to
``_compute._ops`` with the trees and stored arrays inside, and trees that come back are wrapped
as :class:`Expr`.
"""

from __future__ import annotations

import operator
from collections.abc import Iterator
from typing import Any

import numpy as np

from oocarray._compute._deferred import resolve
from oocarray._compute._elementwise_methods import ElementwiseMethods
from oocarray._compute._engine import StoreTarget, budget_left, evaluate
from oocarray._compute._masks import masked
from oocarray._compute._nodes import BlockReads, Node, as_node
from oocarray._compute._ops import LazyResult, array_function, array_ufunc
from oocarray._compute._output_methods import OutputMethods
from oocarray._compute._reductions import Reductions
from oocarray._compute._shape_methods import ShapeMethods
from oocarray._compute._standard import StandardArray
from oocarray._compute._temporaries import use_array_type
from oocarray._memory import active_manager, system
from oocarray._storage import StoredArray, temp

__all__ = ["ChunkedArray", "Expr", "LazyArray", "compute"]


def _unwrap(value: Any) -> Any:
    """``value`` with each :class:`Expr` in it (in tuples and lists too) replaced by its tree,
    for ``_compute._ops`` and ``_build``, which take trees, stored arrays and NumPy values."""
    if isinstance(value, Expr):
        return value._node
    if isinstance(value, tuple | list):
        return type(value)(_unwrap(v) for v in value)
    return value


def _wrap(value: Any) -> Any:
    """What ``_compute._ops`` returns, with each tree (in tuples too, named ones staying
    named: ``np.unique_counts``'s) made an :class:`Expr`."""
    if isinstance(value, Node):
        return Expr(value)
    if isinstance(value, tuple):
        items = [_wrap(v) for v in value]
        return type(value)(*items) if hasattr(value, "_fields") else tuple(items)
    return value


def _is_bool_array(value: Any, ndim: int) -> bool:
    """Whether an index is a boolean mask of ``ndim`` axes (a chunked array, an expression
    or an ndarray); masks of fewer axes are not taken."""
    return bool(value.dtype == np.bool_ and len(value.shape) == ndim > 0)


class LazyArray(
    ElementwiseMethods["Expr"],
    ShapeMethods["Expr"],
    OutputMethods["ChunkedArray"],
    Reductions,
    StandardArray,
):
    """What chunked arrays and expressions answer: operators and NumPy ufuncs (lazy, fused per
    chunk), NumPy functions, streaming reductions, and materialising.

    Anything NumPy asks that is not supported raises ``TypeError`` saying what to do instead:
    nothing silently loads a whole array.
    """

    __array_priority__ = 20

    def __array_ufunc__(self, ufunc: np.ufunc, method: str, *inputs: Any, **kwargs: Any) -> Any:
        kwargs = {k: _unwrap(v) for k, v in kwargs.items()}
        return _wrap(array_ufunc(ufunc, method, *_unwrap(inputs), **kwargs))

    def __array_function__(self, func: Any, types: Any, args: Any, kwargs: Any) -> Any:
        kwargs = {k: _unwrap(v) for k, v in kwargs.items()}
        return _wrap(array_function(func, _unwrap(args), kwargs))

    # -- what the base classes ask of the array types -------------------------------------
    def _lazy(self, node: Any) -> Expr:
        """An expression over ``node``."""
        return Expr(node)

    @staticmethod
    def _unwrapped(value: Any) -> Any:
        """``value`` with each expression in it replaced by its tree (see ``_unwrap``)."""
        return _unwrap(value)

    @staticmethod
    def _wrapped(value: Any) -> Any:
        """``value`` with each tree in it made an expression (see ``_wrap``)."""
        return _wrap(value)

    def _stored_type(self) -> type[ChunkedArray]:
        """The type new stored arrays open as: :class:`ChunkedArray`."""
        return ChunkedArray

    # -- materialising --------------------------------------------------------------------
    def compute(self, progress: bool = True) -> Any:
        """Evaluate the array.

        Parameters
        ----------
        progress
            Show a progress bar (default ``True``).

        Returns
        -------
        numpy.ndarray or ChunkedArray
            The values: an ``ndarray`` when it fits the active manager's budget, else a
            temporary :class:`~oocarray.ChunkedArray`.

        Examples
        --------
        >>> import numpy as np, oocarray as oc
        >>> x = oc.from_numpy(np.arange(4))
        >>> (x * 10).compute(progress=False)
        array([ 0, 10, 20, 30])
        """
        return compute(self, progress=progress)[0]


class Expr(LazyArray):
    """A lazy array: shape and dtype known, values computed block by block on demand.

    Made by operators, NumPy ufuncs and functions on chunked arrays and expressions; nothing
    is read until it is indexed, computed, written (:meth:`to_zarr`) or reduced.

    Parameters
    ----------
    node
        The graph node that computes the values (made by operators and functions, never by
        hand).

    Examples
    --------
    >>> import numpy as np, oocarray as oc
    >>> x = oc.from_numpy(np.arange(6.0), chunks=2)
    >>> z = (x - 1) * 2
    >>> isinstance(z, oc.Expr), z.shape, z[1:4]
    (True, (6,), array([0., 2., 4.]))
    """

    def __init__(self, node: Node) -> None:
        self._node = node

    def _tree(self) -> Node:
        return self._node

    @property
    def shape(self) -> tuple[int, ...]:
        """The length of each axis (known without computing anything).

        Examples
        --------
        >>> import numpy as np, oocarray as oc
        >>> x = oc.from_numpy(np.zeros((4, 3)))
        >>> (x * np.ones(3)).shape
        (4, 3)
        """
        return self._node.shape

    @property
    def dtype(self) -> np.dtype[Any]:
        """The data type of the values, as NumPy's type promotion gives it.

        Examples
        --------
        >>> import numpy as np, oocarray as oc
        >>> (oc.from_numpy(np.arange(3)) / 2).dtype == np.float64
        True
        """
        return self._node.dtype

    @property
    def ndim(self) -> int:
        """The number of axes.

        Examples
        --------
        >>> import numpy as np, oocarray as oc
        >>> (oc.from_numpy(np.zeros((4, 3))) * 2).ndim
        2
        """
        return self._node.ndim

    @property
    def size(self) -> int:
        """The number of elements.

        Examples
        --------
        >>> import numpy as np, oocarray as oc
        >>> (oc.from_numpy(np.zeros((4, 3))) * 2).size
        12
        """
        return self._node.size

    @property
    def nbytes(self) -> int:
        """Logical bytes of the values (as if in memory): ``size * dtype.itemsize``.

        Examples
        --------
        >>> import numpy as np, oocarray as oc
        >>> (oc.from_numpy(np.zeros((4, 3))) * 2).nbytes
        96
        """
        return self._node.nbytes

    def sources(self) -> Iterator[StoredArray]:
        """The chunked arrays this expression reads, each once.

        Returns
        -------
        iterator of ChunkedArray
            The inputs, in the order the expression first reads them.

        Examples
        --------
        >>> import numpy as np, oocarray as oc
        >>> x = oc.from_numpy(np.arange(3))
        >>> [s is x for s in (x + x * 2).sources()]
        [True]
        """
        return self._node.sources()

    def __getitem__(self, key: Any) -> Any:
        """The values of a part, evaluating only the region it touches.

        A boolean mask of the expression's shape (a chunked array, an expression or a NumPy
        array) selects the values where it is true, in C order, in one streaming pass: an
        ndarray, or a temporary chunked array when they do not fit the working memory."""
        mask = key[0] if isinstance(key, tuple) and len(key) == 1 else key
        if isinstance(mask, LazyArray | np.ndarray) and _is_bool_array(mask, self.ndim):
            return masked(self._node, _unwrap(mask))
        key = key if isinstance(key, tuple) else (key,)
        if sum(k is Ellipsis for k in key) > 1:
            raise IndexError("an index can only have a single ellipsis ('...')")
        if Ellipsis in [k for k in key if k is Ellipsis]:
            at = next(i for i, k in enumerate(key) if k is Ellipsis)
            key = (*key[:at], *(slice(None),) * (self.ndim - len(key) + 1), *key[at + 1 :])
        if len(key) > self.ndim:
            raise IndexError(
                f"too many indices: the expression has {self.ndim} dimensions, got {len(key)}"
            )
        key = (*key, *(slice(None),) * (self.ndim - len(key)))
        bounds: list[slice] = []
        picks: list[int | np.ndarray] = []  # per axis: an int (axis dropped) or positions
        for k, n in zip(key, self.shape, strict=True):
            if isinstance(k, int | np.integer) and not isinstance(k, bool):
                i = operator.index(k)
                if not -n <= i < n:
                    raise IndexError(f"index {i} is out of bounds for an axis of size {n}")
                bounds.append(slice(i % n, i % n + 1))
                picks.append(0)
            elif isinstance(k, slice):
                positions = np.arange(*k.indices(n))
                low = int(positions.min()) if len(positions) else 0
                high = int(positions.max()) + 1 if len(positions) else 0
                bounds.append(slice(low, high))
                picks.append(positions - low)
            else:
                raise TypeError(
                    "expressions take integers, slices and ... as indices; compute() the "
                    f"expression or index its inputs for {type(k).__name__} indices"
                )
        region = tuple(bounds)
        shape = tuple(s.stop - s.start for s in region)
        if 0 in shape:
            block = np.empty(shape, self.dtype)
        else:
            resolve([self._node], progress=False)  # reductions kept lazy inside, together
            block = np.broadcast_to(self._node.evaluate(region, BlockReads()), shape)
        for axis in reversed(range(len(picks))):
            block = np.take(block, picks[axis], axis=axis)
        return np.array(block, dtype=self.dtype)

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        if copy is False:
            raise ValueError(
                "an expression has no memory to view: np.asarray(expr, copy=False) is impossible"
            )
        resolve([self._node])  # reductions kept lazy inside, together, before any block
        out = np.empty(self.shape, self.dtype)

        def write(region: tuple[slice, ...], block: np.ndarray) -> None:
            out[region] = block

        evaluate([], [StoreTarget(self._node, write)], progress=True)
        return out if dtype is None else out.astype(dtype, copy=False)

    def __repr__(self) -> str:
        sources = ", ".join(repr(s.path) for s in self.sources()) or "no chunked inputs"
        return f"<oocarray expression shape={self.shape} dtype={self.dtype} over {sources}>"

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d expression")
        return self.shape[0]

    def __iter__(self) -> Iterator[Any]:
        raise TypeError(
            "iterating an expression would evaluate it row by row: compute() it or index parts"
        )

    def __bool__(self) -> bool:
        if not self.shape:  # a 0-d array is a Python bool, as the Array API asks
            return bool(self._python_scalar(bool))
        raise TypeError(
            "the truth value of a chunked array or expression is ambiguous: use .any() or .all()"
        )


class ChunkedArray(LazyArray, StoredArray):
    """An array stored in chunks on disk (zarr v3/v2, HDF5, ``.npy``), indexed like a NumPy
    array and computed on lazily.

    Create one with :func:`~oocarray.open`, :func:`~oocarray.create`, :func:`~oocarray.temp`,
    :func:`~oocarray.from_numpy` or :func:`~oocarray.from_dask`.  Data access (shape, dtype,
    chunks, indexing, writing, :meth:`append`, :meth:`as_ndarray`, :meth:`flush`,
    :meth:`close`, pickling by path) is the storage layer's ``StoredArray``; operators,
    NumPy ufuncs and functions give lazy :class:`~oocarray.Expr` objects, and reductions
    stream over the chunks once (``LazyArray``).

    Parameters
    ----------
    store
        The opened zarr, HDF5 or ``.npy`` store (internal: use the functions above).
    temporary
        Whether the array's data is deleted when it closes or is no longer referenced.

    Examples
    --------
    >>> import numpy as np, oocarray as oc, tempfile, os
    >>> path = os.path.join(tempfile.mkdtemp(), "demo.zarr")
    >>> x = oc.create(path, (1000, 8), "float32", chunks=(256, 8))
    >>> x[:] = np.arange(8000, dtype=np.float32).reshape(1000, 8)
    >>> x[-1, ::4]
    array([7992., 7996.], dtype=float32)
    >>> float(x.max()), (x * 2)[0, :3]
    (7999.0, array([0., 2., 4.], dtype=float32))
    """

    def _tree(self) -> StoredArray:
        return self

    def __getitem__(self, key: Any) -> Any:
        """As the storage layer reads parts; a boolean mask of the array's shape (a
        ChunkedArray, an expression, or an ndarray of 2 or more axes) selects the values where
        it is true, in C order, in one streaming pass (as ``Expr`` does)."""
        mask = key[0] if isinstance(key, tuple) and len(key) == 1 else key
        lazy_or_whole = isinstance(mask, LazyArray) or (
            isinstance(mask, np.ndarray) and self.ndim > 1  # (1-d: the storage layer's read)
        )
        if lazy_or_whole and _is_bool_array(mask, self.ndim):
            return masked(self, _unwrap(mask))
        return StoredArray.__getitem__(self, key)


use_array_type(ChunkedArray)


def compute(*items: Any, progress: bool = True) -> tuple[Any, ...]:
    """Evaluate lazy reductions and expressions together, reading each input chunk once.

    Parameters
    ----------
    *items : LazyResult or Expr
        Reductions made with ``compute=False`` and lazy expressions.
    progress
        Show a progress bar (default ``True``).

    Returns
    -------
    tuple
        One result per item, in order: a reduction's value (NumPy scalar or array); an
        expression as a :class:`numpy.ndarray` when it fits the active manager's budget, else
        as a temporary :class:`~oocarray.ChunkedArray`.

    Raises
    ------
    TypeError
        An item is neither a lazy result nor an expression.

    Examples
    --------
    >>> import numpy as np, oocarray as oc
    >>> x = oc.from_numpy(np.arange(12.0).reshape(4, 3), chunks=(2, 3))
    >>> mean, top = oc.compute(x.mean(axis=0, compute=False), x.max(compute=False))
    >>> mean.tolist(), float(top)
    ([4.5, 5.5, 6.5], 11.0)
    """
    reductions: list[Any] = []
    stores: list[StoreTarget] = []
    results: list[Any] = []
    # Reductions kept lazy inside the expressions (xarray's groupby) first, all in one pass.
    resolve([as_node(item._tree()) for item in items if isinstance(item, LazyArray)], progress)
    for item in items:
        if isinstance(item, LazyResult):
            reductions.append(item.reduction())
            results.append(None)
        elif isinstance(item, LazyArray):
            target, result = _materialize_target(as_node(item._tree()))
            stores.append(target)
            reductions.append(None)
            results.append(result)
        else:
            raise TypeError(
                "oc.compute takes lazy results (compute=False) and expressions, got "
                f"{type(item).__name__}"
            )
    resolve([r.expr for r in reductions if r is not None], progress)
    evaluate([r for r in reductions if r is not None], stores, progress)
    return tuple(
        result if reduction is None else reduction.finish()
        for reduction, result in zip(reductions, results, strict=True)
    )


def _materialize_target(expr: Node) -> tuple[StoreTarget, Any]:
    """Where ``expr.compute()`` goes: an ndarray when it fits the active budget, else a
    temporary chunked array."""
    left = budget_left(active_manager() or system())
    if left is None or expr.nbytes <= left:
        out = np.empty(expr.shape, expr.dtype)

        def write(region: tuple[slice, ...], block: np.ndarray) -> None:
            out[region] = block

        return StoreTarget(expr, write), out
    result = temp(expr.shape, expr.dtype, array_type=ChunkedArray)
    return StoreTarget(expr, result.__setitem__, result.shards or result.chunks), result
