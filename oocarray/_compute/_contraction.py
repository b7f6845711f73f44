"""Products of two arrays as one lazy node: every NumPy product (``matmul``, ``dot``,
``tensordot``, ``vecdot``, ``outer``, ``inner``, two-operand ``einsum``) is a
:class:`Contraction`, einsum-like: each axis of each operand has a label; labels in the output
and in both operands are batch axes (broadcast where one operand has length 1), labels in the
output and one operand are that operand's free axes, and labels in both operands only are
summed over.

:class:`Product` evaluates a block of the output by reading, for the block's batch and free
ranges, the operands whole along the summed axes, in steps along the longest summed axis (whole
chunks of it, as many as fit ``Product.piece_bytes``), so a block holds bounded pieces
however long the contraction is.  Each step is one ``np.matmul`` of the pieces arranged as
``(batch..., free, summed) @ (batch..., summed, free)`` (BLAS for floats), accumulated in
float64 (complex128) for lower-precision floats.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from oocarray._compute._nodes import BlockReads, Node, Region

__all__ = ["Contraction", "Product", "accumulator_dtype", "combine"]


@dataclass(frozen=True, eq=False)
class Contraction:
    """``out[out_labels] = sum(a[a_labels] * b[b_labels])`` over the labels not in the output
    (each in both operands), with ``conj(a)`` where ``conjugate_a``; ``sizes``: each label's
    length in the output (an operand's axis of length 1 broadcasts to it)."""

    a_labels: tuple[str, ...]
    b_labels: tuple[str, ...]
    out_labels: tuple[str, ...]
    sizes: Mapping[str, int]
    dtype: np.dtype[Any]
    conjugate_a: bool = False

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.sizes[label] for label in self.out_labels)

    @property
    def summed(self) -> tuple[str, ...]:
        return tuple(label for label in self.a_labels if label not in self.out_labels)

    @property
    def batch(self) -> tuple[str, ...]:
        return tuple(
            label for label in self.out_labels if label in self.a_labels and label in self.b_labels
        )

    @property
    def free_a(self) -> tuple[str, ...]:
        return tuple(
            label
            for label in self.out_labels
            if label in self.a_labels and label not in self.b_labels
        )

    @property
    def free_b(self) -> tuple[str, ...]:
        return tuple(
            label
            for label in self.out_labels
            if label in self.b_labels and label not in self.a_labels
        )


def accumulator_dtype(dtype: np.dtype[Any]) -> np.dtype[Any]:
    """Partial products of lower-precision floats are added in double precision; integers and
    booleans in their own type (integer sums wrap as NumPy's do, in any order)."""
    if dtype.kind == "f" and dtype.itemsize < 8:
        return np.dtype(np.float64)
    if dtype.kind == "c" and dtype.itemsize < 16:
        return np.dtype(np.complex128)
    return dtype


def combine(total: np.ndarray | None, part: np.ndarray, acc: np.dtype[Any]) -> np.ndarray:
    """``total + part`` in the accumulator's type (``or`` for booleans, as NumPy's products)."""
    if total is None:
        return part.astype(acc, copy=True)
    if acc.kind == "b":
        np.logical_or(total, part, out=total)
    else:
        np.add(total, part, out=total, casting="unsafe")
    return total


class Product(Node):
    """The lazy result of a :class:`Contraction` of two expressions."""

    calls_blas = True

    def __init__(self, a: Node, b: Node, spec: Contraction, piece_bytes: int) -> None:
        self.a, self.b, self.spec = a, b, spec
        self.shape = spec.shape
        self.dtype = spec.dtype
        self.piece_bytes = piece_bytes
        summed = spec.summed
        self.step_label = max(summed, key=lambda label: spec.sizes[label]) if summed else None
        self.step_chunk = self._step_chunk()
        current = (*spec.batch, *spec.free_a, *spec.free_b)
        self.order = tuple(current.index(label) for label in spec.out_labels)

    def children(self) -> Sequence[Node]:
        return (self.a, self.b)

    def __repr__(self) -> str:
        s = self.spec
        return f"Product({''.join(s.a_labels)},{''.join(s.b_labels)}->{''.join(s.out_labels)})"

    def _chunk_of(self, label: str) -> int | None:
        """The chunk length of ``label``'s axis in the first operand read in chunks."""
        for node, labels in ((self.a, self.spec.a_labels), (self.b, self.spec.b_labels)):
            chunks = node.chunks()
            if chunks is not None and label in labels:
                axis = labels.index(label)
                if node.shape[axis] == self.spec.sizes[label]:
                    return max(1, chunks[axis])
        return None

    def _step_chunk(self) -> int:
        if self.step_label is None:
            return 1
        return self._chunk_of(self.step_label) or 1

    def chunks(self) -> tuple[int, ...] | None:
        found = [self._chunk_of(label) for label in self.spec.out_labels]
        if all(c is None for c in found):
            return None
        sizes = self.spec.shape
        return tuple(n if c is None else c for c, n in zip(found, sizes, strict=True))

    def _per_step_unit(self, region_sizes: Mapping[str, int]) -> int:
        """Elements of the operands' pieces per unit of the summed axis a step reads."""
        return sum(
            math.prod(
                region_sizes.get(label, self.spec.sizes[label])
                for label in labels
                if label != self.step_label
            )
            for labels in (self.spec.a_labels, self.spec.b_labels)
        )

    @property
    def _itemsize(self) -> int:
        return max(self.a.dtype.itemsize, self.b.dtype.itemsize, self.dtype.itemsize)

    def step_length(self, region_sizes: Mapping[str, int]) -> int:
        """How much of the summed axis one step reads: whole chunks of it, as many as keep
        the operands' pieces within ``piece_bytes`` (at least one chunk)."""
        if self.step_label is None:
            return 1
        per_unit = self._per_step_unit(region_sizes)
        units = max(1, self.piece_bytes // max(1, per_unit * self._itemsize))
        chunk = self.step_chunk
        total = self.spec.sizes[self.step_label]
        return max(1, min(total, max(chunk, units // chunk * chunk)))

    def parts(self, region: Region) -> list[Region]:
        """``region`` cut along its longest axis where even a step of one chunk of the summed
        axis would read more than ``piece_bytes`` for it (the engine sizes blocks by
        their output, not by the rows of the operands behind each output element)."""
        labels = self.spec.out_labels
        sizes = {label: s.stop - s.start for label, s in zip(labels, region, strict=True)}
        if not sizes:
            return [region]
        step = min(self.step_chunk, self.spec.sizes[self.step_label]) if self.step_label else 1
        need = max(1, step) * self._per_step_unit(sizes) * self._itemsize
        if need <= self.piece_bytes:
            return [region]
        axis = max(range(len(region)), key=lambda i: region[i].stop - region[i].start)
        whole = region[axis].stop - region[axis].start
        length = max(1, math.ceil(whole / math.ceil(need / self.piece_bytes)))
        chunk = self._chunk_of(self.spec.out_labels[axis])
        if chunk is not None and chunk <= length:
            length = length // chunk * chunk  # whole chunks where they fit
        start = region[axis].start
        return [
            (*region[:axis], slice(lo, min(lo + length, start + whole)), *region[axis + 1 :])
            for lo in range(start, start + whole, length)
        ]

    def evaluate(self, region: Region, reads: BlockReads) -> np.ndarray:
        parts = self.parts(region)
        if len(parts) == 1:
            return self._evaluate_part(region)
        out = np.empty(tuple(s.stop - s.start for s in region), self.dtype)
        for part in parts:
            pairs = zip(part, region, strict=True)
            local = tuple(slice(p.start - r.start, p.stop - r.start) for p, r in pairs)
            out[local] = self._evaluate_part(part)
        return out

    def _evaluate_part(self, region: Region) -> np.ndarray:
        spec = self.spec
        own = dict(zip(spec.out_labels, region, strict=True))
        region_sizes = {label: s.stop - s.start for label, s in own.items()}
        total: np.ndarray | None = None
        acc = accumulator_dtype(self.dtype)
        if self.step_label is None:
            steps = [(0, 0)]
        else:
            length = spec.sizes[self.step_label]
            step = self.step_length(region_sizes)
            steps = [(lo, min(lo + step, length)) for lo in range(0, length, step)] or [(0, 0)]
        for lo, hi in steps:
            # A fresh cache per step: the engine's would keep every step's reads to the end.
            local = BlockReads()
            left = self._piece(self.a, spec.a_labels, own, (lo, hi), local, left=True)
            right = self._piece(self.b, spec.b_labels, own, (lo, hi), local, left=False)
            local.clear()
            total = combine(total, np.matmul(left, right), acc)
            del left, right
        assert total is not None
        batch = tuple(region_sizes[label] for label in spec.batch)
        free = tuple(region_sizes[label] for label in (*spec.free_a, *spec.free_b))
        total = np.broadcast_to(total, (*batch, *total.shape[-2:])).reshape((*batch, *free))
        return total.transpose(self.order).astype(self.dtype, copy=False)

    def _piece(
        self,
        node: Node,
        labels: tuple[str, ...],
        own: Mapping[str, slice],
        step: tuple[int, int],
        reads: BlockReads,
        left: bool,
    ) -> np.ndarray:
        """An operand's values for a block and a step, as a stack of matrices: ``(batch...,
        free, summed)`` on the left, ``(batch..., summed, free)`` on the right."""
        spec = self.spec
        region: list[slice] = []
        for axis, label in enumerate(labels):
            n = node.shape[axis]
            if n == 1 and spec.sizes[label] != 1:
                region.append(slice(0, 1))  # broadcast
            elif label in own:
                region.append(own[label])
            elif label == self.step_label:
                region.append(slice(*step))
            else:
                region.append(slice(0, n))
        shape = tuple(s.stop - s.start for s in region)
        values = np.broadcast_to(node.evaluate(tuple(region), reads), shape)
        if left and spec.conjugate_a and values.dtype.kind == "c":
            values = np.conj(values)
        summed = spec.summed
        summed_sizes = []
        for label in summed:
            # An einsum operand's length-1 summed axis broadcasts against the other's.
            size = step[1] - step[0] if label == self.step_label else spec.sizes[label]
            summed_sizes.append(size)
        full = tuple(
            summed_sizes[summed.index(label)] if label in summed else n
            for label, n in zip(labels, shape, strict=True)
        )
        values = np.broadcast_to(values, full)
        free = spec.free_a if left else spec.free_b
        batch = list(spec.batch)
        order = [*batch, *free, *summed] if left else [*batch, *summed, *free]
        values = values.transpose([labels.index(label) for label in order])
        batch_shape = values.shape[: len(batch)]
        free_size = math.prod(full[labels.index(label)] for label in free)
        summed_size = math.prod(summed_sizes)
        if left:
            return values.reshape(*batch_shape, free_size, summed_size)
        return values.reshape(*batch_shape, summed_size, free_size)
