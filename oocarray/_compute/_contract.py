"""How a product of chunked arrays is computed, chosen by the size of its result.

- **Small result** (it fits a quarter of :func:`working_bytes`): an ndarray.  A product summed
  over one axis with at most one free axis per operand (``X.T @ X``, ``X.T @ Y``, ``v @ w``,
  ``A @ v`` with long rows) streams once over that axis: each block of rows of the two operands
  side by side gives ``left.T @ right`` (one BLAS call; ``block.T @ block`` for a Gram matrix,
  which NumPy hands to ``syrk``), partials added in block order, in float64 for float32 data.
  Any other small product (batched, several summed axes) is its :class:`Product` node evaluated
  into an ndarray.
- **Large result, one operand small** (``(N, k) @ (k, m)`` with a small right side): the
  small operand is loaded once and the result is a lazy :class:`Product`: each block is a block
  of rows of the large operand times the small one.
- **Large result, both operands large**: the :class:`Product` is written to a temporary chunked
  array, output block by output block, each summed in steps along the contraction.

Every plan checks its memory against the active budget (:func:`require_memory`) before it
reads anything.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from oocarray._compute._contraction import Contraction, Product, accumulator_dtype, combine
from oocarray._compute._engine import StoreTarget, evaluate
from oocarray._compute._limits import require_memory, working_bytes
from oocarray._compute._nodes import (
    BlockReads,
    Concat,
    Constant,
    ExpandDims,
    Node,
    input_identity,
)
from oocarray._compute._rearrange import permute_dims
from oocarray._compute._reduce import Reduction
from oocarray._compute._temporaries import temporary

__all__ = ["contract"]

Region = tuple[slice, ...]

# A step of a product reads at most this much of its operands (a sixteenth of a tighter
# budget; at least one chunk of the summed axis whatever the budget).
MAX_PIECE_BYTES = 32 << 20
RESULT_CHUNK_BYTES = 4 << 20
HINT = "rechunk the operands into smaller chunks, or give the manager more memory"


def contract(a: Node, b: Node, spec: Contraction, name: str) -> Any:
    """The product ``spec`` of ``a`` and ``b``: an ndarray (a NumPy scalar for 0-d) when it is
    small, else a lazy node or a temporary chunked array (see the module's docstring)."""
    budget = working_bytes()
    result_bytes = math.prod(spec.shape) * accumulator_dtype(spec.dtype).itemsize
    piece_bytes = min(MAX_PIECE_BYTES, max(1, budget // 16))
    if result_bytes <= budget // 4:
        streamed = _streamed(a, b, spec, name, budget)
        if streamed is not None:
            return streamed
        product = Product(a, b, spec, piece_bytes)
        _check(product, name, result_bytes)
        return _into_ndarray(product, name)
    a, b = _loaded_if_small(a, budget), _loaded_if_small(b, budget)
    product = Product(a, b, spec, piece_bytes)
    _check(product, name, 0)
    if isinstance(a, Constant) or isinstance(b, Constant):
        return product
    out = temporary(product.shape, product.dtype, chunks=_result_chunks(product, budget))
    grid = out.shards or out.chunks
    evaluate([], [StoreTarget(product, out.__setitem__, grid)], True, name)
    return out


def _result_chunks(product: Product, budget: int) -> tuple[int, ...]:
    """Chunks of a product written to a temporary: its blocks' preferred shape (the operands'
    chunks), grown from the last axis to about :data:`RESULT_CHUNK_BYTES` (less under a tight
    budget) so a product of finely chunked operands is not written as many tiny files."""
    shape = product.shape
    chunks = list(product.chunks() or shape)
    target = max(1, min(RESULT_CHUNK_BYTES, budget // 16) // product.dtype.itemsize)
    for axis in reversed(range(len(shape))):
        cell = math.prod(chunks)
        if cell >= target:
            break
        grow = max(1, target // max(1, cell))
        chunks[axis] = min(shape[axis], chunks[axis] * grow)
    return tuple(max(1, c) for c in chunks)


def _loaded_if_small(node: Node, budget: int) -> Node:
    """An operand small enough to hold (an eighth of the budget) as a constant, read once
    rather than once per output block."""
    if isinstance(node, Constant) or node.nbytes > budget // 8:
        return node
    region = tuple(slice(0, n) for n in node.shape)
    values = np.array(np.broadcast_to(node.evaluate(region, BlockReads()), node.shape))
    return Constant(values, node.shape)


def _check(product: Product, name: str, held_bytes: int) -> None:
    """Refuse a product whose smallest block does not fit: one chunk of output (its value,
    accumulator and last partial) and one step of the operands."""
    chunks = product.chunks() or tuple(min(n, 1) for n in product.shape)
    cell = dict(zip(product.spec.out_labels, chunks, strict=True))
    out_elements = math.prod(chunks)
    acc = accumulator_dtype(product.dtype).itemsize
    step = product.step_length(cell) if product.step_label else 1
    per_unit = sum(
        math.prod(
            cell.get(label, product.spec.sizes[label])
            for label in labels
            if label != product.step_label
        )
        for labels in (product.spec.a_labels, product.spec.b_labels)
    )
    itemsize = max(product.a.dtype.itemsize, product.b.dtype.itemsize)
    peak = (
        held_bytes + out_elements * (2 * acc + product.dtype.itemsize) + step * per_unit * itemsize
    )
    require_memory(name, peak, smallest_bytes=peak, hint=HINT)


def _into_ndarray(product: Product, name: str) -> Any:
    out = np.zeros(product.shape, product.dtype)

    def write(region: Region, block: np.ndarray) -> None:
        out[region] = block

    evaluate([], [StoreTarget(product, write)], True, name)
    return out[()] if out.ndim == 0 else out


# -- one pass along the summed axis -------------------------------------------------------


def _rows(node: Node, labels: Sequence[str], summed: str) -> Node:
    """An operand as a (summed, free) matrix: its summed axis first, a vector made a column."""
    if len(labels) == 1:
        return ExpandDims(node, 1)
    return node if labels[0] == summed else permute_dims(node, (1, 0))


def _streamed(a: Node, b: Node, spec: Contraction, name: str, budget: int) -> Any:
    """The product by one pass along its summed axis, or None when it is not of that form,
    or its rows are wider than they are many, or a block of them would not fit half the budget
    (``A @ v`` of a wide ``A`` with short rows is better made a block of output at a time)."""
    summed = spec.summed
    if (
        len(summed) != 1
        or spec.batch
        or len(spec.free_a) > 1
        or len(spec.free_b) > 1
        or a.ndim != len(spec.free_a) + 1
        or b.ndim != len(spec.free_b) + 1
        or a.shape[spec.a_labels.index(summed[0])] != b.shape[spec.b_labels.index(summed[0])]
    ):
        return None
    left, right = _rows(a, spec.a_labels, summed[0]), _rows(b, spec.b_labels, summed[0])
    conjugated = spec.conjugate_a and left.dtype.kind == "c"
    same = input_identity(left) == input_identity(right) and not conjugated
    expr = _WholeRows(left if same else Concat([left, right], axis=1))
    rows = (expr.chunks() or (1,))[0]
    # The accumulator, two partials in flight and one block of rows read, joined and cast.
    acc_bytes = left.shape[1] * right.shape[1] * accumulator_dtype(spec.dtype).itemsize
    block_bytes = rows * expr.shape[1] * expr.dtype.itemsize * (1 if same else 3)
    peak = 3 * acc_bytes + block_bytes
    if left.shape[0] < expr.shape[1] or peak > budget // 2:
        return None
    require_memory(name, peak, smallest_bytes=peak, hint=HINT)
    reduction = StreamedProduct(name, expr, left.shape[1], same, spec)
    evaluate([reduction], [], True, name)
    return reduction.finish()


class _WholeRows(Node):
    """``part`` read in blocks of whole rows (a product needs every column of a row)."""

    def __init__(self, part: Node) -> None:
        self.part = part
        self.shape = part.shape
        self.dtype = part.dtype

    def children(self) -> Sequence[Node]:
        return (self.part,)

    def chunks(self) -> tuple[int, ...] | None:
        rows = None
        stack = [self.part]
        while stack and rows is None:  # the row chunks of the first chunked operand
            node = stack.pop(0)
            found = node.chunks() if node.ndim == 2 else None
            if found is not None and node.shape[0] == self.shape[0]:
                rows = found[0]
            stack.extend(node.children())
        return None if rows is None else (rows, self.shape[1])

    def evaluate(self, region: Region, reads: BlockReads) -> np.ndarray:
        return self.part.evaluate(region, reads)


class StreamedProduct(Reduction):
    """``left.T @ right`` summed over blocks of rows of ``[left, right]`` (or of ``left`` alone
    when both are the same array: a Gram matrix)."""

    calls_blas = True

    def __init__(self, name: str, expr: Node, width: int, same: bool, spec: Contraction) -> None:
        super().__init__(name, expr, (0,), keepdims=False)
        self.width, self.same, self.spec = width, same, spec
        self.acc_dtype = accumulator_dtype(spec.dtype)
        right_width = width if same else expr.shape[1] - width
        self.acc = np.zeros((width, right_width), self.acc_dtype)

    def partial(self, block: np.ndarray, region: Region) -> Any:
        if block.dtype == np.float16:  # no BLAS for half floats: float32 is faster and closer
            block = block.astype(np.float32)
        elif block.dtype != self.spec.dtype:
            block = block.astype(self.spec.dtype)
        left = block[:, : self.width]
        right = left if self.same else block[:, self.width :]
        if self.spec.conjugate_a and left.dtype.kind == "c":
            left = np.conj(left)
        return np.dot(left.T, right)

    def merge(self, partial: Any, region: Region) -> None:
        combine(self.acc, partial, self.acc_dtype)

    def finish(self) -> Any:
        spec = self.spec
        sizes = [spec.sizes[label] for label in (*spec.free_a, *spec.free_b)]
        result = self.acc.reshape(sizes)
        if spec.free_a and spec.free_b and spec.out_labels[0] == spec.free_b[0]:
            result = result.T
        result = result.astype(spec.dtype)
        return result[()] if result.ndim == 0 else result
