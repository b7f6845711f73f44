"""Fusing an expression into one numexpr kernel per block.

NumPy evaluates ``(x - m) / s`` one operation at a time, each a full pass over the block with a
temporary as large as the block.  numexpr compiles the whole expression and runs it in
cache-sized pieces, so the block is read once and no temporary leaves the cache; it is the
library made for exactly this.  An expression is fused when every node is an operation numexpr
has and every leaf is of a type it computes in; Python scalars are given the dtype NumPy's own
rules (NEP 50) give them against the other operand, and a probe on one element checks that
numexpr's result type is NumPy's.  Anything else is evaluated by NumPy, and so is everything
where NumPy measured faster (:func:`_worth_fusing`): with the workspace taking the allocator
out of NumPy's temporaries, fusing pays only for chains of 64-bit arithmetic.
"""

from __future__ import annotations

import warnings
from types import ModuleType
from typing import Any

import numpy as np

from oocarray._compute._nodes import Apply, BlockReads, Constant, Node

__all__ = ["ENABLED", "Kernel", "kernel_for"]

# Benchmarks turn fusing off to measure what it buys.
ENABLED = True


def _numexpr() -> ModuleType:
    """numexpr, imported on first use: importing it adds ``expm1x`` to NumPy's namespace
    (numexpr 2.14), which ``import oocarray`` alone should not do."""
    import importlib

    return importlib.import_module("numexpr")


Region = tuple[slice, ...]

_INFIX = {
    np.add: "+",
    np.subtract: "-",
    np.multiply: "*",
    np.true_divide: "/",
    np.power: "**",
    np.less: "<",
    np.less_equal: "<=",
    np.greater: ">",
    np.greater_equal: ">=",
    np.equal: "==",
    np.not_equal: "!=",
    np.logical_and: "&",
    np.logical_or: "|",
}
_CALLS = {
    np.sqrt: "sqrt",
    np.exp: "exp",
    np.expm1: "expm1",
    np.log: "log",
    np.log10: "log10",
    np.log1p: "log1p",
    np.sin: "sin",
    np.cos: "cos",
    np.tan: "tan",
    np.arcsin: "arcsin",
    np.arccos: "arccos",
    np.arctan: "arctan",
    np.sinh: "sinh",
    np.cosh: "cosh",
    np.tanh: "tanh",
    np.arctan2: "arctan2",
    np.absolute: "abs",
    np.where: "where",
}
_PREFIX = {np.negative: "-", np.logical_not: "~"}
_TYPES = {
    np.dtype(t) for t in (np.bool_, np.int32, np.int64, np.float32, np.float64, np.complex128)
}


class NotFusable(Exception):
    """The expression has a node or a type numexpr does not handle."""


class Kernel:
    """One numexpr program for an expression, with the leaves it reads."""

    def __init__(self, expr: Node) -> None:
        self.expr = expr
        self.leaves: list[Node] = []
        self.constants: dict[str, Any] = {}
        self.text = self._text(expr)
        self._check_types()

    def _leaf(self, node: Node) -> str:
        if node.dtype not in _TYPES:
            raise NotFusable(f"numexpr does not compute in {node.dtype}")
        for i, leaf in enumerate(self.leaves):
            if leaf is node:
                return f"v{i}"
        self.leaves.append(node)
        return f"v{len(self.leaves) - 1}"

    def _constant(self, value: Any, against: list[Node]) -> str:
        """A scalar, typed as NumPy types it against the other operands."""
        others = [a.dtype for a in against]
        typed = np.asarray(value, dtype=np.result_type(*others, value) if others else None)
        if typed.dtype not in _TYPES:
            raise NotFusable(f"numexpr does not compute in {typed.dtype}")
        name = f"c{len(self.constants)}"
        self.constants[name] = typed
        return name

    def _text(self, node: Node) -> str:
        if isinstance(node, Constant):
            if node.is_scalar:
                raise NotFusable("a lone constant")
            return self._leaf(node)
        if not isinstance(node, Apply) or node.kwargs:
            return self._leaf(node)
        function = node.function
        if function not in _INFIX and function not in _CALLS and function not in _PREFIX:
            return self._leaf(node)
        arrays = [a for a in node.args if not (isinstance(a, Constant) and a.is_scalar)]
        if function is np.where:
            arrays = arrays[1:] if arrays and arrays[0] is node.args[0] else arrays
        parts = [
            self._constant(a.value, arrays)
            if isinstance(a, Constant) and a.is_scalar
            else self._text(a)
            for a in node.args
        ]
        if function in _INFIX:
            return f"({parts[0]} {_INFIX[function]} {parts[1]})"
        if function in _PREFIX:
            return f"({_PREFIX[function]}{parts[0]})"
        return f"{_CALLS[function]}({', '.join(parts)})"

    def _check_types(self) -> None:
        probe = {f"v{i}": np.ones(1, leaf.dtype) for i, leaf in enumerate(self.leaves)}
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                result = _numexpr().evaluate(self.text, local_dict={**probe, **self.constants})
        except Exception as error:  # numexpr's own refusal of a type or an operation
            raise NotFusable(str(error)) from error
        if result.dtype != self.expr.dtype:
            raise NotFusable(f"numexpr computes {result.dtype} where NumPy gives {self.expr.dtype}")

    def evaluate(self, region: Region, reads: BlockReads) -> np.ndarray:
        values = {f"v{i}": leaf.evaluate(region, reads) for i, leaf in enumerate(self.leaves)}
        return np.asarray(_numexpr().evaluate(self.text, local_dict={**values, **self.constants}))


def _operations(expr: Node) -> int:
    count = 0
    stack = [expr]
    while stack:
        node = stack.pop()
        if isinstance(node, Apply):
            count += 1
        stack.extend(node.children())
    return count


def _worth_fusing(expr: Node, min_operations: int) -> bool:
    """Where numexpr beats NumPy ufuncs in a cyclic workspace (``python -m benchmarks --only
    FUSE``): chains of arithmetic on 64-bit values.  NumPy wins on 32-bit values (its SIMD
    loops take twice the items per instruction) and on every transcendental function (NumPy's
    are vectorised, numexpr's are not without Intel's VML: ``tanh`` was 8x slower)."""
    if _operations(expr) < min_operations or expr.dtype.itemsize < 8:
        return False
    stack = [expr]
    while stack:
        node = stack.pop()
        if isinstance(node, Apply) and node.function in _CALLS and node.function not in _CHEAP:
            return False
        stack.extend(node.children())
    return True


# Calls numexpr evaluates as fast as NumPy: no transcendental function behind them.
_CHEAP = {np.absolute, np.where}


def kernel_for(expr: Node, min_operations: int = 3) -> Kernel | None:
    """A numexpr kernel for ``expr``, or None when NumPy should evaluate it."""
    if not ENABLED or not _worth_fusing(expr, min_operations):
        return None
    try:
        return Kernel(expr)
    except NotFusable:
        return None
