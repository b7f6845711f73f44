"""The standard's ``linalg`` extension (``oocarray.array_api.linalg``): the products,
``outer`` and ``vector_norm`` on chunked arrays; the factorisations and solvers, which need a
whole matrix in memory, raise ``NotImplementedError`` naming NumPy's function to use on a
loaded part."""

from __future__ import annotations

from oocarray._compute._namespace._linalg import (
    matmul,
    matrix_transpose,
    outer,
    tensordot,
    unsupported_linalg,
    vecdot,
    vector_norm,
)

cholesky = unsupported_linalg("cholesky")
cross = unsupported_linalg("cross")
det = unsupported_linalg("det")
diagonal = unsupported_linalg("diagonal")
eigh = unsupported_linalg("eigh")
eigvalsh = unsupported_linalg("eigvalsh")
inv = unsupported_linalg("inv")
matrix_norm = unsupported_linalg("matrix_norm")
matrix_power = unsupported_linalg("matrix_power")
matrix_rank = unsupported_linalg("matrix_rank")
pinv = unsupported_linalg("pinv")
qr = unsupported_linalg("qr")
slogdet = unsupported_linalg("slogdet")
solve = unsupported_linalg("solve")
svd = unsupported_linalg("svd")
svdvals = unsupported_linalg("svdvals")
trace = unsupported_linalg("trace")

__all__ = [
    "cholesky",
    "cross",
    "det",
    "diagonal",
    "eigh",
    "eigvalsh",
    "inv",
    "matmul",
    "matrix_norm",
    "matrix_power",
    "matrix_rank",
    "matrix_transpose",
    "outer",
    "pinv",
    "qr",
    "slogdet",
    "solve",
    "svd",
    "svdvals",
    "tensordot",
    "trace",
    "vecdot",
    "vector_norm",
]
