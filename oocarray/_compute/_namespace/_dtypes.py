"""The standard's data types and its type promotion, which is narrower than NumPy's.

The Array API defines promotion within a kind only (booleans, integers signed and unsigned,
real and complex floating point) and leaves mixed kinds (an integer array with a floating one)
undefined; like ``array_api_strict``, undefined combinations raise ``TypeError`` here rather
than following NumPy.  Python scalars combine with arrays of their own kind (an ``int`` also
with floating arrays, a ``float`` or ``complex`` with floating ones).

Dtypes are NumPy's own :class:`numpy.dtype` objects (``int8 == np.dtype("int8")``).  Arrays
of dtypes the standard lacks (``float16``) follow NumPy's rules, as an extension.
"""

from __future__ import annotations

import builtins
from typing import Any

import numpy as np

__all__ = [
    "DTYPE_CATEGORIES",
    "STANDARD_DTYPES",
    "bool",
    "can_cast",
    "check_dtype",
    "complex64",
    "complex128",
    "dtype_of",
    "finfo",
    "float32",
    "float64",
    "iinfo",
    "int8",
    "int16",
    "int32",
    "int64",
    "is_python_scalar",
    "isdtype",
    "promote",
    "result_type",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
]

bool = np.dtype("bool")
int8 = np.dtype("int8")
int16 = np.dtype("int16")
int32 = np.dtype("int32")
int64 = np.dtype("int64")
uint8 = np.dtype("uint8")
uint16 = np.dtype("uint16")
uint32 = np.dtype("uint32")
uint64 = np.dtype("uint64")
float32 = np.dtype("float32")
float64 = np.dtype("float64")
complex64 = np.dtype("complex64")
complex128 = np.dtype("complex128")

_SIGNED = (int8, int16, int32, int64)
_UNSIGNED = (uint8, uint16, uint32, uint64)
_REAL_FLOATING = (float32, float64)
_COMPLEX = (complex64, complex128)
STANDARD_DTYPES = (bool, *_SIGNED, *_UNSIGNED, *_REAL_FLOATING, *_COMPLEX)

# The dtypes each category of function takes (the standard's names for them).
DTYPE_CATEGORIES: dict[str, tuple[np.dtype[Any], ...]] = {
    "all": STANDARD_DTYPES,
    "numeric": (*_SIGNED, *_UNSIGNED, *_REAL_FLOATING, *_COMPLEX),
    "real numeric": (*_SIGNED, *_UNSIGNED, *_REAL_FLOATING),
    "integer": (*_SIGNED, *_UNSIGNED),
    "integer or boolean": (bool, *_SIGNED, *_UNSIGNED),
    "boolean": (bool,),
    "floating-point": (*_REAL_FLOATING, *_COMPLEX),
    "real floating-point": _REAL_FLOATING,
    "complex floating-point": _COMPLEX,
}
# NumPy kinds of each category, for arrays of dtypes outside the standard (float16).
_CATEGORY_KINDS = {
    "all": "biufc",
    "numeric": "iufc",
    "real numeric": "iuf",
    "integer": "iu",
    "integer or boolean": "biu",
    "boolean": "b",
    "floating-point": "fc",
    "real floating-point": "f",
    "complex floating-point": "c",
}


def in_category(dtype: np.dtype[Any], category: str) -> builtins.bool:
    if dtype in STANDARD_DTYPES:
        return dtype in DTYPE_CATEGORIES[category]
    return dtype.kind in _CATEGORY_KINDS[category]


def check_dtype(dtype: np.dtype[Any], category: str, function: str) -> None:
    """Refuse an array whose dtype ``function`` does not take, as the standard says."""
    if not in_category(dtype, category):
        raise TypeError(f"{function} takes arrays of {category} dtypes, got {dtype}")


def _promote_pair(a: np.dtype[Any], b: np.dtype[Any]) -> np.dtype[Any]:
    if a == b:
        return a
    if a not in STANDARD_DTYPES or b not in STANDARD_DTYPES:
        if a.kind == "b" and b.kind == "b":
            return a
        if (a.kind == "b") != (b.kind == "b") or ((a.kind in "iu") != (b.kind in "iu")):
            raise TypeError(f"{a} and {b} cannot be type promoted together (mixed kinds)")
        return np.result_type(a, b)
    for group in (_SIGNED, _UNSIGNED, _REAL_FLOATING):
        if a in group and b in group:
            return group[max(group.index(a), group.index(b))]
    if {a.kind, b.kind} == {"i", "u"}:
        signed, unsigned = (a, b) if a.kind == "i" else (b, a)
        if unsigned.itemsize < signed.itemsize:
            return signed
        if unsigned != uint64:
            return np.dtype(f"int{unsigned.itemsize * 16}")
    if a.kind in "fc" and b.kind in "fc":
        return np.result_type(a, b)
    raise TypeError(f"{a} and {b} cannot be type promoted together by the Array API standard")


def is_python_scalar(value: Any) -> builtins.bool:
    return type(value) in (builtins.bool, int, float, complex)


def dtype_of(value: Any) -> np.dtype[Any]:
    """The dtype of an array or a dtype (``np.dtype`` accepts names and types too)."""
    found = getattr(value, "dtype", None)
    return found if isinstance(found, np.dtype) else np.dtype(value)


def scalar_fits(scalar: Any, dtype: np.dtype[Any]) -> np.dtype[Any]:
    """The dtype a Python scalar takes beside an array of ``dtype`` (TypeError where the
    standard does not let them meet)."""
    if isinstance(scalar, builtins.bool):
        ok = dtype.kind == "b"
    elif isinstance(scalar, int):
        ok = dtype.kind in "iufc"
        if dtype.kind in "iu" and not np.iinfo(dtype).min <= scalar <= np.iinfo(dtype).max:
            raise OverflowError(f"Python int {scalar} is out of the bounds of {dtype}")
    elif isinstance(scalar, float):
        ok = dtype.kind in "fc"
    else:
        ok = dtype.kind in "fc"
        if ok and dtype.kind == "f":
            return np.result_type(dtype, np.complex64)
    if not ok:
        raise TypeError(
            f"a Python {type(scalar).__name__} does not combine with an array of {dtype} "
            "under the Array API standard"
        )
    return dtype


def promote(*values: Any) -> np.dtype[Any]:
    """The standard's result dtype of arrays, dtypes and Python scalars (at least one array or
    dtype)."""
    dtypes = [dtype_of(v) for v in values if not is_python_scalar(v)]
    if not dtypes:
        raise TypeError("result_type needs at least one array or dtype")
    result = dtypes[0]
    for other in dtypes[1:]:
        result = _promote_pair(result, other)
    for scalar in (v for v in values if is_python_scalar(v)):
        result = scalar_fits(scalar, result)
    return result


def result_type(*arrays_and_dtypes: Any) -> np.dtype[Any]:
    """The dtype the standard's type promotion gives these arrays, dtypes and Python scalars.

    Examples
    --------
    >>> import oocarray.array_api as xp
    >>> xp.result_type(xp.uint8, xp.int8), xp.result_type(xp.float32, 1.0)
    (dtype('int16'), dtype('float32'))
    """
    return promote(*arrays_and_dtypes)


def can_cast(from_: Any, to: Any, /) -> builtins.bool:
    """Whether the standard's promotion turns ``from_`` (an array or dtype) into ``to``."""
    source, target = dtype_of(from_), np.dtype(to)
    try:
        return builtins.bool(_promote_pair(source, target) == target)
    except TypeError:
        return False


_KINDS = {
    "bool": "b",
    "signed integer": "i",
    "unsigned integer": "u",
    "integral": "iu",
    "real floating": "f",
    "complex floating": "c",
    "numeric": "iufc",
}


def isdtype(dtype: Any, kind: Any) -> builtins.bool:
    """Whether ``dtype`` is ``kind``: a dtype, a kind name (``"integral"``...) or a tuple.

    Examples
    --------
    >>> import oocarray.array_api as xp
    >>> xp.isdtype(xp.int8, "integral"), xp.isdtype(xp.float32, ("bool", "complex floating"))
    (True, False)
    """
    if not isinstance(dtype, np.dtype):
        raise TypeError(f"isdtype takes a dtype, got {type(dtype).__name__}")
    if isinstance(kind, tuple):
        return any(isdtype(dtype, k) for k in kind)
    if isinstance(kind, str):
        if kind not in _KINDS:
            raise ValueError(f"isdtype: unknown kind {kind!r}; one of {sorted(_KINDS)}")
        return dtype.kind in _KINDS[kind]
    if isinstance(kind, np.dtype):
        return dtype == kind
    raise TypeError(f"isdtype: kind must be a dtype, a kind name or a tuple, got {kind!r}")


def finfo(type: Any, /) -> np.finfo[Any]:
    """Machine limits of a floating dtype (NumPy's ``finfo``: ``bits``, ``eps``, ``max``,
    ``min``, ``smallest_normal``, ``dtype``)."""
    dtype = dtype_of(type)
    if dtype.kind not in "fc":
        raise TypeError(f"finfo takes a floating-point dtype, got {dtype}")
    return np.finfo(dtype)


def iinfo(type: Any, /) -> np.iinfo[Any]:
    """Machine limits of an integer dtype (NumPy's ``iinfo``: ``bits``, ``max``, ``min``,
    ``dtype``)."""
    dtype = dtype_of(type)
    if dtype.kind not in "iu":
        raise TypeError(f"iinfo takes an integer dtype, got {dtype}")
    return np.iinfo(dtype)
