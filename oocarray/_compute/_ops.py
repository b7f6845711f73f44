"""What chunked arrays and expressions answer: operators, NumPy ufuncs and functions,
reductions, and materialising.

:class:`LazyOps` holds these methods once; the compute layer installs them on
:class:`~oocarray.ChunkedArray` (the storage layer below knows nothing of them) and on
:class:`Expr`.  Anything NumPy asks that is not supported raises ``TypeError`` saying what to
do instead: nothing silently loads a whole array.
"""

from __future__ import annotations

import operator
import os
from collections.abc import Callable
from typing import Any

import numpy as np

from oocarray._compute import _build
from oocarray._compute._engine import StoreTarget, budget_left, evaluate
from oocarray._compute._expr import BlockReads, Expr, as_expr
from oocarray._compute._reduce import REDUCTIONS, Histogram, Reduction, make_reduction
from oocarray._memory import active_manager, system
from oocarray._storage import ChunkedArray, create, temp
from oocarray._storage._paths import local_path
from oocarray._storage._replace import refuse_replacing_an_input

__all__ = ["LazyOps", "LazyResult", "compute", "install"]


class LazyResult:
    """A reduction not yet computed (``compute=False``); :func:`oocarray.compute` evaluates
    several of them, and expressions, in one read of each chunk."""

    def __init__(self, make: Callable[[], Reduction], name: str) -> None:
        self._make = make
        self.name = name

    def reduction(self) -> Reduction:
        return self._make()

    def compute(self, progress: bool = True) -> Any:
        return compute(self, progress=progress)[0]

    def __repr__(self) -> str:
        return f"<lazy {self.name}>"


def compute(*items: Any, progress: bool = True) -> tuple[Any, ...]:
    """Evaluate lazy reductions and expressions together, reading each input chunk once.

    Examples
    --------
    >>> import numpy as np, oocarray as oc
    >>> x = oc.from_numpy(np.arange(12.0).reshape(4, 3), chunks=(2, 3))
    >>> mean, top = oc.compute(x.mean(axis=0, compute=False), x.max(compute=False))
    >>> mean.tolist(), float(top)
    ([4.5, 5.5, 6.5], 11.0)
    """
    reductions: list[Reduction | None] = []
    stores: list[StoreTarget] = []
    results: list[Any] = []
    for item in items:
        if isinstance(item, LazyResult):
            reductions.append(item.reduction())
            results.append(None)
        elif isinstance(item, Expr | ChunkedArray):
            target, result = _materialize_target(as_expr(item))
            stores.append(target)
            reductions.append(None)
            results.append(result)
        else:
            raise TypeError(
                "oc.compute takes lazy results (compute=False) and expressions, got "
                f"{type(item).__name__}"
            )
    evaluate([r for r in reductions if r is not None], stores, progress)
    return tuple(
        result if reduction is None else reduction.finish()
        for reduction, result in zip(reductions, results, strict=True)
    )


def _materialize_target(expr: Expr) -> tuple[StoreTarget, Any]:
    """Where ``expr.compute()`` goes: an ndarray when it fits the active budget, else a
    temporary chunked array."""
    left = budget_left(active_manager() or system())
    if left is None or expr.nbytes <= left:
        out = np.empty(expr.shape, expr.dtype)

        def write(region: tuple[slice, ...], block: np.ndarray) -> None:
            out[region] = block

        return StoreTarget(expr, write), out
    result = temp(expr.shape, expr.dtype)
    return StoreTarget(expr, result.__setitem__, result.shards or result.chunks), result


def _reduce(
    name: str,
    self: Any,
    axis: Any = None,
    dtype: Any = None,
    keepdims: bool = False,
    ddof: int = 0,
    compute: bool = True,
    progress: bool = True,
) -> Any:
    expr = as_expr(self)
    # Made now, so bad arguments raise here; the first evaluation uses it, later ones (a lazy
    # result computed again) make their own accumulators.
    made = [make_reduction(name, expr, axis, keepdims, dtype, ddof)]

    def make() -> Reduction:
        return made.pop() if made else make_reduction(name, expr, axis, keepdims, dtype, ddof)

    lazy = LazyResult(make, name)
    return lazy if not compute else lazy.compute(progress)


def histogram(
    a: Any,
    bins: Any = 10,
    range: Any = None,
    density: bool | None = None,
    weights: Any = None,
    compute: bool = True,
    progress: bool = True,
) -> Any:
    """``np.histogram`` of a chunked array or expression, in one pass (two without ``range``
    and with a number of bins: the first finds the minimum and maximum, as NumPy does)."""
    if weights is not None:
        raise TypeError(
            "histogram of chunked arrays takes no weights: compute the weighted counts as an "
            "expression, or histogram parts loaded with x[...]"
        )
    expr = as_expr(a)

    def make() -> Reduction:
        bin_range = range
        # (no data: NumPy's range is (0, 1), which Histogram's edges of nothing already give)
        if bin_range is None and isinstance(bins, int | np.integer | str) and expr.size:
            low, high = compute_(
                LazyResult(lambda: make_reduction("min", expr), "min"),
                LazyResult(lambda: make_reduction("max", expr), "max"),
                progress=progress,
            )
            bin_range = (low, high)
            if isinstance(bins, str):
                raise TypeError(
                    "histogram of chunked arrays takes a number of bins or bin edges, "
                    "not a rule name"
                )
            edges = np.histogram_bin_edges(np.array([low, high]), bins=bins)
            return Histogram(expr, edges, None, bool(density))
        return Histogram(expr, bins, bin_range, bool(density))

    lazy = LazyResult(make, "histogram")
    return lazy if not compute else lazy.compute(progress)


compute_ = compute


def _binary(ufunc: np.ufunc) -> tuple[Callable[..., Any], Callable[..., Any]]:
    def forward(self: Any, other: Any) -> Any:
        return _apply_ufunc(ufunc, self, other)

    def reverse(self: Any, other: Any) -> Any:
        return _apply_ufunc(ufunc, other, self)

    return forward, reverse


def _apply_ufunc(ufunc: np.ufunc, *inputs: Any, **kwargs: Any) -> Any:
    if kwargs.get("out") is not None:
        raise TypeError(
            f"np.{ufunc.__name__}(..., out=) is not supported on chunked arrays; write the "
            "expression with expr.to_zarr(path) or assign x[...] = expr.compute()"
        )
    if kwargs.get("where", True) is not True:
        raise TypeError(
            f"np.{ufunc.__name__}(..., where=) is not supported on chunked arrays; use np.where"
        )
    kwargs = {k: v for k, v in kwargs.items() if k not in ("out", "where")}
    if ufunc.nout == 1:
        return _build.elementwise(ufunc, *inputs, name=ufunc.__name__, **kwargs)
    return tuple(
        _build.elementwise(_output(ufunc, k), *inputs, name=f"{ufunc.__name__}[{k}]", **kwargs)
        for k in range(ufunc.nout)
    )


def _output(ufunc: np.ufunc, k: int) -> Callable[..., Any]:
    def one(*args: Any, **kwargs: Any) -> Any:
        return ufunc(*args, **kwargs)[k]

    return one


_UFUNC_REDUCE = {
    np.add: "sum",
    np.multiply: "prod",
    np.minimum: "min",
    np.maximum: "max",
    np.logical_or: "any",
    np.logical_and: "all",
    np.fmin: "nanmin",
    np.fmax: "nanmax",
}


def _unsupported(what: str) -> TypeError:
    return TypeError(
        f"{what} is not supported on chunked arrays (it would load the whole array): index a "
        "part with x[...] to get an ndarray, or use x.as_ndarray() / np.asarray(x) to load it "
        "deliberately"
    )


class LazyOps:
    """Methods shared by chunked arrays and expressions."""

    __array_priority__ = 20

    def __array_ufunc__(self, ufunc: np.ufunc, method: str, *inputs: Any, **kwargs: Any) -> Any:
        if method == "__call__":
            return _apply_ufunc(ufunc, *inputs, **kwargs)
        if method == "reduce" and ufunc in _UFUNC_REDUCE and len(inputs) == 1:
            if kwargs.get("out") is not None or "initial" in kwargs or "where" in kwargs:
                raise _unsupported(f"np.{ufunc.__name__}.reduce with out=, initial= or where=")
            axis = kwargs.get("axis", 0)
            return _reduce(
                _UFUNC_REDUCE[ufunc],
                inputs[0],
                axis=axis,
                dtype=kwargs.get("dtype"),
                keepdims=kwargs.get("keepdims", False),
            )
        raise _unsupported(f"np.{ufunc.__name__}.{method}")

    def __array_function__(self, func: Any, types: Any, args: Any, kwargs: Any) -> Any:
        handler = _FUNCTIONS.get(func)
        if handler is None:
            raise _unsupported(f"np.{getattr(func, '__name__', func)}")
        return handler(*args, **kwargs)

    def __bool__(self) -> bool:
        raise TypeError(
            "the truth value of a chunked array or expression is ambiguous: use .any() or .all()"
        )

    # -- elementwise ----------------------------------------------------------------------
    __add__, __radd__ = _binary(np.add)
    __sub__, __rsub__ = _binary(np.subtract)
    __mul__, __rmul__ = _binary(np.multiply)
    __truediv__, __rtruediv__ = _binary(np.true_divide)
    __floordiv__, __rfloordiv__ = _binary(np.floor_divide)
    __mod__, __rmod__ = _binary(np.remainder)
    __pow__, __rpow__ = _binary(np.power)
    __and__, __rand__ = _binary(np.bitwise_and)
    __or__, __ror__ = _binary(np.bitwise_or)
    __xor__, __rxor__ = _binary(np.bitwise_xor)
    __lshift__, __rlshift__ = _binary(np.left_shift)
    __rshift__, __rrshift__ = _binary(np.right_shift)
    __lt__ = _binary(np.less)[0]
    __le__ = _binary(np.less_equal)[0]
    __gt__ = _binary(np.greater)[0]
    __ge__ = _binary(np.greater_equal)[0]
    __eq__ = _binary(np.equal)[0]
    __ne__ = _binary(np.not_equal)[0]
    __hash__ = object.__hash__  # arrays stay usable as keys of weak sets and dicts

    def __neg__(self) -> Any:
        return _apply_ufunc(np.negative, self)

    def __pos__(self) -> Any:
        return _apply_ufunc(np.positive, self)

    def __abs__(self) -> Any:
        return _apply_ufunc(np.absolute, self)

    def __invert__(self) -> Any:
        return _apply_ufunc(np.invert, self)

    def astype(self, dtype: Any) -> Expr:
        """A lazy copy of another dtype."""
        return _build.astype(self, dtype)

    def clip(self, min: Any = None, max: Any = None) -> Expr:
        """Values limited to ``[min, max]``, lazily."""
        return _clip(self, min, max)

    def round(self, decimals: int = 0) -> Expr:
        return _build.elementwise(np.round, self, name="round", decimals=decimals)

    def map_blocks(self, function: Callable[..., Any], *others: Any, dtype: Any = None) -> Expr:
        """``function`` applied to aligned blocks of this array (and ``others``), lazily; it
        must return a block of the same shape, of ``dtype``."""
        return _build.map_blocks(function, self, *others, dtype=dtype)

    # -- reductions -----------------------------------------------------------------------
    def sum(
        self,
        axis: Any = None,
        dtype: Any = None,
        keepdims: bool = False,
        compute: bool = True,
        progress: bool = True,
    ) -> Any:
        """Sum in one streaming pass (``compute=False``: a lazy result for :func:`oc.compute`)."""
        return _reduce("sum", self, axis, dtype, keepdims, compute=compute, progress=progress)

    def prod(
        self,
        axis: Any = None,
        dtype: Any = None,
        keepdims: bool = False,
        compute: bool = True,
        progress: bool = True,
    ) -> Any:
        return _reduce("prod", self, axis, dtype, keepdims, compute=compute, progress=progress)

    def mean(
        self,
        axis: Any = None,
        dtype: Any = None,
        keepdims: bool = False,
        compute: bool = True,
        progress: bool = True,
    ) -> Any:
        """Mean in one streaming pass."""
        return _reduce("mean", self, axis, dtype, keepdims, compute=compute, progress=progress)

    def var(
        self,
        axis: Any = None,
        dtype: Any = None,
        ddof: int = 0,
        keepdims: bool = False,
        compute: bool = True,
        progress: bool = True,
    ) -> Any:
        """Variance in one streaming pass, merging chunk moments."""
        return _reduce("var", self, axis, dtype, keepdims, ddof, compute=compute, progress=progress)

    def std(
        self,
        axis: Any = None,
        dtype: Any = None,
        ddof: int = 0,
        keepdims: bool = False,
        compute: bool = True,
        progress: bool = True,
    ) -> Any:
        """Standard deviation in one streaming pass, merging chunk moments."""
        return _reduce("std", self, axis, dtype, keepdims, ddof, compute=compute, progress=progress)

    def min(
        self, axis: Any = None, keepdims: bool = False, compute: bool = True, progress: bool = True
    ) -> Any:
        return _reduce("min", self, axis, None, keepdims, compute=compute, progress=progress)

    def max(
        self, axis: Any = None, keepdims: bool = False, compute: bool = True, progress: bool = True
    ) -> Any:
        return _reduce("max", self, axis, None, keepdims, compute=compute, progress=progress)

    def any(
        self, axis: Any = None, keepdims: bool = False, compute: bool = True, progress: bool = True
    ) -> Any:
        return _reduce("any", self, axis, None, keepdims, compute=compute, progress=progress)

    def all(
        self, axis: Any = None, keepdims: bool = False, compute: bool = True, progress: bool = True
    ) -> Any:
        return _reduce("all", self, axis, None, keepdims, compute=compute, progress=progress)

    def argmin(
        self, axis: Any = None, keepdims: bool = False, compute: bool = True, progress: bool = True
    ) -> Any:
        return _reduce("argmin", self, axis, None, keepdims, compute=compute, progress=progress)

    def argmax(
        self, axis: Any = None, keepdims: bool = False, compute: bool = True, progress: bool = True
    ) -> Any:
        return _reduce("argmax", self, axis, None, keepdims, compute=compute, progress=progress)

    def count_nonzero(
        self, axis: Any = None, keepdims: bool = False, compute: bool = True, progress: bool = True
    ) -> Any:
        return _reduce(
            "count_nonzero", self, axis, None, keepdims, compute=compute, progress=progress
        )

    # -- materialising --------------------------------------------------------------------
    def compute(self, progress: bool = True) -> Any:
        """The values: an ``ndarray`` when it fits the active manager's budget, else a
        temporary :class:`~oocarray.ChunkedArray`."""
        return compute(as_expr(self), progress=progress)[0]

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
    ) -> ChunkedArray:
        """Write the values to a new zarr array, chunk by chunk (each written whole).

        ``path``, ``codec``, ``chunks``, ``shards``, ``mode``, ``dimension_names`` and
        ``attributes`` are as for :func:`oocarray.create`: by default (``mode="w-"``) the
        array must not exist yet (:class:`~oocarray.StoreExistsError`); ``mode="w"`` replaces
        a zarr array, and nothing else.  ``progress=False`` hides the progress report."""
        expr = as_expr(self)
        if mode == "w" and isinstance(path, (str, os.PathLike)):
            refuse_replacing_an_input(
                local_path(path), (s.path for s in expr.sources()), "to_zarr(mode='w')"
            )
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
        )
        evaluate(
            [], [StoreTarget(expr, out.__setitem__, out.shards or out.chunks)], progress, "to_zarr"
        )
        return out


def _clip(a: Any, low: Any, high: Any) -> Expr:
    if low is None and high is None:
        raise ValueError("One of max or min must be given")
    # One bound only: NumPy's clip is then its minimum or maximum (a None leaf would not do).
    if low is None:
        return _build.elementwise(np.minimum, a, high, name="clip")
    if high is None:
        return _build.elementwise(np.maximum, a, low, name="clip")
    return _build.elementwise(np.clip, a, low, high, name="clip")


def _reduction_function(name: str) -> Callable[..., Any]:
    def function(
        a: Any,
        axis: Any = None,
        dtype: Any = None,
        out: Any = None,
        keepdims: bool = False,
        ddof: int = 0,
        **kwargs: Any,
    ) -> Any:
        if out is not None or kwargs.get("where") is not None:
            raise _unsupported(f"np.{name}(..., out= or where=)")
        extra = {k: v for k, v in kwargs.items() if k not in ("where",)}
        if extra:
            raise TypeError(f"np.{name} on chunked arrays does not take {sorted(extra)}")
        return _reduce(name, a, axis, dtype, keepdims, ddof)

    return function


def _argument_function(name: str) -> Callable[..., Any]:
    def function(a: Any, axis: Any = None, out: Any = None, *, keepdims: bool = False) -> Any:
        if out is not None:
            raise _unsupported(f"np.{name}(..., out=)")
        return _reduce(name, a, axis, None, keepdims)

    return function


def _where(condition: Any, x: Any = None, y: Any = None) -> Expr:
    if x is None or y is None:
        raise _unsupported("np.where(condition) with one argument (np.nonzero)")
    return _build.where(condition, x, y)


_FUNCTIONS: dict[Any, Callable[..., Any]] = {
    np.where: _where,
    np.clip: lambda a, a_min=None, a_max=None, **kw: _clip(
        a, kw.get("min", a_min), kw.get("max", a_max)
    ),
    np.concatenate: lambda arrays, axis=0: _build.concatenate(arrays, axis),
    np.stack: lambda arrays, axis=0: _build.stack(arrays, axis),
    np.histogram: histogram,
    np.shape: lambda a: tuple(a.shape),
    np.ndim: lambda a: len(a.shape),
    np.size: lambda a, axis=None: int(np.prod(a.shape)) if axis is None else a.shape[axis],
    np.round: lambda a, decimals=0: _build.elementwise(
        np.round, a, name="round", decimals=decimals
    ),
    np.astype: lambda a, dtype, copy=True: _build.astype(a, dtype),
    np.count_nonzero: lambda a, axis=None, *, keepdims=False: _reduce(
        "count_nonzero", a, axis, None, keepdims
    ),
}
for _name in REDUCTIONS:
    if _name in ("argmin", "argmax", "nanargmin", "nanargmax"):
        _FUNCTIONS[getattr(np, _name)] = _argument_function(_name)
    elif _name != "count_nonzero":
        _FUNCTIONS[getattr(np, _name)] = _reduction_function(_name)
_FUNCTIONS[np.amin] = _FUNCTIONS[np.min]
_FUNCTIONS[np.amax] = _FUNCTIONS[np.max]


# -- expressions only: indexing, loading, display ------------------------------------------


def _expr_getitem(self: Expr, key: Any) -> np.ndarray:
    """The values of a part, evaluating only the region it touches."""
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
    picks: list[int | np.ndarray] = []  # per axis: an int (axis dropped) or positions in the region
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
        block = np.broadcast_to(self.evaluate(region, BlockReads()), shape)
    for axis in reversed(range(len(picks))):
        block = np.take(block, picks[axis], axis=axis)
    return np.array(block, dtype=self.dtype)


def _expr_array(self: Expr, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
    if copy is False:
        raise ValueError(
            "an expression has no memory to view: np.asarray(expr, copy=False) is impossible"
        )
    out = np.empty(self.shape, self.dtype)

    def write(region: tuple[slice, ...], block: np.ndarray) -> None:
        out[region] = block

    evaluate([], [StoreTarget(self, write)], progress=True)
    return out if dtype is None else out.astype(dtype, copy=False)


def _expr_repr(self: Expr) -> str:
    sources = ", ".join(repr(s.path) for s in self.sources()) or "no chunked inputs"
    return f"<oocarray expression shape={self.shape} dtype={self.dtype} over {sources}>"


def _expr_len(self: Expr) -> int:
    if not self.shape:
        raise TypeError("len() of a 0-d expression")
    return self.shape[0]


def _expr_iter(self: Expr) -> Any:
    raise TypeError(
        "iterating an expression would evaluate it row by row: compute() it or index parts"
    )


def install() -> None:
    """Give chunked arrays and expressions the methods of :class:`LazyOps`."""
    for cls in (ChunkedArray, Expr):
        for name, value in vars(LazyOps).items():
            if name in ("__dict__", "__weakref__", "__doc__", "__module__", "__qualname__"):
                continue
            if cls is ChunkedArray and name in ("__bool__",):
                continue
            setattr(cls, name, value)
    for name, function in (
        ("__getitem__", _expr_getitem),
        ("__array__", _expr_array),
        ("__repr__", _expr_repr),
        ("__len__", _expr_len),
        ("__iter__", _expr_iter),
    ):
        setattr(Expr, name, function)
