"""The Array API standard (2024.12) over chunked arrays and expressions: the functions behind
the public namespace ``oocarray.array_api``, one module per section of the standard.

Arrays of the namespace are :class:`~oocarray.ChunkedArray` and :class:`~oocarray.Expr`;
dtypes are NumPy's ``dtype`` objects.  Elementwise functions, creation, manipulation and
casting are lazy; statistics stream once over the chunks; sorting, sets, scans, products and
rearrangements go through NumPy's functions, which the compute layer answers out of core.
"""

import math

from oocarray._compute._namespace import _elementwise, linalg
from oocarray._compute._namespace._casting import astype
from oocarray._compute._namespace._creation import (
    arange,
    asarray,
    empty,
    empty_like,
    eye,
    from_dlpack,
    full,
    full_like,
    linspace,
    meshgrid,
    ones,
    ones_like,
    tril,
    triu,
    zeros,
    zeros_like,
)
from oocarray._compute._namespace._dtypes import (
    bool,
    can_cast,
    complex64,
    complex128,
    finfo,
    float32,
    float64,
    iinfo,
    int8,
    int16,
    int32,
    int64,
    isdtype,
    result_type,
    uint8,
    uint16,
    uint32,
    uint64,
)
from oocarray._compute._namespace._elementwise import clip
from oocarray._compute._namespace._info import __array_namespace_info__
from oocarray._compute._namespace._linalg import matmul, matrix_transpose, tensordot, vecdot
from oocarray._compute._namespace._manipulation import (
    broadcast_arrays,
    broadcast_to,
    concat,
    expand_dims,
    flip,
    moveaxis,
    permute_dims,
    repeat,
    reshape,
    roll,
    squeeze,
    stack,
    take,
    take_along_axis,
    tile,
    unstack,
)
from oocarray._compute._namespace._searching import (
    argmax,
    argmin,
    count_nonzero,
    nonzero,
    searchsorted,
    where,
)
from oocarray._compute._namespace._sets import (
    unique_all,
    unique_counts,
    unique_inverse,
    unique_values,
)
from oocarray._compute._namespace._sorting import argsort, sort
from oocarray._compute._namespace._statistics import (
    all,
    any,
    cumulative_prod,
    cumulative_sum,
    diff,
    max,
    mean,
    min,
    prod,
    std,
    sum,
    var,
)

__array_api_version__ = "2024.12"

e = math.e
inf = math.inf
nan = math.nan
pi = math.pi
newaxis = None

abs = _elementwise.FUNCTIONS["abs"]
acos = _elementwise.FUNCTIONS["acos"]
acosh = _elementwise.FUNCTIONS["acosh"]
add = _elementwise.FUNCTIONS["add"]
asin = _elementwise.FUNCTIONS["asin"]
asinh = _elementwise.FUNCTIONS["asinh"]
atan = _elementwise.FUNCTIONS["atan"]
atan2 = _elementwise.FUNCTIONS["atan2"]
atanh = _elementwise.FUNCTIONS["atanh"]
bitwise_and = _elementwise.FUNCTIONS["bitwise_and"]
bitwise_invert = _elementwise.FUNCTIONS["bitwise_invert"]
bitwise_left_shift = _elementwise.FUNCTIONS["bitwise_left_shift"]
bitwise_or = _elementwise.FUNCTIONS["bitwise_or"]
bitwise_right_shift = _elementwise.FUNCTIONS["bitwise_right_shift"]
bitwise_xor = _elementwise.FUNCTIONS["bitwise_xor"]
ceil = _elementwise.FUNCTIONS["ceil"]
conj = _elementwise.FUNCTIONS["conj"]
copysign = _elementwise.FUNCTIONS["copysign"]
cos = _elementwise.FUNCTIONS["cos"]
cosh = _elementwise.FUNCTIONS["cosh"]
divide = _elementwise.FUNCTIONS["divide"]
equal = _elementwise.FUNCTIONS["equal"]
exp = _elementwise.FUNCTIONS["exp"]
expm1 = _elementwise.FUNCTIONS["expm1"]
floor = _elementwise.FUNCTIONS["floor"]
floor_divide = _elementwise.FUNCTIONS["floor_divide"]
greater = _elementwise.FUNCTIONS["greater"]
greater_equal = _elementwise.FUNCTIONS["greater_equal"]
hypot = _elementwise.FUNCTIONS["hypot"]
imag = _elementwise.FUNCTIONS["imag"]
isfinite = _elementwise.FUNCTIONS["isfinite"]
isinf = _elementwise.FUNCTIONS["isinf"]
isnan = _elementwise.FUNCTIONS["isnan"]
less = _elementwise.FUNCTIONS["less"]
less_equal = _elementwise.FUNCTIONS["less_equal"]
log = _elementwise.FUNCTIONS["log"]
log10 = _elementwise.FUNCTIONS["log10"]
log1p = _elementwise.FUNCTIONS["log1p"]
log2 = _elementwise.FUNCTIONS["log2"]
logaddexp = _elementwise.FUNCTIONS["logaddexp"]
logical_and = _elementwise.FUNCTIONS["logical_and"]
logical_not = _elementwise.FUNCTIONS["logical_not"]
logical_or = _elementwise.FUNCTIONS["logical_or"]
logical_xor = _elementwise.FUNCTIONS["logical_xor"]
maximum = _elementwise.FUNCTIONS["maximum"]
minimum = _elementwise.FUNCTIONS["minimum"]
multiply = _elementwise.FUNCTIONS["multiply"]
negative = _elementwise.FUNCTIONS["negative"]
nextafter = _elementwise.FUNCTIONS["nextafter"]
not_equal = _elementwise.FUNCTIONS["not_equal"]
positive = _elementwise.FUNCTIONS["positive"]
pow = _elementwise.FUNCTIONS["pow"]
real = _elementwise.FUNCTIONS["real"]
reciprocal = _elementwise.FUNCTIONS["reciprocal"]
remainder = _elementwise.FUNCTIONS["remainder"]
round = _elementwise.FUNCTIONS["round"]
sign = _elementwise.FUNCTIONS["sign"]
signbit = _elementwise.FUNCTIONS["signbit"]
sin = _elementwise.FUNCTIONS["sin"]
sinh = _elementwise.FUNCTIONS["sinh"]
sqrt = _elementwise.FUNCTIONS["sqrt"]
square = _elementwise.FUNCTIONS["square"]
subtract = _elementwise.FUNCTIONS["subtract"]
tan = _elementwise.FUNCTIONS["tan"]
tanh = _elementwise.FUNCTIONS["tanh"]
trunc = _elementwise.FUNCTIONS["trunc"]

__all__ = [
    "__array_api_version__",
    "__array_namespace_info__",
    "abs",
    "acos",
    "acosh",
    "add",
    "all",
    "any",
    "arange",
    "argmax",
    "argmin",
    "argsort",
    "asarray",
    "asin",
    "asinh",
    "astype",
    "atan",
    "atan2",
    "atanh",
    "bitwise_and",
    "bitwise_invert",
    "bitwise_left_shift",
    "bitwise_or",
    "bitwise_right_shift",
    "bitwise_xor",
    "bool",
    "broadcast_arrays",
    "broadcast_to",
    "can_cast",
    "ceil",
    "clip",
    "complex64",
    "complex128",
    "concat",
    "conj",
    "copysign",
    "cos",
    "cosh",
    "count_nonzero",
    "cumulative_prod",
    "cumulative_sum",
    "diff",
    "divide",
    "e",
    "empty",
    "empty_like",
    "equal",
    "exp",
    "expand_dims",
    "expm1",
    "eye",
    "finfo",
    "flip",
    "float32",
    "float64",
    "floor",
    "floor_divide",
    "from_dlpack",
    "full",
    "full_like",
    "greater",
    "greater_equal",
    "hypot",
    "iinfo",
    "imag",
    "inf",
    "int8",
    "int16",
    "int32",
    "int64",
    "isdtype",
    "isfinite",
    "isinf",
    "isnan",
    "less",
    "less_equal",
    "linalg",
    "linspace",
    "log",
    "log1p",
    "log2",
    "log10",
    "logaddexp",
    "logical_and",
    "logical_not",
    "logical_or",
    "logical_xor",
    "matmul",
    "matrix_transpose",
    "max",
    "maximum",
    "mean",
    "meshgrid",
    "min",
    "minimum",
    "moveaxis",
    "multiply",
    "nan",
    "negative",
    "newaxis",
    "nextafter",
    "nonzero",
    "not_equal",
    "ones",
    "ones_like",
    "permute_dims",
    "pi",
    "positive",
    "pow",
    "prod",
    "real",
    "reciprocal",
    "remainder",
    "repeat",
    "reshape",
    "result_type",
    "roll",
    "round",
    "searchsorted",
    "sign",
    "signbit",
    "sin",
    "sinh",
    "sort",
    "sqrt",
    "square",
    "squeeze",
    "stack",
    "std",
    "subtract",
    "sum",
    "take",
    "take_along_axis",
    "tan",
    "tanh",
    "tensordot",
    "tile",
    "tril",
    "triu",
    "trunc",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "unique_all",
    "unique_counts",
    "unique_inverse",
    "unique_values",
    "unstack",
    "var",
    "vecdot",
    "where",
    "zeros",
    "zeros_like",
]
