"""Blocked linear algebra of chunked arrays: ``np.matmul`` (``x @ y``), ``np.dot``,
``np.tensordot``, ``np.vecdot``, ``np.matvec``, ``np.vecmat``, ``np.vdot``, ``np.inner``,
``np.outer`` and ``np.einsum`` of two operands.

Each call is checked as NumPy checks it (the same ``ValueError`` for shapes that do not fit) and
becomes a :class:`~._contraction.Contraction`, which ``_contract`` computes by the size of its
result: small results are ndarrays (``X.T @ X`` in one pass over ``X``), large ones lazy
expressions (one small operand) or temporary chunked arrays.  Operands may be chunked arrays,
expressions (``x.T``, ``x - m``) and NumPy arrays, mixed.

Examples
--------
>>> import numpy as np, oocarray as oc
>>> x = oc.from_numpy(np.arange(12.0).reshape(6, 2), chunks=(4, 1))
>>> x.T @ x
array([[220., 250.],
       [250., 286.]])
>>> np.einsum("ij,ik->jk", x, x)[0].tolist()
[220.0, 250.0]
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from numpy.lib.array_utils import normalize_axis_index

from oocarray._compute import _build
from oocarray._compute._contract import contract
from oocarray._compute._contraction import Contraction
from oocarray._compute._einsum import parse_einsum
from oocarray._compute._nodes import BlockReads, ExpandDims, Node, as_node
from oocarray._compute._rearrange import permute_dims

__all__ = ["FUNCTIONS"]

_MATMUL = "(n?,k),(k,m?)->(n?,m?)"


def _operand(value: Any) -> Node:
    node = as_node(value)
    if node.dtype.kind not in "biufc":
        raise TypeError(f"products of chunked arrays take numbers, not {node.dtype}")
    return node


def _refuse(function: str, kwargs: dict[str, Any]) -> None:
    """NumPy's keyword arguments a product does not take (``out=None`` is taken)."""
    given = sorted(k for k, v in kwargs.items() if not (k == "out" and v is None))
    if given:
        raise TypeError(
            f"{function}({', '.join(f'{k}=' for k in given)}) is not supported on chunked "
            "arrays: cast the operands with .astype(...), and write the result with "
            "to_zarr(...) or assign it"
        )


def _probe_dtype(function: Callable[..., Any], a: Node, b: Node, ndims: tuple[int, int]) -> Any:
    """NumPy's result type of ``function`` on operands of these dtypes."""
    probe_a = np.ones((1,) * ndims[0], a.dtype)
    probe_b = np.ones((1,) * ndims[1], b.dtype)
    return np.asarray(function(probe_a, probe_b)).dtype


def _batch(
    function: str, signature: str, shapes: Sequence[tuple[int, ...]]
) -> tuple[list[tuple[str, ...]], tuple[str, ...], dict[str, int]]:
    """Labels for the loop (batch) axes of each operand, right-aligned and broadcast as a
    gufunc broadcasts them; NumPy's ValueError when they do not broadcast."""
    width = max(len(s) for s in shapes)
    names = tuple(f"batch{i}" for i in range(width))
    sizes: dict[str, int] = {}
    labels = []
    for shape in shapes:
        own = names[width - len(shape) :]
        labels.append(own)
        for label, n in zip(own, shape, strict=True):
            known = sizes.get(label, 1)
            if n != 1 and known not in (1, n):
                remapped = " ".join(f"({','.join(map(str, s))})" for s in shapes)
                raise ValueError(
                    f"{function}: operands could not be broadcast together with loop shapes "
                    f"{remapped} (gufunc signature {signature})"
                )
            sizes[label] = n if known == 1 else known
    return labels, names, sizes


def _core_mismatch(function: str, signature: str, operand: int, got: int, want: int) -> None:
    if got != want:
        raise ValueError(
            f"{function}: Input operand {operand} has a mismatch in its core dimension 0, with "
            f"gufunc signature {signature} (size {got} is different from {want})"
        )


def _too_few_dims(function: str, signature: str, operand: int, ndim: int, need: int) -> None:
    if ndim < need:
        raise ValueError(
            f"{function}: Input operand {operand} does not have enough dimensions (has {ndim}, "
            f"gufunc core with signature {signature} requires {need})"
        )


def matmul(x1: Any, x2: Any, /, **kwargs: Any) -> Any:
    """``x1 @ x2`` (``np.matmul``): 1-d and 2-d operands and stacks of matrices whose batch
    axes broadcast."""
    _refuse("np.matmul", kwargs)
    a, b = _operand(x1), _operand(x2)
    for i, node in enumerate((a, b)):
        _too_few_dims("matmul", _MATMUL, i, node.ndim, 1)
    k_b = b.shape[-2] if b.ndim > 1 else b.shape[0]
    _core_mismatch("matmul", _MATMUL, 1, k_b, a.shape[-1])
    batch_shapes = [a.shape[:-2], b.shape[:-2]]
    (batch_a, batch_b), names, sizes = _batch("matmul", _MATMUL, batch_shapes)
    a_labels = (*batch_a, "i", "k") if a.ndim > 1 else ("k",)
    b_labels = (*batch_b, "k", "j") if b.ndim > 1 else ("k",)
    out = (*names, *(("i",) if a.ndim > 1 else ()), *(("j",) if b.ndim > 1 else ()))
    sizes.update(k=a.shape[-1], i=a.shape[-2] if a.ndim > 1 else 1, j=b.shape[-1])
    dtype = _probe_dtype(np.matmul, a, b, (2, 2))
    return contract(a, b, _spec(a_labels, b_labels, out, sizes, dtype), "matmul")


def _spec(
    a_labels: Sequence[str],
    b_labels: Sequence[str],
    out: Sequence[str],
    sizes: dict[str, int],
    dtype: Any,
    conjugate_a: bool = False,
) -> Contraction:
    """A contraction; a batch label that only one operand has is that operand's free axis."""
    return Contraction(tuple(a_labels), tuple(b_labels), tuple(out), sizes, dtype, conjugate_a)


def _scalar_product(a: Node, b: Node) -> Any:
    """A product with a 0-d operand: an elementwise product (the 0-d one read as a number)."""

    def plain(node: Node) -> Any:
        if node.ndim:
            return node
        return np.asarray(node.evaluate((), BlockReads()))[()]

    if not a.ndim and not b.ndim:
        return np.multiply(plain(a), plain(b))
    return _build.elementwise(np.multiply, plain(a), plain(b), name="multiply")


def tensordot(a: Any, b: Any, axes: Any = 2) -> Any:
    """``np.tensordot``: the sum over ``axes`` pairs of ``a`` and ``b``."""
    x, y = _operand(a), _operand(b)
    try:
        axes_a, axes_b = axes
    except TypeError:
        n = operator.index(axes)
        axes_a, axes_b = list(range(-n, 0)), list(range(n))
    axes_a = [axes_a] if isinstance(axes_a, int | np.integer) else list(axes_a)
    axes_b = [axes_b] if isinstance(axes_b, int | np.integer) else list(axes_b)
    if len(axes_a) != len(axes_b):
        raise ValueError("shape-mismatch for sum")
    pairs = [
        (normalize_axis_index(i, x.ndim), normalize_axis_index(j, y.ndim))
        for i, j in zip(axes_a, axes_b, strict=True)
    ]
    if any(x.shape[i] != y.shape[j] for i, j in pairs):
        raise ValueError("shape-mismatch for sum")
    return _paired(x, y, pairs, np.dot, "tensordot")


def _paired(
    x: Node,
    y: Node,
    pairs: Sequence[tuple[int, int]],
    probe: Callable[..., Any],
    name: str,
    conjugate_a: bool = False,
) -> Any:
    """The sum over paired axes of ``x`` and ``y``; the other axes of ``x`` then of ``y``."""
    a_labels = [f"a{i}" for i in range(x.ndim)]
    b_labels = [f"b{j}" for j in range(y.ndim)]
    sizes = dict(zip(a_labels, x.shape, strict=True))
    sizes.update(zip(b_labels, y.shape, strict=True))
    for number, (i, j) in enumerate(pairs):
        a_labels[i] = b_labels[j] = f"s{number}"
        sizes[f"s{number}"] = x.shape[i]
    out = [label for label in a_labels if label.startswith("a")] + [
        label for label in b_labels if label.startswith("b")
    ]
    dtype = _probe_dtype(probe, x, y, (2, 2)) if probe is np.dot else probe(x, y)
    return contract(x, y, _spec(a_labels, b_labels, out, sizes, dtype, conjugate_a), name)


def dot(a: Any, b: Any, out: Any = None) -> Any:
    """``np.dot``: the sum over the last axis of ``a`` and the second-to-last of ``b``."""
    _refuse("np.dot", {"out": out})
    x, y = _operand(a), _operand(b)
    if not x.ndim or not y.ndim:
        return _scalar_product(x, y)
    j = max(0, y.ndim - 2)
    if x.shape[-1] != y.shape[j]:
        raise ValueError(
            f"shapes {x.shape} and {y.shape} not aligned: {x.shape[-1]} (dim {x.ndim - 1}) != "
            f"{y.shape[j]} (dim {j})"
        )
    return _paired(x, y, [(x.ndim - 1, j)], np.dot, "dot")


def inner(a: Any, b: Any) -> Any:
    """``np.inner``: the sum over the last axes of ``a`` and ``b``."""
    x, y = _operand(a), _operand(b)
    if not x.ndim or not y.ndim:
        return _scalar_product(x, y)
    if x.shape[-1] != y.shape[-1]:
        raise ValueError(
            f"shapes {x.shape} and {y.shape} not aligned: {x.shape[-1]} (dim {x.ndim - 1}) != "
            f"{y.shape[-1]} (dim {y.ndim - 1})"
        )
    return _paired(x, y, [(x.ndim - 1, y.ndim - 1)], np.dot, "inner")


def outer(a: Any, b: Any, out: Any = None) -> Any:
    """``np.outer`` of 0-d and 1-d operands."""
    _refuse("np.outer", {"out": out})
    x, y = _operand(a), _operand(b)
    if x.ndim > 1 or y.ndim > 1:
        raise TypeError(
            "np.outer of chunked arrays takes 1-d operands (it would flatten them): "
            "np.tensordot(a, b, axes=0) gives the same values with the operands' axes kept"
        )
    x = x if x.ndim else ExpandDims(x, 0)
    y = y if y.ndim else ExpandDims(y, 0)
    return _paired(x, y, [], np.dot, "outer")


def vdot(a: Any, b: Any) -> Any:
    """``np.vdot`` of 1-d operands: ``sum(conj(a) * b)``."""
    x, y = _operand(a), _operand(b)
    if x.ndim != 1 or y.ndim != 1:
        raise TypeError(
            "np.vdot of chunked arrays takes 1-d operands (it would flatten them): use "
            "np.vecdot(a, b, axis=...) or np.tensordot(np.conj(a), b, axes=a.ndim)"
        )
    if x.shape != y.shape:
        raise ValueError("cannot reshape array: vdot's operands differ in length")
    return _paired(x, y, [(0, 0)], lambda p, q: np.vdot(_one(p), _one(q)).dtype, "vdot", True)


def _one(node: Node) -> np.ndarray:
    return np.ones(1, node.dtype)


def _vector_gufunc(name: str, signature: str, x1: Any, x2: Any, kwargs: dict[str, Any]) -> Any:
    """``np.vecdot``, ``np.matvec`` and ``np.vecmat`` (complex: the vector conjugated, except
    matvec's): their core axes last, the others broadcast."""
    axis = kwargs.pop("axis", None)
    if axis is not None and name != "vecdot":
        kwargs["axis"] = axis
    _refuse(f"np.{name}", kwargs)
    a, b = _operand(x1), _operand(x2)
    core = {"vecdot": (1, 1), "matvec": (2, 1), "vecmat": (1, 2)}[name]
    for i, (node, need) in enumerate(zip((a, b), core, strict=True)):
        _too_few_dims(name, signature, i, node.ndim, need)
    if axis is not None:  # vecdot's core axis moved last on both sides
        a = _moved_last(a, axis)
        b = _moved_last(b, axis)
    k_a = a.shape[-1]
    k_b = b.shape[-2] if name == "vecmat" else b.shape[-1]
    _core_mismatch(name, signature, 1, k_b, k_a)
    (batch_a, batch_b), names, sizes = _batch(
        name, signature, [a.shape[: a.ndim - core[0]], b.shape[: b.ndim - core[1]]]
    )
    a_labels = (*batch_a, *(("i",) if core[0] == 2 else ()), "k")
    b_labels = (*batch_b, "k", *(("j",) if core[1] == 2 else ()))
    out = (*names, *(("i",) if core[0] == 2 else ()), *(("j",) if core[1] == 2 else ()))
    sizes.update(k=k_a, i=a.shape[-2] if core[0] == 2 else 1, j=b.shape[-1])
    function = getattr(np, name)
    dtype = np.asarray(
        function(np.ones((1,) * core[0], a.dtype), np.ones((1,) * core[1], b.dtype))
    ).dtype
    spec = _spec(a_labels, b_labels, out, sizes, dtype, conjugate_a=name != "matvec")
    return contract(a, b, spec, name)


def _moved_last(node: Node, axis: Any) -> Node:
    axis = normalize_axis_index(operator.index(axis), node.ndim)
    order = [i for i in range(node.ndim) if i != axis] + [axis]
    return permute_dims(node, order)


def einsum(*operands: Any, **kwargs: Any) -> Any:
    """``np.einsum`` of two operands whose subscripts make a product: each label in one
    operand at most once; a label not in the output is in both operands (summed over)."""
    kwargs.pop("optimize", None)
    _refuse("np.einsum", kwargs)
    if not operands or not isinstance(operands[0], str):
        raise TypeError(
            "np.einsum of chunked arrays takes its subscripts as a string, as in "
            "np.einsum('ij,jk->ik', a, b)"
        )
    arrays = [_operand(o) for o in operands[1:]]
    a_labels, b_labels, out, sizes = parse_einsum(operands[0], [x.shape for x in arrays])
    a, b = arrays
    probe_a = np.ones((1,) * a.ndim, a.dtype)
    probe_b = np.ones((1,) * b.ndim, b.dtype)
    dtype = np.asarray(np.einsum(operands[0], probe_a, probe_b)).dtype
    return contract(a, b, _spec(a_labels, b_labels, out, sizes, dtype), "einsum")


FUNCTIONS: dict[Any, Callable[..., Any]] = {
    np.matmul: matmul,
    np.dot: dot,
    np.tensordot: tensordot,
    np.inner: inner,
    np.outer: outer,
    np.vdot: vdot,
    np.einsum: einsum,
    np.vecdot: lambda x1, x2, /, **kw: _vector_gufunc("vecdot", "(n),(n)->()", x1, x2, kw),
}
if hasattr(np, "matvec"):  # NumPy 2.2
    FUNCTIONS[np.matvec] = lambda x1, x2, /, **kw: _vector_gufunc(
        "matvec", "(m,n),(n)->(m)", x1, x2, kw
    )
    FUNCTIONS[np.vecmat] = lambda x1, x2, /, **kw: _vector_gufunc(
        "vecmat", "(n),(n,m)->(m)", x1, x2, kw
    )
