"""Print the Array API conformance table of ``oocarray.array_api`` in Markdown.

Every function of the 2024.12 standard, by section: whether the namespace defines it and a
tiny probe on small chunked arrays runs (supported), or why not (the compute algorithm it
calls is not built yet, or the function is refused on purpose).  README.md's section "Array API
conformance" is this script's output (and a second table: the NumPy functions on chunked
arrays, each probed through NumPy's own function)::

    python tools/array_api_table.py
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

import oocarray as oc
import oocarray.array_api as xp

# The standard's functions (2024.12), by section; linalg is the linalg extension.
SECTIONS: dict[str, tuple[str, ...]] = {
    "creation": (
        "arange", "asarray", "empty", "empty_like", "eye", "from_dlpack", "full", "full_like",
        "linspace", "meshgrid", "ones", "ones_like", "tril", "triu", "zeros", "zeros_like",
    ),
    "data types": ("astype", "can_cast", "finfo", "iinfo", "isdtype", "result_type"),
    "elementwise": (
        "abs", "acos", "acosh", "add", "asin", "asinh", "atan", "atan2", "atanh",
        "bitwise_and", "bitwise_invert", "bitwise_left_shift", "bitwise_or",
        "bitwise_right_shift", "bitwise_xor", "ceil", "clip", "conj", "copysign", "cos", "cosh",
        "divide", "equal", "exp", "expm1", "floor", "floor_divide", "greater", "greater_equal",
        "hypot", "imag", "isfinite", "isinf", "isnan", "less", "less_equal", "log", "log1p",
        "log2", "log10", "logaddexp", "logical_and", "logical_not", "logical_or", "logical_xor",
        "maximum", "minimum", "multiply", "negative", "nextafter", "not_equal", "positive",
        "pow", "real", "reciprocal", "remainder", "round", "sign", "signbit", "sin", "sinh",
        "sqrt", "square", "subtract", "tan", "tanh", "trunc",
    ),
    "indexing": ("take", "take_along_axis"),
    "inspection": ("__array_namespace_info__",),
    "linear algebra": ("matmul", "matrix_transpose", "tensordot", "vecdot"),
    "manipulation": (
        "broadcast_arrays", "broadcast_to", "concat", "expand_dims", "flip", "moveaxis",
        "permute_dims", "repeat", "reshape", "roll", "squeeze", "stack", "tile", "unstack",
    ),
    "searching": ("argmax", "argmin", "count_nonzero", "nonzero", "searchsorted", "where"),
    "sets": ("unique_all", "unique_counts", "unique_inverse", "unique_values"),
    "sorting": ("argsort", "sort"),
    "statistics": (
        "cumulative_prod", "cumulative_sum", "max", "mean", "min", "prod", "std", "sum", "var",
    ),
    "utility": ("all", "any", "diff"),
    "linalg extension": (
        "cholesky", "cross", "det", "diagonal", "eigh", "eigvalsh", "inv", "matmul",
        "matrix_norm", "matrix_power", "matrix_rank", "matrix_transpose", "outer", "pinv", "qr",
        "slogdet", "solve", "svd", "svdvals", "tensordot", "trace", "vecdot", "vector_norm",
    ),
}  # fmt: skip

_NOT_BUILT = "is not supported on chunked arrays"


def _arrays() -> dict[str, Any]:
    matrix = np.array([[3.0, 1.0, 2.0], [0.0, 5.0, 4.0], [1.0, 1.0, 2.0]])
    return {
        "f": oc.from_numpy(matrix, chunks=(2, 2)),
        "i": oc.from_numpy(matrix.astype(np.int64), chunks=(2, 2)),
        "b": oc.from_numpy(matrix > 1, chunks=(2, 2)),
        "c": oc.from_numpy(matrix + 1j, chunks=(2, 2)),
        "v": oc.from_numpy(matrix[0], chunks=2),
        "n": np.array([1.0, 2.0]),
    }


def _probe(section: str, name: str, a: dict[str, Any]) -> Callable[[], Any]:
    """A tiny call of ``name`` on small chunked arrays."""
    f, i, b, c, v = a["f"], a["i"], a["b"], a["c"], a["v"]
    module: Any = xp.linalg if section == "linalg extension" else xp
    function = getattr(module, name)
    special: dict[str, Callable[[], Any]] = {
        "arange": lambda: function(5),
        "asarray": lambda: function([1, 2]),
        "empty": lambda: function((2, 2)),
        "eye": lambda: function(3),
        "from_dlpack": lambda: function(a["n"]),
        "full": lambda: function((2,), 1.0),
        "full_like": lambda: function(f, 2.0),
        "linspace": lambda: function(0, 1, 5),
        "meshgrid": lambda: function(v, v),
        "ones": lambda: function(3),
        "zeros": lambda: function(3),
        "astype": lambda: function(f, xp.int8),
        "can_cast": lambda: function(xp.int8, xp.int16),
        "finfo": lambda: function(xp.float32),
        "iinfo": lambda: function(xp.int8),
        "isdtype": lambda: function(xp.int8, "integral"),
        "result_type": lambda: function(xp.int8, xp.uint8),
        "take": lambda: function(f, xp.asarray([1, 0]), axis=1),
        "take_along_axis": lambda: function(f, xp.argsort(f, axis=1), axis=1),
        "__array_namespace_info__": lambda: function().capabilities(),
        "matmul": lambda: function(f, f),
        "tensordot": lambda: function(f, f),
        "vecdot": lambda: function(f, f),
        "broadcast_arrays": lambda: function(f, v),
        "broadcast_to": lambda: function(v, (3, 3)),
        "concat": lambda: function([f, f]),
        "stack": lambda: function([f, f]),
        "moveaxis": lambda: function(f, 0, 1),
        "permute_dims": lambda: function(f, (1, 0)),
        "repeat": lambda: function(f, 2, axis=0),
        "reshape": lambda: function(f, (9,)),
        "roll": lambda: function(f, 1, axis=0),
        "squeeze": lambda: function(xp.expand_dims(f, axis=0), axis=0),
        "tile": lambda: function(f, (2, 1)),
        "searchsorted": lambda: function(xp.sort(v), v),
        "where": lambda: function(b, f, 0.0),
        "cumulative_prod": lambda: function(f, axis=0),
        "cumulative_sum": lambda: function(f, axis=0),
        "clip": lambda: function(f, 1.0, 2.0),
        "vector_norm": lambda: function(f),
    }
    if name in special:
        return special[name]
    if section == "elementwise":
        from oocarray._compute._namespace._elementwise import BINARY, UNARY

        category = (UNARY.get(name) or BINARY[name])[1]
        x = {"boolean": b, "integer": i, "integer or boolean": i, "complex floating-point": c}.get(
            category, f
        )
        return (lambda: function(x, x)) if name in BINARY else (lambda: function(x))
    return lambda: function(f)


def _evaluated(result: Any) -> None:
    if isinstance(result, tuple | list):
        for r in result:
            _evaluated(r)
    elif isinstance(result, oc.ChunkedArray | oc.Expr):
        np.asarray(result)


def status(section: str, name: str, arrays: dict[str, Any]) -> tuple[bool, str]:
    """(supported, why not)."""
    module: Any = xp.linalg if section == "linalg extension" else xp
    if not hasattr(module, name):
        return False, "not defined"
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            _evaluated(_probe(section, name, arrays)())
    except NotImplementedError:
        return False, "not implemented"
    except TypeError as error:
        if _NOT_BUILT in str(error):
            return False, "not built yet"
        return False, f"probe failed: {error}"
    return True, ""


# The NumPy functions people type first on data larger than RAM (issue list of the compute
# layer's out-of-core algorithms), by family; each is probed through NumPy's own function.
NUMPY: dict[str, tuple[str, ...]] = {
    "sorting and selection": (
        "sort", "argsort", "partition", "argpartition", "searchsorted", "percentile",
        "quantile", "median", "nanpercentile", "nanquantile", "nanmedian",
    ),
    "set functions": (
        "unique", "unique_values", "unique_counts", "unique_inverse", "unique_all", "isin",
    ),
    "scans": ("cumsum", "cumprod", "cumulative_sum", "cumulative_prod", "diff"),
    "linear algebra": (
        "matmul", "dot", "tensordot", "vecdot", "outer", "inner", "einsum", "matrix_transpose",
    ),
    "shape and indexing": (
        "transpose", "permute_dims", "moveaxis", "swapaxes", "reshape", "ravel", "expand_dims",
        "squeeze", "broadcast_to", "broadcast_arrays", "flip", "roll", "tile", "repeat", "take",
        "take_along_axis", "nonzero", "argwhere", "flatnonzero", "extract", "compress", "pad",
    ),
}  # fmt: skip

# What NumPy has no function for, and oocarray's own.
OOCARRAY_FUNCTIONS = {
    "top-k": "`oc.top_k(x, k, axis)` (one pass holding k values per line)",
}


def _numpy_probe(name: str, a: dict[str, Any]) -> Callable[[], Any]:
    f, v = a["f"], a["v"]
    function = getattr(np, name)
    special: dict[str, Callable[[], Any]] = {
        "partition": lambda: function(f, 1, axis=0),
        "argpartition": lambda: function(f, 1, axis=0),
        "searchsorted": lambda: function(np.sort(v), 2.0),
        "percentile": lambda: function(f, [1, 50, 99], axis=0),
        "quantile": lambda: function(f, 0.5, axis=0),
        "nanpercentile": lambda: function(f, 50, axis=0),
        "nanquantile": lambda: function(f, 0.5, axis=0),
        "isin": lambda: function(f, [1.0, 2.0]),
        "cumulative_sum": lambda: function(f, axis=0),
        "cumulative_prod": lambda: function(f, axis=0),
        "matmul": lambda: f @ f,
        "dot": lambda: function(f, f),
        "tensordot": lambda: function(f, f, axes=1),
        "vecdot": lambda: function(f, f),
        "outer": lambda: function(v, v),
        "inner": lambda: function(f, f),
        "einsum": lambda: function("ij,jk->ik", f, f),
        "moveaxis": lambda: function(f, 0, 1),
        "swapaxes": lambda: function(f, 0, 1),
        "reshape": lambda: function(f, (9,)),
        "expand_dims": lambda: function(f, 0),
        "squeeze": lambda: function(np.expand_dims(f, 0)),
        "broadcast_to": lambda: function(v, (3, 3)),
        "broadcast_arrays": lambda: function(f, v),
        "roll": lambda: function(f, 1, axis=0),
        "tile": lambda: function(f, (2, 1)),
        "repeat": lambda: function(f, 2, axis=0),
        "take": lambda: function(f, [2, 0], axis=0),
        "take_along_axis": lambda: function(f, np.zeros((1, 3), int), axis=0),
        "extract": lambda: function(f > 1, f),
        "compress": lambda: function([True, False, True], f, axis=0),
        "pad": lambda: function(f, 1),
        "permute_dims": lambda: function(f, (1, 0)),
    }
    return special.get(name, lambda: function(f))


def numpy_table() -> str:
    """The NumPy functions on chunked arrays: supported out of core, or why not."""
    arrays = _arrays()
    lines = ["| Family | Supported out of core | Not supported (why) |", "| --- | --- | --- |"]
    for family, names in NUMPY.items():
        supported, refused = [], []
        for name in names:
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    _evaluated(_numpy_probe(name, arrays)())
            except TypeError as error:
                refused.append(f"`np.{name}` ({str(error).split(':')[0]})")
            else:
                supported.append(f"`np.{name}`")
        lines.append(f"| {family} | {', '.join(supported) or '-'} | {', '.join(refused) or '-'} |")
    for what, how in OOCARRAY_FUNCTIONS.items():
        lines.append(f"| {what} | {how} | - |")
    return "\n".join(lines)


def table() -> str:
    arrays = _arrays()
    lines = [
        "| Section | Supported | Not supported (why) |",
        "| --- | --- | --- |",
    ]
    supported_count = total = 0
    for section, names in SECTIONS.items():
        supported, refused = [], []
        for name in names:
            ok, why = status(section, name, arrays)
            total += 1
            if ok:
                supported_count += 1
                supported.append(f"`{name}`")
            else:
                refused.append(f"`{name}` ({why})")
        lines.append(f"| {section} | {', '.join(supported) or '-'} | {', '.join(refused) or '-'} |")
    lines.append("")
    lines.append(
        f"{supported_count} of {total} functions supported (`python tools/array_api_table.py`)."
    )
    return "\n".join(lines)


if __name__ == "__main__":
    print(table())
    print()
    print(numpy_table())
