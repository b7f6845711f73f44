"""The trees behind lazy elementwise expressions over chunked arrays.

The public :class:`~oocarray.Expr` (``_compute._array``) holds one of these trees.  A tree's
leaves are stored arrays and NumPy values (scalars, or arrays
that broadcast to the expression's shape, such as per-column means); its inner nodes apply a
function elementwise.  Nothing is read until a block is evaluated: :meth:`Node.evaluate` takes a
region of the output and reads only that region of each chunked leaf, through a
:class:`BlockReads` that reads each leaf region once however often the tree (or several trees
evaluated together) uses it.

Result types are NumPy's own: a node's dtype is the dtype its function gives on empty inputs
of the leaves' dtypes, so Python scalars stay weak (NEP 50) exactly as in NumPy.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

from oocarray._storage import StoredArray

__all__ = [
    "Apply",
    "BlockReads",
    "Concat",
    "Constant",
    "ExpandDims",
    "Node",
    "Source",
    "as_node",
    "input_identity",
]

Region = tuple[slice, ...]


class BlockReads:
    """The reads of one block: each chunked leaf's region is read once."""

    def __init__(self) -> None:
        self._cache: dict[tuple[int, tuple[tuple[int, int], ...]], np.ndarray] = {}

    def read(self, array: StoredArray, region: Region) -> np.ndarray:
        key = (id(array), tuple((s.start, s.stop) for s in region))
        found = self._cache.get(key)
        if found is None:
            found = array[region]
            self._cache[key] = found
        return found

    def clear(self) -> None:
        self._cache.clear()


class Node:
    """A lazy array: shape and dtype known, values computed block by block on demand."""

    shape: tuple[int, ...]
    dtype: np.dtype[Any]
    # Whether evaluating this node itself calls BLAS (a pass of several workers then limits
    # BLAS to one thread each: see _blas.py).
    calls_blas = False

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    def children(self) -> Sequence[Node]:
        return ()

    def chunks(self) -> tuple[int, ...] | None:
        """The block shape this expression is best evaluated in (its first chunked input's
        chunks, in this expression's axes); None: no chunked input of this shape."""
        for child in self.children():
            if child.ndim == self.ndim:
                found = child.chunks()
                if found is not None:
                    return found
        return None

    def evaluate(self, region: Region, reads: BlockReads) -> np.ndarray:
        """The values of ``region`` (slices with step 1, one per axis), an array that broadcasts
        to the region's shape."""
        raise NotImplementedError

    def sources(self) -> Iterator[StoredArray]:
        """The chunked arrays this expression reads, each once."""
        seen: set[int] = set()
        stack: list[Node] = [self]
        while stack:
            node = stack.pop()
            if isinstance(node, Source) and id(node.array) not in seen:
                seen.add(id(node.array))
                yield node.array
            stack.extend(node.children())


class Source(Node):
    """A chunked array as a leaf."""

    def __init__(self, array: StoredArray) -> None:
        self.array = array
        self.shape = array.shape
        self.dtype = array.dtype

    def chunks(self) -> tuple[int, ...] | None:
        return tuple(self.array.chunks)

    def evaluate(self, region: Region, reads: BlockReads) -> np.ndarray:
        return reads.read(self.array, region)


class Constant(Node):
    """A NumPy value broadcast to the expression's shape (it is never copied to that shape)."""

    def __init__(self, value: Any, shape: tuple[int, ...]) -> None:
        self.value = np.asarray(value) if not np.isscalar(value) else value
        self.shape = shape
        self.dtype = np.asarray(value).dtype

    def evaluate(self, region: Region, reads: BlockReads) -> np.ndarray:
        value = self.value
        if not isinstance(value, np.ndarray) or value.ndim == 0:
            return value  # type: ignore[return-value]
        own = region[len(region) - value.ndim :]
        key = tuple(slice(0, 1) if n == 1 else s for n, s in zip(value.shape, own, strict=True))
        return value[key]

    @property
    def is_scalar(self) -> bool:
        return not isinstance(self.value, np.ndarray) or self.value.ndim == 0


class Apply(Node):
    """``function(*children)`` elementwise, with fixed keyword arguments."""

    def __init__(
        self,
        function: Callable[..., Any],
        args: Sequence[Node],
        shape: tuple[int, ...],
        dtype: np.dtype[Any],
        kwargs: dict[str, Any] | None = None,
        name: str | None = None,
    ) -> None:
        self.function = function
        self.args = tuple(args)
        self.kwargs = kwargs or {}
        self.shape = shape
        self.dtype = dtype
        self.name = name or getattr(function, "__name__", "function")

    def children(self) -> Sequence[Node]:
        return self.args

    def evaluate(self, region: Region, reads: BlockReads) -> np.ndarray:
        values = [arg.evaluate(region, reads) for arg in self.args]
        result = self.function(*values, **self.kwargs)
        return np.asarray(result)


class Concat(Node):
    """Expressions of equal shape but along ``axis`` joined end to end (``np.concatenate``)."""

    def __init__(self, parts: Sequence[Node], axis: int) -> None:
        self.parts = tuple(parts)
        self.axis = axis
        first = self.parts[0].shape
        length = sum(p.shape[axis] for p in self.parts)
        self.shape = (*first[:axis], length, *first[axis + 1 :])
        self.dtype = np.result_type(*(p.dtype for p in self.parts))
        self.offsets = np.cumsum([0] + [p.shape[axis] for p in self.parts]).tolist()

    def children(self) -> Sequence[Node]:
        return self.parts

    def evaluate(self, region: Region, reads: BlockReads) -> np.ndarray:
        want = region[self.axis]
        pieces = []
        for part, begin, end in zip(self.parts, self.offsets, self.offsets[1:], strict=False):
            lo, hi = max(want.start, begin), min(want.stop, end)
            if lo >= hi:
                continue
            local = (*region[: self.axis], slice(lo - begin, hi - begin), *region[self.axis + 1 :])
            block = part.evaluate(local, reads)
            shape = tuple(s.stop - s.start for s in local)
            pieces.append(np.broadcast_to(block, shape).astype(self.dtype, copy=False))
        return np.concatenate(pieces, axis=self.axis)


class ExpandDims(Node):
    """A new axis of length 1 at ``axis`` (``np.stack`` joins these)."""

    def __init__(self, part: Node, axis: int) -> None:
        self.part = part
        self.axis = axis
        self.shape = (*part.shape[:axis], 1, *part.shape[axis:])
        self.dtype = part.dtype

    def children(self) -> Sequence[Node]:
        return (self.part,)

    def chunks(self) -> tuple[int, ...] | None:
        found = self.part.chunks()
        return None if found is None else (*found[: self.axis], 1, *found[self.axis :])

    def evaluate(self, region: Region, reads: BlockReads) -> np.ndarray:
        inner = (*region[: self.axis], *region[self.axis + 1 :])
        block = self.part.evaluate(inner, reads)
        shape = tuple(s.stop - s.start for s in inner)
        return np.expand_dims(np.broadcast_to(block, shape), self.axis)


def as_node(value: Any, shape: tuple[int, ...] | None = None) -> Node:
    """An expression for a chunked array, an expression, or a NumPy value (a constant, broadcast
    to ``shape`` when given)."""
    if isinstance(value, Node):
        return value
    if isinstance(value, StoredArray):
        return Source(value)
    array = np.asarray(value)
    if array.dtype.hasobject:
        raise TypeError(
            "expressions over chunked arrays take numbers and NumPy arrays, not "
            f"{type(value).__name__}"
        )
    return Constant(value, shape if shape is not None else array.shape)


def input_identity(node: Node) -> tuple[str, int]:
    """What makes two expressions the same input: one chunked array (two Source leaves may
    wrap it), or one expression object."""
    return ("array", id(node.array)) if isinstance(node, Source) else ("node", id(node))
