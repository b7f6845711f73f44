"""Building expressions: shapes, NumPy's result types, and the operations chunked arrays take."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

from oocarray._compute._broadcast import broadcast_node
from oocarray._compute._nodes import Apply, Concat, Constant, ExpandDims, Node, as_node
from oocarray._storage import StoredArray

__all__ = ["astype", "concatenate", "elementwise", "map_blocks", "stack", "where"]


def _is_lazy(value: Any) -> bool:
    return isinstance(value, Node | StoredArray)


def _shape_of(args: tuple[Any, ...], what: str) -> tuple[int, ...]:
    """The shape the lazy arguments broadcast to; NumPy values must broadcast to it without
    growing it (that would copy them to the full shape)."""
    lazy_shapes = [tuple(a.shape) for a in args if _is_lazy(a)]
    try:
        shape = np.broadcast_shapes(*lazy_shapes)
    except ValueError:
        raise ValueError(
            f"{what}: chunked arrays and expressions of shapes {lazy_shapes} do not broadcast "
            "together (index or reshape them to compatible shapes first)"
        ) from None
    for a in args:
        if _is_lazy(a) or np.isscalar(a):
            continue
        value_shape = np.shape(a)
        try:
            broadcast = np.broadcast_shapes(shape, value_shape)
        except ValueError:
            broadcast = None
        if broadcast != shape:
            raise ValueError(
                f"{what}: a NumPy value of shape {value_shape} does not broadcast to the "
                f"chunked shape {shape}; only values that broadcast without growing it are taken"
            )
    return shape


def _leaves(args: tuple[Any, ...], shape: tuple[int, ...]) -> list[Node]:
    """The arguments as nodes of ``shape``: lazy ones broadcast lazily, NumPy values as
    constants."""
    return [broadcast_node(as_node(a), shape) if _is_lazy(a) else as_node(a, shape) for a in args]


def _probe(value: Any) -> Any:
    """A one-element stand-in of a value's type, for NumPy's type rules (weak Python scalars
    stay Python scalars)."""
    if _is_lazy(value):
        return np.ones(1, dtype=value.dtype)
    if isinstance(value, np.ndarray | np.generic):
        return np.ones(1, dtype=value.dtype) if np.ndim(value) else value
    return value


def result_dtype(
    function: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> np.dtype[Any]:
    """The dtype ``function`` gives on these arguments, as NumPy decides it."""
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return np.asarray(function(*(_probe(a) for a in args), **kwargs)).dtype


def elementwise(
    function: Callable[..., Any], *args: Any, name: str | None = None, **kwargs: Any
) -> Node:
    """``function(*args, **kwargs)`` elementwise, lazily, over chunked arrays and NumPy values."""
    what = str(name or getattr(function, "__name__", "an elementwise function"))
    shape = _shape_of(args, what)
    dtype = result_dtype(function, args, kwargs)
    return Apply(function, _leaves(args, shape), shape, dtype, kwargs, name)


def astype(value: Any, dtype: Any) -> Node:
    target = np.dtype(dtype)
    return elementwise(_cast, value, name=f"astype({target})", dtype=target)


def _cast(block: np.ndarray, dtype: np.dtype[Any]) -> np.ndarray:
    return np.asarray(block).astype(dtype, copy=False)


def where(condition: Any, x: Any, y: Any) -> Node:
    return elementwise(np.where, condition, x, y, name="where")


def map_blocks(function: Callable[..., Any], *args: Any, dtype: Any) -> Node:
    """``function`` on aligned blocks of the arguments; it returns a block of the same shape."""
    if dtype is None:
        raise TypeError("map_blocks needs dtype= (the dtype function returns)")
    shape = _shape_of(args, "map_blocks")
    target = np.dtype(dtype)

    def apply(*blocks: np.ndarray) -> np.ndarray:
        out_shape = np.broadcast_shapes(*(np.shape(b) for b in blocks))
        result = np.asarray(function(*blocks))
        if result.shape != out_shape:
            raise ValueError(
                f"map_blocks: the function returned shape {result.shape} for a block of shape "
                f"{out_shape}; it must keep the block's shape"
            )
        return result.astype(target, copy=False)

    name = getattr(function, "__name__", "function")
    return Apply(apply, _leaves(args, shape), shape, target, name=f"map_blocks({name})")


def concatenate(values: Any, axis: int = 0) -> Node:
    parts = [as_node(v) for v in values]
    if not parts:
        raise ValueError("need at least one array to concatenate")
    if any(isinstance(p, Constant) for p in parts):
        raise TypeError(
            "np.concatenate over chunked arrays takes chunked arrays and expressions only"
        )
    ndim = parts[0].ndim
    if ndim == 0:
        raise ValueError("zero-dimensional arrays cannot be concatenated")
    axis = _axis(axis, ndim)
    for p in parts:
        if (
            p.ndim != ndim
            or p.shape[:axis] + p.shape[axis + 1 :]
            != parts[0].shape[:axis] + parts[0].shape[axis + 1 :]
        ):
            raise ValueError(
                f"all the input array dimensions except for the concatenation axis must match "
                f"exactly: {parts[0].shape} and {p.shape} along axis {axis}"
            )
    return Concat(parts, axis)


def stack(values: Any, axis: int = 0) -> Node:
    parts = [as_node(v) for v in values]
    if not parts:
        raise ValueError("need at least one array to stack")
    shapes = {p.shape for p in parts}
    if len(shapes) != 1:
        raise ValueError(f"all input arrays must have the same shape, got {sorted(shapes)}")
    axis = _axis(axis, parts[0].ndim + 1)
    return Concat([ExpandDims(p, axis) for p in parts], axis)


def _axis(axis: int, ndim: int) -> int:
    if not -ndim <= axis < ndim:
        raise np.exceptions.AxisError(axis, ndim)
    return axis % ndim
