"""What NumPy asks of chunked arrays and expressions, answered over expression trees: ufuncs,
``__array_function__``'s functions, reductions (lazy or computed) and histograms.

The public types (``ChunkedArray``, ``Expr``, in ``_compute._array``) define their operators
and NumPy protocols in their class bodies and base classes and call these with their trees
(``Node``) or stored arrays; what comes back as a ``Node`` they wrap as an ``Expr``.  Anything
NumPy asks that is not supported raises ``TypeError`` saying what to do instead: nothing
silently loads a whole array.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from oocarray._compute import _build, _linalg, _rearrange, _scans, _sets, _sorting
from oocarray._compute._deferred import resolve
from oocarray._compute._engine import evaluate
from oocarray._compute._limits import unsupported
from oocarray._compute._nodes import Node, as_node
from oocarray._compute._reduce import Histogram, Reduction
from oocarray._compute._reduction_kinds import REDUCTIONS, make_reduction

__all__ = [
    "LazyResult",
    "apply_ufunc",
    "array_function",
    "array_ufunc",
    "clip",
    "compute_reductions",
    "histogram",
    "reduce_lazy",
    "unsupported",
]


class LazyResult:
    """A reduction not yet computed (``compute=False``); :func:`oocarray.compute` evaluates
    several of them, and expressions, in one read of each chunk.

    Parameters
    ----------
    make : callable
        Makes the reduction's accumulator (internal: reductions with ``compute=False`` make
        lazy results).
    name
        The reduction's name, e.g. ``"sum"``.

    Examples
    --------
    >>> import numpy as np, oocarray as oc
    >>> x = oc.from_numpy(np.arange(10.0), chunks=5)
    >>> lazy = x.sum(compute=False)
    >>> lazy
    <lazy sum>
    >>> oc.compute(lazy, x.max(compute=False), progress=False)
    (np.float64(45.0), np.float64(9.0))
    """

    def __init__(self, make: Callable[[], Reduction], name: str) -> None:
        self._make = make
        self.name = name

    def reduction(self) -> Reduction:
        """A new accumulator of this reduction, for the engine to feed (as
        :func:`oocarray.compute` does).

        Returns
        -------
        Reduction
            The accumulator: it takes the blocks it reads and ``finish()`` gives the value.

        Examples
        --------
        >>> import numpy as np, oocarray as oc
        >>> lazy = oc.from_numpy(np.arange(4)).sum(compute=False)
        >>> lazy.reduction() is not lazy.reduction()
        True
        """
        return self._make()

    def compute(self, progress: bool = True) -> Any:
        """Compute this reduction alone (:func:`oocarray.compute` computes several in one
        pass).  It can be computed again: each time reads its input anew.

        Parameters
        ----------
        progress
            Show a progress bar (default ``True``).

        Returns
        -------
        numpy.ndarray or NumPy scalar
            The value.

        Examples
        --------
        >>> import numpy as np, oocarray as oc
        >>> lazy = oc.from_numpy(np.arange(4.0)).mean(compute=False)
        >>> lazy.compute(progress=False)
        np.float64(1.5)
        """
        return compute_reductions(self, progress=progress)[0]

    def __repr__(self) -> str:
        return f"<lazy {self.name}>"


def compute_reductions(*items: LazyResult, progress: bool = True) -> tuple[Any, ...]:
    """Several lazy reductions in one pass over their inputs."""
    reductions = [item.reduction() for item in items]
    resolve([r.expr for r in reductions], progress)  # reductions kept lazy in their inputs
    evaluate(reductions, [], progress)
    return tuple(reduction.finish() for reduction in reductions)


def reduce_lazy(
    name: str,
    value: Any,
    axis: Any = None,
    dtype: Any = None,
    keepdims: bool = False,
    ddof: int = 0,
    compute: bool = True,
    progress: bool = True,
) -> Any:
    """The reduction ``name`` of a tree or stored array: its value, or with
    ``compute=False`` a :class:`LazyResult`."""
    expr = as_node(value)
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
    expr = as_node(a)

    def make() -> Reduction:
        bin_range = range
        # (no data: NumPy's range is (0, 1), which Histogram's edges of nothing already give)
        if bin_range is None and isinstance(bins, int | np.integer | str) and expr.size:
            low, high = compute_reductions(
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


def apply_ufunc(ufunc: np.ufunc, *inputs: Any, **kwargs: Any) -> Node | tuple[Node, ...]:
    """``ufunc(*inputs)`` elementwise, lazily: a tree (a tuple of them for several outputs)."""
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


def array_ufunc(ufunc: np.ufunc, method: str, *inputs: Any, **kwargs: Any) -> Any:
    """``__array_ufunc__``: calls are lazy, the reductions NumPy names are streamed."""
    if method == "__call__" and ufunc in _FUNCTIONS:  # gufuncs: np.matmul, np.vecdot
        return _FUNCTIONS[ufunc](*inputs, **kwargs)
    if method == "__call__":
        if ufunc.signature is not None:
            raise unsupported(f"np.{ufunc.__name__}")
        return apply_ufunc(ufunc, *inputs, **kwargs)
    if method == "reduce" and ufunc in _UFUNC_REDUCE and len(inputs) == 1:
        if kwargs.get("out") is not None or "initial" in kwargs or "where" in kwargs:
            raise unsupported(f"np.{ufunc.__name__}.reduce with out=, initial= or where=")
        axis = kwargs.get("axis", 0)
        return reduce_lazy(
            _UFUNC_REDUCE[ufunc],
            inputs[0],
            axis=axis,
            dtype=kwargs.get("dtype"),
            keepdims=kwargs.get("keepdims", False),
        )
    raise unsupported(f"np.{ufunc.__name__}.{method}")


def array_function(func: Any, args: Any, kwargs: Any) -> Any:
    """``__array_function__``: the NumPy functions chunked arrays answer."""
    handler = _FUNCTIONS.get(func)
    if handler is None:
        raise unsupported(f"np.{getattr(func, '__name__', func)}")
    return handler(*args, **kwargs)


def clip(a: Any, low: Any, high: Any) -> Node:
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
            raise unsupported(f"np.{name}(..., out= or where=)")
        extra = {k: v for k, v in kwargs.items() if k not in ("where",)}
        if extra:
            raise TypeError(f"np.{name} on chunked arrays does not take {sorted(extra)}")
        return reduce_lazy(name, a, axis, dtype, keepdims, ddof)

    return function


def _argument_function(name: str) -> Callable[..., Any]:
    def function(a: Any, axis: Any = None, out: Any = None, *, keepdims: bool = False) -> Any:
        if out is not None:
            raise unsupported(f"np.{name}(..., out=)")
        return reduce_lazy(name, a, axis, None, keepdims)

    return function


def _where(condition: Any, x: Any = None, y: Any = None) -> Node:
    if x is None or y is None:
        raise unsupported("np.where(condition) with one argument (np.nonzero)")
    return _build.where(condition, x, y)


_FUNCTIONS: dict[Any, Callable[..., Any]] = {
    np.where: _where,
    np.clip: lambda a, a_min=None, a_max=None, **kw: clip(
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
    np.count_nonzero: lambda a, axis=None, *, keepdims=False: reduce_lazy(
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
# The out-of-core algorithms, each module with the NumPy functions it answers.
for _module in (_rearrange, _sorting, _sets, _scans, _linalg):
    _FUNCTIONS.update(_module.FUNCTIONS)
