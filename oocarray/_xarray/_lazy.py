"""A lazy duck array that lets xarray hold oocarray expressions without reading them.

xarray indexes chunked data with ``array[key]``, but oocarray's ``ChunkedArray`` and ``Expr``
read eagerly on ``[]`` (a public contract).  :class:`OOCLazyArray` wraps one of them and keeps
every operation lazy: operators, ufuncs and NumPy functions give another ``OOCLazyArray``;
NumPy reductions give one over a deferred reduction (evaluated with the others pending when
values are asked for: a groupby's groups in one pass); slices, integers and integer arrays
give a lazy gather; other keys raise a clear error instead of loading.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from oocarray._compute import ChunkedArray, Expr
from oocarray._compute._deferred import DEFERRABLE, defer, resolve
from oocarray._compute._nodes import Constant, as_node
from oocarray._compute._outer import outer_take
from oocarray._compute._reshape import expand_dims
from oocarray._xarray._numpy_hooks import HOOKS
from oocarray._xarray._whole_routes import refuse_whole_routes
from oocarray._xarray._windows import reduce_windows


def wrap(value: Any) -> Any:
    """An ``OOCLazyArray`` around an oocarray lazy value; anything else unchanged."""
    return OOCLazyArray(value) if isinstance(value, ChunkedArray | Expr) else value


def unwrap(value: Any) -> Any:
    """The oocarray value inside an ``OOCLazyArray`` (recursing into lists and tuples)."""
    if isinstance(value, OOCLazyArray):
        return value.lazy
    if isinstance(value, list | tuple):
        return type(value)(unwrap(v) for v in value)
    return value


def regular_chunks(shape: tuple[int, ...], chunk: tuple[int, ...]) -> tuple[tuple[int, ...], ...]:
    """Dask-style block sizes per axis for a regular chunk shape."""
    out = []
    for n, c in zip(shape, chunk, strict=True):
        c = max(int(c), 1)
        sizes = [c] * (n // c) + ([n % c] if n % c else [])
        out.append(tuple(sizes) if sizes else (0,))
    return tuple(out)


def _chunk_shape(lazy: ChunkedArray | Expr) -> tuple[int, ...]:
    if isinstance(lazy, ChunkedArray):
        return tuple(lazy.chunks)
    for source in lazy.sources():
        if tuple(source.shape) == tuple(lazy.shape):
            return tuple(source.chunks)
    return tuple(lazy.shape)


def _is_full_slice(k: Any) -> bool:
    """``slice(None)`` or a spelling of it (``rolling`` selects ``slice(None, None, 1)``)."""
    return isinstance(k, slice) and k.start in (None, 0) and k.stop is None and k.step in (None, 1)


def _is_whole(key: Any, ndim: int) -> bool:
    key = key if isinstance(key, tuple) else (key,)
    named = sum(k is not Ellipsis for k in key)  # (an Ellipsis may stand for no axis)
    return all(k is Ellipsis or _is_full_slice(k) for k in key) and named <= max(ndim, 1)


def _positions(key: Any, shape: tuple[int, ...]) -> list[tuple[np.ndarray, bool]]:
    """Per axis: the positions selected and whether the axis is dropped (an integer key)."""
    key = key if isinstance(key, tuple) else (key,)
    if any(k is Ellipsis for k in key):
        at = next(i for i, k in enumerate(key) if k is Ellipsis)
        key = (*key[:at], *(slice(None),) * (len(shape) - len(key) + 1), *key[at + 1 :])
    key = (*key, *(slice(None),) * (len(shape) - len(key)))
    out: list[tuple[np.ndarray, bool]] = []
    for k, n in zip(key, shape, strict=True):
        if isinstance(k, slice):
            out.append((np.arange(*k.indices(n)), False))
        elif isinstance(k, int | np.integer) and not isinstance(k, bool):
            out.append((np.array([int(k) % n]), True))
        else:
            k = np.asarray(k)
            if k.ndim == 0 and k.dtype.kind in "iu":
                out.append((np.array([int(k) % n]), True))
                continue
            if k.ndim != 1 or k.dtype.kind not in "iu":
                raise NotImplementedError(
                    f"selecting an oocarray-backed xarray variable with {type(k).__name__} "
                    f"keys of dtype {k.dtype} is not supported: use slices, integers or "
                    "1-d integer arrays, or .compute() first"
                )
            out.append((k % n if n else k, False))
    return out


def _select(lazy: ChunkedArray | Expr, key: Any) -> Expr:
    """The outer selection ``key`` of ``lazy`` as a lazy gather (nothing read or copied);
    ``None`` entries add axes of length 1 (xarray's ``set_dims`` broadcasts so)."""
    key = key if isinstance(key, tuple) else (key,)
    if not any(k is None for k in key):
        return outer_take(lazy, _positions(key, tuple(lazy.shape)))
    named = sum(1 for k in key if k is not None and k is not Ellipsis)
    expanded: list[Any] = []
    for k in key:
        expanded.extend([slice(None)] * (lazy.ndim - named) if k is Ellipsis else [k])
    new_axes, position = [], 0
    for k in expanded:
        if k is None:
            new_axes.append(position)
        if k is None or not _is_integer(k):
            position += 1
    real = tuple(k for k in expanded if k is not None)
    taken = outer_take(lazy, _positions(real, tuple(lazy.shape)))
    return Expr(expand_dims(taken._tree(), tuple(new_axes)))


def _is_integer(key: Any) -> bool:
    return not isinstance(key, bool) and (
        isinstance(key, int | np.integer)
        or (isinstance(key, np.ndarray) and key.ndim == 0 and key.dtype.kind in "iu")
    )


def resolve_pending(*data: Any) -> None:
    """Evaluates the deferred reductions inside every value of ``data`` together (one pass
    per input shared by all of them: a Dataset's variables' groupby reductions at once)."""
    roots = [as_node(v._tree()) for v in unwrap(data) if isinstance(v, ChunkedArray | Expr)]
    resolve(roots)


_REDUCTION_OPTIONS = frozenset(("axis", "dtype", "keepdims", "ddof", "out"))


def _deferred(func: Any, args: Any, kwargs: dict[str, Any]) -> Expr | None:
    """A NumPy reduction of one lazy array kept lazy (an expression over a deferred
    reduction), as dask keeps it: xarray reduces a groupby group by group, and the groups'
    reductions then run together, in one pass over their input, when the values are asked
    for.  None: not a reduction oocarray defers (it runs as before)."""
    name = getattr(func, "__name__", "")
    if name not in DEFERRABLE or getattr(np, name, None) is not func or len(args) != 1:
        return None
    if not isinstance(args[0], ChunkedArray | Expr) or set(kwargs) - _REDUCTION_OPTIONS:
        return None
    if kwargs.get("out") is not None:
        return None
    options = {k: v for k, v in kwargs.items() if k != "out" and v is not np._NoValue}
    # quiet: xarray's nan-reductions warn of no all-NaN slice (nor does dask's)
    return Expr(defer(name, args[0]._tree(), **options, quiet=True))


class OOCLazyArray:
    """An oocarray ``ChunkedArray`` or ``Expr`` seen by xarray as a lazy chunked array.

    Examples
    --------
    >>> import numpy as np, oocarray as oc
    >>> from oocarray._xarray._lazy import OOCLazyArray
    >>> x = OOCLazyArray(oc.from_numpy(np.arange(6.0), chunks=3))
    >>> (x * 2).chunks, np.asarray((x * 2).compute())[-1]
    (((3, 3),), np.float64(10.0))
    """

    def __init__(self, lazy: ChunkedArray | Expr) -> None:
        self.lazy = lazy

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.lazy.shape)

    @property
    def dtype(self) -> np.dtype[Any]:
        return np.dtype(self.lazy.dtype)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    @property
    def chunks(self) -> tuple[tuple[int, ...], ...]:
        declared = getattr(getattr(self.lazy, "_node", None), "out_chunks", None)
        if declared is not None:  # a blockwise result (_blockwise.py) knows its own blocks
            return tuple(declared)
        return regular_chunks(self.shape, _chunk_shape(self.lazy))

    @property
    def real(self) -> OOCLazyArray:
        """The real part of real data: itself.  (``real`` and ``imag`` mark this as a duck
        array to xarray's ``NamedArray``, which would otherwise load a reduction's result;
        complex data has neither, lazily, so xarray loads those.)"""
        if self.dtype.kind == "c":
            raise AttributeError("the real part of complex oocarray data is not lazy")
        return self

    @property
    def imag(self) -> OOCLazyArray:
        """The imaginary part of real data: zeros (a constant, never allocated whole)."""
        if self.dtype.kind == "c":
            raise AttributeError("the imaginary part of complex oocarray data is not lazy")
        return OOCLazyArray(Expr(Constant(np.zeros((), self.dtype), self.shape)))

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of unsized object")
        return self.shape[0]

    # Python scalars of a one-element array evaluate it, as dask's do (xarray's equality
    # checks call bool() on a deferred ``all``).
    def __bool__(self) -> bool:
        return bool(self.compute())

    def __float__(self) -> float:
        return float(self.compute())

    def __int__(self) -> int:
        return int(self.compute())

    def __repr__(self) -> str:
        return f"OOCLazyArray({self.lazy!r})"

    def compute(self) -> np.ndarray:
        """The values, evaluated by oocarray's streaming engine."""
        return np.asarray(self.lazy)

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        refuse_whole_routes()  # (ffill, rolling with bottleneck...: a whole load here)
        out = self.compute()
        return out if dtype is None else out.astype(dtype, copy=False)

    def __getitem__(self, key: Any) -> OOCLazyArray:
        """The selection (slices, integers, integer arrays per axis, as xarray's outer
        indexing gives), lazily: a gather whose blocks read only the parent's windows they
        need (a reduction of it streams the parent; nothing is copied ahead)."""
        if _is_whole(key, self.ndim):
            return self
        return OOCLazyArray(_select(self.lazy, key))

    def __array_ufunc__(self, ufunc: np.ufunc, method: str, *inputs: Any, **kwargs: Any) -> Any:
        return wrap(getattr(ufunc, method)(*unwrap(inputs), **kwargs))

    def __array_function__(self, func: Any, types: Any, args: Any, kwargs: Any) -> Any:
        if func is np.result_type:  # needs dtypes only; the chunked arrays refuse it
            return np.result_type(*(a.dtype if isinstance(a, OOCLazyArray) else a for a in args))
        args, kwargs = unwrap(args), {k: unwrap(v) for k, v in kwargs.items()}
        # A reduction of sliding windows over their window axes (``rolling``) stays
        # element-wise; other reductions are deferred (one pass, groups together).
        deferred = reduce_windows(func, args, kwargs)
        if deferred is None:
            deferred = _deferred(func, args, kwargs)
        if deferred is not None:
            return wrap(deferred)
        result = HOOKS.get(func, func)(*args, **kwargs)  # (xarray's calls the compute layer lacks)
        if isinstance(result, tuple):
            return tuple(wrap(r) for r in result)
        return wrap(result)

    def astype(self, dtype: Any, **kwargs: Any) -> Any:
        return self if np.dtype(dtype) == self.dtype else wrap(self.lazy.astype(dtype))

    def transpose(self, *axes: Any) -> Any:
        return wrap(self.lazy.transpose(*axes))

    def _binary(self, name: str, other: Any) -> Any:
        return wrap(getattr(self.lazy, name)(unwrap(other)))

    def __add__(self, o: Any) -> Any:
        return self._binary("__add__", o)

    def __radd__(self, o: Any) -> Any:
        return self._binary("__radd__", o)

    def __sub__(self, o: Any) -> Any:
        return self._binary("__sub__", o)

    def __rsub__(self, o: Any) -> Any:
        return self._binary("__rsub__", o)

    def __mul__(self, o: Any) -> Any:
        return self._binary("__mul__", o)

    def __rmul__(self, o: Any) -> Any:
        return self._binary("__rmul__", o)

    def __truediv__(self, o: Any) -> Any:
        return self._binary("__truediv__", o)

    def __rtruediv__(self, o: Any) -> Any:
        return self._binary("__rtruediv__", o)

    def __pow__(self, o: Any) -> Any:
        return self._binary("__pow__", o)

    def __lt__(self, o: Any) -> Any:
        return self._binary("__lt__", o)

    def __le__(self, o: Any) -> Any:
        return self._binary("__le__", o)

    def __gt__(self, o: Any) -> Any:
        return self._binary("__gt__", o)

    def __ge__(self, o: Any) -> Any:
        return self._binary("__ge__", o)

    def __eq__(self, o: Any) -> Any:
        return self._binary("__eq__", o)

    def __ne__(self, o: Any) -> Any:
        return self._binary("__ne__", o)

    def __neg__(self) -> Any:
        return wrap(-self.lazy)

    def __invert__(self) -> Any:
        return wrap(~self.lazy)

    def __and__(self, o: Any) -> Any:
        return self._binary("__and__", o)

    def __rand__(self, o: Any) -> Any:
        return self._binary("__rand__", o)

    def __or__(self, o: Any) -> Any:
        return self._binary("__or__", o)

    def __ror__(self, o: Any) -> Any:
        return self._binary("__ror__", o)

    def __abs__(self) -> Any:
        return wrap(abs(self.lazy))
