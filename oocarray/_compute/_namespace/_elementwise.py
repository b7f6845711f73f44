"""The standard's elementwise functions: NumPy's ufuncs applied lazily (fused per block like
any expression), with the standard's dtype rules checked before anything is built.

Each function takes the dtypes of its category only (``sin`` floating point, ``bitwise_and``
integers and booleans...), two arrays only where the standard's promotion table relates their
dtypes, and Python scalars only of a kind that meets the array's (see ``_dtypes``); anything
else raises ``TypeError`` as ``array_api_strict`` does.  Arrays of different shapes broadcast
lazily.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from oocarray._compute import _build
from oocarray._compute._array import Expr, LazyArray
from oocarray._compute._broadcast import broadcast_node
from oocarray._compute._namespace._common import check_array, tree
from oocarray._compute._namespace._dtypes import (
    check_dtype,
    in_category,
    is_python_scalar,
    promote,
    scalar_fits,
)
from oocarray._compute._nodes import Node

# name: (NumPy function, the category of dtypes it takes)
UNARY: dict[str, tuple[Callable[..., Any], str]] = {
    "abs": (np.absolute, "numeric"),
    "acos": (np.arccos, "floating-point"),
    "acosh": (np.arccosh, "floating-point"),
    "asin": (np.arcsin, "floating-point"),
    "asinh": (np.arcsinh, "floating-point"),
    "atan": (np.arctan, "floating-point"),
    "atanh": (np.arctanh, "floating-point"),
    "bitwise_invert": (np.invert, "integer or boolean"),
    "ceil": (np.ceil, "real numeric"),
    "conj": (np.conj, "numeric"),
    "cos": (np.cos, "floating-point"),
    "cosh": (np.cosh, "floating-point"),
    "exp": (np.exp, "floating-point"),
    "expm1": (np.expm1, "floating-point"),
    "floor": (np.floor, "real numeric"),
    "imag": (np.imag, "complex floating-point"),
    "isfinite": (np.isfinite, "numeric"),
    "isinf": (np.isinf, "numeric"),
    "isnan": (np.isnan, "numeric"),
    "log": (np.log, "floating-point"),
    "log1p": (np.log1p, "floating-point"),
    "log2": (np.log2, "floating-point"),
    "log10": (np.log10, "floating-point"),
    "logical_not": (np.logical_not, "boolean"),
    "negative": (np.negative, "numeric"),
    "positive": (np.positive, "numeric"),
    "real": (np.real, "numeric"),
    "reciprocal": (np.reciprocal, "floating-point"),
    "round": (np.round, "numeric"),
    "sign": (np.sign, "numeric"),
    "signbit": (np.signbit, "real floating-point"),
    "sin": (np.sin, "floating-point"),
    "sinh": (np.sinh, "floating-point"),
    "sqrt": (np.sqrt, "floating-point"),
    "square": (np.square, "numeric"),
    "tan": (np.tan, "floating-point"),
    "tanh": (np.tanh, "floating-point"),
    "trunc": (np.trunc, "real numeric"),
}

BINARY: dict[str, tuple[Callable[..., Any], str]] = {
    "add": (np.add, "numeric"),
    "atan2": (np.arctan2, "real floating-point"),
    "bitwise_and": (np.bitwise_and, "integer or boolean"),
    "bitwise_left_shift": (np.left_shift, "integer"),
    "bitwise_or": (np.bitwise_or, "integer or boolean"),
    "bitwise_right_shift": (np.right_shift, "integer"),
    "bitwise_xor": (np.bitwise_xor, "integer or boolean"),
    "copysign": (np.copysign, "real floating-point"),
    "divide": (np.divide, "floating-point"),
    "equal": (np.equal, "all"),
    "floor_divide": (np.floor_divide, "real numeric"),
    "greater": (np.greater, "real numeric"),
    "greater_equal": (np.greater_equal, "real numeric"),
    "hypot": (np.hypot, "real floating-point"),
    "less": (np.less, "real numeric"),
    "less_equal": (np.less_equal, "real numeric"),
    "logaddexp": (np.logaddexp, "real floating-point"),
    "logical_and": (np.logical_and, "boolean"),
    "logical_or": (np.logical_or, "boolean"),
    "logical_xor": (np.logical_xor, "boolean"),
    "maximum": (np.maximum, "real numeric"),
    "minimum": (np.minimum, "real numeric"),
    "multiply": (np.multiply, "numeric"),
    "nextafter": (np.nextafter, "real floating-point"),
    "not_equal": (np.not_equal, "all"),
    "pow": (np.power, "numeric"),
    "remainder": (np.remainder, "real numeric"),
    "subtract": (np.subtract, "numeric"),
}

# Functions that return integer inputs unchanged (the standard's ceil, floor, trunc).
_IDENTITY_ON_INTEGERS = ("ceil", "floor", "trunc")


def operands(
    values: tuple[Any, ...], category: str, function: str
) -> tuple[list[Any], tuple[int, ...], np.dtype[Any]]:
    """The arguments of an elementwise function as trees broadcast to one shape (Python
    scalars kept), that shape, and the dtype the standard's promotion gives them."""
    arrays = [v for v in values if not is_python_scalar(v)]
    if not arrays:
        raise TypeError(f"{function} needs at least one array, got only Python scalars")
    for value in arrays:
        check_dtype(check_array(value, function).dtype, category, function)
    dtype = promote(*arrays)
    for scalar in (v for v in values if is_python_scalar(v)):
        scalar_fits(scalar, dtype)
    shape = np.broadcast_shapes(*(a.shape for a in arrays))
    return (
        [v if is_python_scalar(v) else broadcast_node(tree(v), shape) for v in values],
        shape,
        dtype,
    )


def _apply(function: Callable[..., Any], args: list[Any], name: str) -> Expr:
    shapes = [a.shape for a in args if not is_python_scalar(a)]
    if shapes and all(shape == () for shape in shapes):
        function = _on_arrays(function)
    return Expr(_build.elementwise(function, *args, name=name))


def _on_arrays(function: Callable[..., Any]) -> Callable[..., Any]:
    """``function`` given 0-d arrays where a 0-d block reads NumPy scalars: NumPy's scalar
    arithmetic differs from its array loops at the edges ((1+1j) / 0j is nan+nanj for
    scalars, inf+infj for arrays, as the standard and array_api_strict have it)."""

    def on_arrays(*values: Any, **kwargs: Any) -> Any:
        return function(*(v if is_python_scalar(v) else np.asarray(v) for v in values), **kwargs)

    on_arrays.__name__ = getattr(function, "__name__", "function")
    return on_arrays


def _unary(name: str) -> Callable[[Any], Any]:
    function, category = UNARY[name]

    def unary(x: Any, /) -> Any:
        check_dtype(check_array(x, name).dtype, category, name)
        if name in _IDENTITY_ON_INTEGERS and x.dtype.kind in "iu":
            return x
        if name == "sign" and x.dtype.kind == "c":
            return _apply(_complex_sign, [tree(x)], name)
        return _apply(function, [tree(x)], name)

    unary.__name__ = unary.__qualname__ = name
    unary.__doc__ = (
        f"``{name}(x)`` elementwise, lazily (NumPy's ``{function.__name__}``); ``x`` of "
        f"{category} dtypes."
    )
    return unary


def _complex_sign(z: np.ndarray) -> np.ndarray:
    magnitude = np.abs(z)
    return np.where(magnitude == 0, 0, z / np.where(magnitude == 0, 1, magnitude))


def _binary(name: str) -> Callable[[Any, Any], Any]:
    function, category = BINARY[name]

    def binary(x1: Any, x2: Any, /) -> Any:
        args, _, _ = operands((x1, x2), category, name)
        return _apply(function, args, name)

    binary.__name__ = binary.__qualname__ = name
    binary.__doc__ = (
        f"``{name}(x1, x2)`` elementwise with broadcasting, lazily (NumPy's "
        f"``{function.__name__}``); arrays of {category} dtypes that the standard promotes "
        "together, or one array and a Python scalar of a kind it takes."
    )
    return binary


FUNCTIONS: dict[str, Callable[..., Any]] = {
    **{name: _unary(name) for name in UNARY},
    **{name: _binary(name) for name in BINARY},
}


def _clip_block(
    x: np.ndarray, *bounds: np.ndarray, has_min: bool, has_max: bool, dtype: np.dtype[Any]
) -> np.ndarray:
    out = np.asarray(x)
    rest = list(bounds)
    if has_min:
        low = rest.pop(0)
        out = np.where((out < low) | np.isnan(low), low, out)
    if has_max:
        high = rest.pop(0)
        out = np.where((out > high) | np.isnan(high), high, out)
    return np.asarray(out).astype(dtype, copy=False)


def clip(x: Any, /, min: Any = None, max: Any = None) -> Any:
    """``x`` limited to ``[min, max]`` elementwise, lazily, keeping ``x``'s dtype; the bounds
    are arrays or Python ints and floats of ``x``'s kind.

    Examples
    --------
    >>> import numpy as np, oocarray as oc, oocarray.array_api as xp
    >>> x = oc.from_numpy(np.arange(6.0), chunks=4)
    >>> np.asarray(xp.clip(x, 1.0, 4.0))
    array([1., 1., 2., 3., 4., 4.])
    """
    check_dtype(check_array(x, "clip").dtype, "real numeric", "clip")
    bounds: list[Any] = []
    for label, bound in (("min", min), ("max", max)):
        if bound is None:
            continue
        if isinstance(bound, LazyArray):
            bound = check_array(bound, "clip")
            check_dtype(bound.dtype, "real numeric", "clip")
            if (bound.dtype.kind == "f") != (x.dtype.kind == "f"):
                raise TypeError(f"clip: {label} must be of x's kind ({x.dtype}), got {bound.dtype}")
        elif type(bound) not in (int, float):
            raise TypeError(f"clip: {label} must be None, an int, a float or an array")
        elif isinstance(bound, float) and x.dtype.kind in "iu":
            raise TypeError(f"clip: {label} must be integral when x is integral")
        elif isinstance(bound, int) and x.dtype.kind in "iu":
            info = np.iinfo(x.dtype)
            if (label == "min" and bound <= info.min) or (label == "max" and bound >= info.max):
                continue  # a bound beyond the dtype limits nothing
        bounds.append((label, bound))
    if not bounds:
        return x
    shape = np.broadcast_shapes(x.shape, *(np.shape(b) for _, b in bounds))
    leaves: list[Node | Any] = [broadcast_node(tree(x), shape)]
    for _, bound in bounds:
        leaves.append(
            bound if not isinstance(bound, LazyArray) else broadcast_node(tree(bound), shape)
        )
    labels = [label for label, _ in bounds]
    return Expr(
        _build.elementwise(
            _clip_block,
            *leaves,
            name="clip",
            has_min="min" in labels,
            has_max="max" in labels,
            dtype=x.dtype,
        )
    )


__all__ = ["BINARY", "FUNCTIONS", "UNARY", "clip", "in_category", "operands"]
