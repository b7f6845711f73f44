"""The compute layer's array types: :class:`ChunkedArray` (the stored array users get) and
:class:`Expr` (a lazy expression), both :class:`LazyArray`: operators, NumPy's ufunc and
function protocols, reductions and materialising, defined here in their class bodies.

An :class:`Expr` holds an expression tree (``_compute._nodes``), as dask's ``Array`` holds a
graph; a :class:`ChunkedArray` is a storage-layer :class:`StoredArray` (data access: shape,
indexing, writing, ``as_ndarray``, pickling) that is also lazy.  What NumPy asks goes to
``_compute._ops`` with the trees and stored arrays inside, and trees that come back are wrapped
as :class:`Expr`.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from oocarray._compute import _build
from oocarray._compute._deferred import resolve
from oocarray._compute._engine import StoreTarget, budget_left, evaluate
from oocarray._compute._masks import masked
from oocarray._compute._nodes import BlockReads, Node, as_node
from oocarray._compute._ops import (
    LazyResult,
    apply_ufunc,
    array_function,
    array_ufunc,
    clip,
)
from oocarray._compute._rearrange import permute_dims, swapaxes
from oocarray._compute._rechunk import rechunk
from oocarray._compute._reductions import Reductions
from oocarray._compute._reshape import ravel, reshape, squeeze
from oocarray._compute._standard import StandardArray
from oocarray._compute._temporaries import use_array_type
from oocarray._compute._to_xarray import to_xarray
from oocarray._memory import active_manager, system
from oocarray._storage import StoredArray, create, temp
from oocarray._storage._objects._urls import Remote, locate
from oocarray._storage._replace import refuse_replacing_an_input

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


def _elementwise(ufunc: np.ufunc, *inputs: Any) -> Expr:
    result: Expr = _wrap(apply_ufunc(ufunc, *_unwrap(inputs)))
    return result


class LazyArray(Reductions, StandardArray):
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

    # -- elementwise ----------------------------------------------------------------------
    def __add__(self, other: Any) -> Expr:
        return _elementwise(np.add, self, other)

    def __radd__(self, other: Any) -> Expr:
        return _elementwise(np.add, other, self)

    def __sub__(self, other: Any) -> Expr:
        return _elementwise(np.subtract, self, other)

    def __rsub__(self, other: Any) -> Expr:
        return _elementwise(np.subtract, other, self)

    def __mul__(self, other: Any) -> Expr:
        return _elementwise(np.multiply, self, other)

    def __rmul__(self, other: Any) -> Expr:
        return _elementwise(np.multiply, other, self)

    def __truediv__(self, other: Any) -> Expr:
        return _elementwise(np.true_divide, self, other)

    def __rtruediv__(self, other: Any) -> Expr:
        return _elementwise(np.true_divide, other, self)

    def __floordiv__(self, other: Any) -> Expr:
        return _elementwise(np.floor_divide, self, other)

    def __rfloordiv__(self, other: Any) -> Expr:
        return _elementwise(np.floor_divide, other, self)

    def __mod__(self, other: Any) -> Expr:
        return _elementwise(np.remainder, self, other)

    def __rmod__(self, other: Any) -> Expr:
        return _elementwise(np.remainder, other, self)

    def __pow__(self, other: Any) -> Expr:
        return _elementwise(np.power, self, other)

    def __rpow__(self, other: Any) -> Expr:
        return _elementwise(np.power, other, self)

    def __and__(self, other: Any) -> Expr:
        return _elementwise(np.bitwise_and, self, other)

    def __rand__(self, other: Any) -> Expr:
        return _elementwise(np.bitwise_and, other, self)

    def __or__(self, other: Any) -> Expr:
        return _elementwise(np.bitwise_or, self, other)

    def __ror__(self, other: Any) -> Expr:
        return _elementwise(np.bitwise_or, other, self)

    def __xor__(self, other: Any) -> Expr:
        return _elementwise(np.bitwise_xor, self, other)

    def __rxor__(self, other: Any) -> Expr:
        return _elementwise(np.bitwise_xor, other, self)

    def __lshift__(self, other: Any) -> Expr:
        return _elementwise(np.left_shift, self, other)

    def __rlshift__(self, other: Any) -> Expr:
        return _elementwise(np.left_shift, other, self)

    def __rshift__(self, other: Any) -> Expr:
        return _elementwise(np.right_shift, self, other)

    def __rrshift__(self, other: Any) -> Expr:
        return _elementwise(np.right_shift, other, self)

    def __lt__(self, other: Any) -> Expr:
        return _elementwise(np.less, self, other)

    def __le__(self, other: Any) -> Expr:
        return _elementwise(np.less_equal, self, other)

    def __gt__(self, other: Any) -> Expr:
        return _elementwise(np.greater, self, other)

    def __ge__(self, other: Any) -> Expr:
        return _elementwise(np.greater_equal, self, other)

    def __eq__(self, other: Any) -> Expr:  # type: ignore[override]
        return _elementwise(np.equal, self, other)

    def __ne__(self, other: Any) -> Expr:  # type: ignore[override]
        return _elementwise(np.not_equal, self, other)

    __hash__ = object.__hash__  # arrays stay usable as keys of weak sets and dicts

    def __neg__(self) -> Expr:
        return _elementwise(np.negative, self)

    def __pos__(self) -> Expr:
        return _elementwise(np.positive, self)

    def __abs__(self) -> Expr:
        return _elementwise(np.absolute, self)

    def __invert__(self) -> Expr:
        return _elementwise(np.invert, self)

    def __matmul__(self, other: Any) -> Any:
        return _wrap(array_ufunc(np.matmul, "__call__", *_unwrap((self, other))))

    def __rmatmul__(self, other: Any) -> Any:
        return _wrap(array_ufunc(np.matmul, "__call__", *_unwrap((other, self))))

    # -- rearranging ----------------------------------------------------------------------
    @property
    def T(self) -> Expr:
        """The axes reversed, lazily (``np.transpose``).

        Examples
        --------
        >>> import numpy as np, oocarray as oc
        >>> x = oc.from_numpy(np.arange(6).reshape(2, 3))
        >>> x.T.shape, x.T[2]
        ((3, 2), array([2, 5]))
        """
        return Expr(permute_dims(self._tree()))

    @property
    def mT(self) -> Expr:
        """The last two axes swapped, lazily (a stack of matrices transposed).

        Raises
        ------
        ValueError
            The array has fewer than 2 dimensions.

        Examples
        --------
        >>> import numpy as np, oocarray as oc
        >>> x = oc.from_numpy(np.zeros((5, 2, 3)))
        >>> x.mT.shape
        (5, 3, 2)
        """
        ndim = self._tree().ndim
        if ndim < 2:
            raise ValueError("mT needs an array of at least 2 dimensions")
        order = [*range(ndim - 2), ndim - 1, ndim - 2]
        return Expr(permute_dims(self._tree(), order))

    def transpose(self, *axes: Any) -> Expr:
        """The axes permuted (reversed by default), lazily.

        Parameters
        ----------
        *axes : int or tuple of int
            The new order of the axes, as separate ints or one tuple; none reverses them.

        Returns
        -------
        Expr
            The lazy, permuted array.

        Examples
        --------
        >>> import numpy as np, oocarray as oc
        >>> x = oc.from_numpy(np.zeros((2, 3, 4)))
        >>> (x.transpose().shape, x.transpose(1, 0, 2).shape)
        ((4, 3, 2), (3, 2, 4))
        """
        order = axes[0] if len(axes) == 1 and not isinstance(axes[0], int) else axes
        return Expr(permute_dims(self._tree(), order or None))

    def swapaxes(self, axis1: int, axis2: int) -> Expr:
        """Two axes interchanged, lazily (``np.swapaxes``).

        Parameters
        ----------
        axis1, axis2 : int
            The axes to interchange.

        Returns
        -------
        Expr
            The lazy array with those axes swapped.

        Examples
        --------
        >>> import numpy as np, oocarray as oc
        >>> oc.from_numpy(np.zeros((2, 3, 4))).swapaxes(0, 2).shape
        (4, 3, 2)
        """
        return Expr(swapaxes(self._tree(), axis1, axis2))

    def reshape(self, *shape: Any, order: str = "C") -> Expr:
        """The elements in a new shape, in C order (``-1``: the length that fits).

        Lazy when blocks of the result line up with bands of the input's chunks; otherwise
        the result is streamed once into a temporary chunked array (never loaded whole).

        Parameters
        ----------
        *shape : int or tuple of int
            The new shape, as separate ints or one tuple; one length may be ``-1``.
        order
            ``"C"`` (the only order supported).

        Returns
        -------
        Expr
            The reshaped array.

        Examples
        --------
        >>> import numpy as np, oocarray as oc
        >>> x = oc.from_numpy(np.arange(12).reshape(4, 3), chunks=(2, 3))
        >>> x.reshape(2, -1)[1]
        array([ 6,  7,  8,  9, 10, 11])
        """
        wanted = shape[0] if len(shape) == 1 and not isinstance(shape[0], int) else shape
        return Expr(reshape(self._tree(), wanted, order))

    def squeeze(self, axis: Any = None) -> Expr:
        """Axes of length 1 removed (all of them, or ``axis``), lazily.

        Parameters
        ----------
        axis : int or tuple of int, optional
            The axes to remove; each must have length 1.  Default: every axis of length 1.

        Returns
        -------
        Expr
            The lazy array without those axes.

        Examples
        --------
        >>> import numpy as np, oocarray as oc
        >>> oc.from_numpy(np.zeros((1, 3, 1))).squeeze().shape
        (3,)
        """
        return Expr(squeeze(self._tree(), axis))

    def ravel(self, order: str = "C") -> Expr:
        """The elements along one axis in C order (as :meth:`reshape` of ``-1``).

        Parameters
        ----------
        order
            ``"C"`` (the only order supported).

        Returns
        -------
        Expr
            The 1-d array.

        Examples
        --------
        >>> import numpy as np, oocarray as oc
        >>> oc.from_numpy(np.arange(6).reshape(2, 3)).ravel()[...]
        array([0, 1, 2, 3, 4, 5])
        """
        return Expr(ravel(self._tree(), order))

    def flatten(self, order: str = "C") -> Expr:
        """The elements along one axis in C order (as :meth:`ravel`).

        Parameters
        ----------
        order
            ``"C"`` (the only order supported).

        Returns
        -------
        Expr
            The 1-d array.

        Examples
        --------
        >>> import numpy as np, oocarray as oc
        >>> oc.from_numpy(np.arange(6).reshape(2, 3)).flatten().shape
        (6,)
        """
        return Expr(ravel(self._tree(), order))

    def astype(self, dtype: Any) -> Expr:
        """A lazy copy of another dtype.

        Parameters
        ----------
        dtype
            The new data type (anything :class:`numpy.dtype` takes).

        Returns
        -------
        Expr
            The lazy converted array.

        Examples
        --------
        >>> import numpy as np, oocarray as oc
        >>> oc.from_numpy(np.arange(3)).astype("float32")[...]
        array([0., 1., 2.], dtype=float32)
        """
        return Expr(_build.astype(self._tree(), dtype))

    def clip(self, min: Any = None, max: Any = None) -> Expr:
        """Values limited to ``[min, max]``, lazily.

        Parameters
        ----------
        min, max : scalar or array, optional
            The lower and upper limits; ``None`` leaves that side open.

        Returns
        -------
        Expr
            The lazy clipped array.

        Examples
        --------
        >>> import numpy as np, oocarray as oc
        >>> oc.from_numpy(np.arange(5)).clip(1, 3)[...]
        array([1, 1, 2, 3, 3])
        """
        return Expr(clip(self._tree(), _unwrap(min), _unwrap(max)))

    def round(self, decimals: int = 0) -> Expr:
        """Values rounded to ``decimals`` decimals, lazily (``np.round``).

        Parameters
        ----------
        decimals
            Decimals to keep (default 0); negative rounds to tens, hundreds, ...

        Returns
        -------
        Expr
            The lazy rounded array.

        Examples
        --------
        >>> import numpy as np, oocarray as oc
        >>> oc.from_numpy(np.array([0.123, 4.567])).round(1)[...]
        array([0.1, 4.6])
        """
        return Expr(_build.elementwise(np.round, self._tree(), name="round", decimals=decimals))

    def map_blocks(self, function: Callable[..., Any], *others: Any, dtype: Any = None) -> Expr:
        """``function`` applied to aligned blocks of this array (and ``others``), lazily; it
        must return a block of the same shape, of ``dtype``.

        Parameters
        ----------
        function : callable
            Called as ``function(block, *other_blocks)`` with NumPy arrays.
        *others
            Further arrays (chunked arrays, expressions or scalars), broadcast against this one.
        dtype
            The dtype of the blocks ``function`` returns (required).

        Returns
        -------
        Expr
            The lazy result.

        Raises
        ------
        TypeError
            ``dtype`` is not given.

        Examples
        --------
        >>> import numpy as np, oocarray as oc
        >>> x = oc.from_numpy(np.arange(4.0), chunks=2)
        >>> x.map_blocks(np.sqrt, dtype="float64")[...]
        array([0.        , 1.        , 1.41421356, 1.73205081])
        """
        return Expr(_build.map_blocks(function, self._tree(), *_unwrap(others), dtype=dtype))

    def to_xarray(self, name: str | None = None, dims: Any = None) -> Any:
        """A lazy ``xarray.DataArray`` over this array, computed by oocarray's chunk manager
        (``chunked_array_type="oocarray"``): its operations stream in the active budget.

        Nothing is read.

        Parameters
        ----------
        name : str, optional
            The DataArray's name.
        dims : sequence of str, optional
            Its dimension names; by default the stored ones (zarr ``dimension_names`` or
            ``_ARRAY_DIMENSIONS``), else ``dim_0``, ``dim_1``, ...

        Returns
        -------
        xarray.DataArray
            Over this array, with the stored attributes as ``attrs``.

        Examples
        --------
        >>> import numpy as np, oocarray as oc
        >>> x = oc.from_numpy(np.arange(6.0).reshape(2, 3), chunks=(1, 3))
        >>> da = x.to_xarray(name="t")
        >>> da.dims, float(da.sum("dim_1").max())
        (('dim_0', 'dim_1'), 12.0)
        """
        return to_xarray(self, name=name, dims=dims)

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

    def rechunk(self, chunks: Any, out: Any = None, **options: Any) -> Any:
        """Rechunk into a zarr array of ``chunks`` in a memory budget (see
        :func:`oocarray.rechunk`, which takes the same ``options``).

        An expression is written with :meth:`to_zarr` (``chunks=``) instead: it has no
        source chunks to regroup.

        Parameters
        ----------
        chunks : tuple, dict, int or "auto"
            The new chunk shape (see :func:`oocarray.rechunk`).
        out : path or URL, optional
            The output zarr array; a temporary one when omitted.
        **options
            ``shards``, ``codec``, ``max_mem``, ``resume``, ``dry_run``, ``dataset``,
            ``mode``, ``storage_options``, ``progress``: as for :func:`oocarray.rechunk`.

        Returns
        -------
        ChunkedArray
            The rechunked array (the plan instead, with ``dry_run=True``).

        Raises
        ------
        TypeError
            This is an expression, not a stored array.

        Examples
        --------
        >>> import numpy as np, oocarray as oc
        >>> x = oc.from_numpy(np.arange(12).reshape(4, 3), chunks=(1, 3))
        >>> y = x.rechunk((4, 1), progress=False)
        >>> (y.chunks, y[:, 2])
        ((4, 1), array([ 2,  5,  8, 11]))
        """
        if not isinstance(self, StoredArray):
            raise TypeError(
                "rechunk needs a stored array; write an expression in new chunks with "
                "expr.to_zarr(path, chunks=...)"
            )
        return rechunk(self, chunks, out, **options)

    def to_zarr(
        self,
        path: Any,
        codec: str = "zstd",
        chunks: Any = None,
        shards: Any = None,
        mode: str = "w-",
        dimension_names: Any = None,
        attributes: Any = None,
        progress: bool = True,
        storage_options: Any = None,
        dataset: str | None = None,
        coords: Any = None,
    ) -> ChunkedArray:
        """Write the values to a new zarr array, chunk by chunk (each written whole).

        ``path``, ``codec``, ``chunks``, ``shards``, ``mode``, ``dimension_names``,
        ``attributes``, ``dataset``, ``coords`` and ``storage_options`` are as for
        :func:`oocarray.create` (``path`` may be an object-store URL): by default
        (``mode="w-"``) the array must not exist yet (:class:`~oocarray.StoreExistsError`);
        ``mode="w"`` replaces a zarr array, and nothing else.  With ``dataset="name"`` the
        array goes inside the zarr group at ``path`` beside the arrays already there, so
        several outputs share one group that ``xarray.open_zarr(path)`` opens as a Dataset
        (name the axes with ``dimension_names``).  ``progress=False`` hides the progress
        report.

        Parameters
        ----------
        path
            The new array's directory (or the group's, with ``dataset``), or a URL.
        codec
            ``"zstd"`` (default), ``"lz4"``, ``"blosc"``, ``"gzip"`` or ``"none"``.
        chunks, shards : optional
            Chunk and shard shapes; default: chunks of about 4 MiB, no shards (as for
            :func:`oocarray.create`).
        mode
            ``"w-"`` (default) refuses an existing array; ``"w"`` replaces a zarr array.
        dimension_names : optional
            One name per axis.
        attributes : optional
            JSON-serialisable metadata stored with the array.
        progress
            Show a progress bar (default ``True``).
        storage_options : optional
            For URLs: the object store's settings (see :func:`oocarray.open`).
        dataset : optional
            The array's path inside the zarr group at ``path``.
        coords : optional
            With ``dataset``: coordinate arrays written into the group beside it.

        Returns
        -------
        ChunkedArray
            The new zarr array, open for reading and writing.

        Raises
        ------
        StoreExistsError
            Something is at the array's path that ``mode`` may not replace.

        Examples
        --------
        >>> import numpy as np, oocarray as oc, os, tempfile
        >>> group = os.path.join(tempfile.mkdtemp(), "out.zarr")
        >>> x = oc.from_numpy(np.arange(6.0).reshape(2, 3), chunks=(1, 3))
        >>> _ = (x * 2).to_zarr(group, dataset="double", dimension_names=("y", "x"),
        ...                     progress=False)
        >>> _ = (x + 1).to_zarr(group, dataset="plus_one", dimension_names=("y", "x"),
        ...                     progress=False)
        >>> oc.open(group, dataset="plus_one")[1]
        array([4., 5., 6.])
        """
        expr = as_node(self._tree())
        if mode == "w":
            location = locate(path, storage_options, "path", writing=True)
            target = location.name if isinstance(location, Remote) else location
            if dataset is not None and isinstance(dataset, str):
                target = target.rstrip("/") + "/" + dataset.strip("/")
            refuse_replacing_an_input(target, (s.path for s in expr.sources()), "to_zarr(mode='w')")
        out = create(
            path,
            expr.shape,
            expr.dtype,
            chunks=chunks,
            codec=codec,
            shards=shards,
            mode=mode,
            dimension_names=dimension_names,
            attributes=attributes,
            dataset=dataset,
            storage_options=storage_options,
            array_type=ChunkedArray,
            coords=coords,
        )
        evaluate(
            [], [StoreTarget(expr, out.__setitem__, out.shards or out.chunks)], progress, "to_zarr"
        )
        assert isinstance(out, ChunkedArray)
        return out


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
