"""dask's block-function calls (``blockwise``, ``map_blocks``, ``apply_gufunc``) as oocarray
:class:`~._blockwise.Blockwise` nodes, with dask's meaning of each argument.

xarray calls these through the chunk manager with dask's signatures
(``xarray/namedarray/daskmanager.py``); the results are lazy ``OOCLazyArray`` objects that
oocarray's engine evaluates block by block.  Every function sees the blocks dask would give
it: an input's block along each axis the output keeps, the whole axis along the others.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable, Hashable, Sequence
from typing import Any

import numpy as np

from oocarray._compute import ChunkedArray, Expr
from oocarray._compute._limits import require_memory
from oocarray._compute._nodes import Node, as_node
from oocarray._xarray._blockwise import Blockwise, Chunks, Operand
from oocarray._xarray._lazy import OOCLazyArray, regular_chunks, unwrap, wrap
from oocarray._xarray._missing import missing

__all__ = [
    "Fixed",
    "apply_gufunc",
    "blockwise",
    "is_lazy",
    "map_blocks",
    "node_of",
    "parse_signature",
]

# Keyword arguments dask takes for its graph (names, metadata) that mean nothing here.
_GRAPH_ONLY = ("name", "token", "meta", "align_arrays", "enforce_ndim")


def is_lazy(value: Any) -> bool:
    return isinstance(value, OOCLazyArray | ChunkedArray | Expr)


def node_of(value: Any) -> tuple[Node, Chunks]:
    """The tree of an oocarray array and the block sizes xarray sees for it."""
    lazy = wrap(unwrap(value))
    # _tree(): the compute layer's node of a ChunkedArray (itself) or Expr (its tree).
    return as_node(lazy.lazy._tree()), lazy.chunks


def _array_operand(value: Any) -> tuple[Any, Chunks] | None:
    """(tree or ndarray, its block sizes) for an array argument; None for anything else."""
    if is_lazy(value):
        return node_of(value)
    if isinstance(value, _CoreWhole | Fixed):
        return value.node, value.chunks
    if isinstance(value, np.ndarray):
        return value, regular_chunks(value.shape, value.shape)
    return None


def _sample(value: Any) -> Any:
    if isinstance(value, Node | np.ndarray):
        return np.ones((1,) * value.ndim, value.dtype)
    return value


def infer_dtype(function: Callable[..., Any], args: Sequence[Any], kwargs: dict[str, Any]) -> Any:
    """The dtype ``function`` returns, from a call on one-element arrays (as dask infers it)."""
    try:
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return np.asarray(function(*(_sample(a) for a in args), **kwargs)).dtype
    except Exception as error:
        name = getattr(function, "__name__", "the function")
        raise TypeError(
            f"could not infer the dtype {name} returns from a call on one-element blocks: "
            "give dtype="
        ) from error


def blockwise(
    function: Callable[..., Any],
    out_index: Sequence[Hashable],
    *pairs: Any,
    dtype: Any = None,
    adjust_chunks: dict[Hashable, Any] | None = None,
    new_axes: dict[Hashable, Any] | None = None,
    concatenate: bool | None = None,
    **kwargs: Any,
) -> OOCLazyArray:
    """dask's ``blockwise(func, out_ind, arr, ind, ...)``: arrays with their axis labels (None:
    passed as is); along a label the output drops, each call gets the whole axis (as dask's
    ``concatenate=True``, which oocarray always does)."""
    for key in _GRAPH_ONLY:
        kwargs.pop(key, None)
    if len(pairs) % 2:
        raise TypeError("blockwise takes arrays and their indices in pairs: arr, ind, ...")
    arguments = list(zip(pairs[::2], pairs[1::2], strict=True))
    label_chunks: dict[Hashable, tuple[int, ...]] = {}
    prepared: list[tuple[Any, tuple[Hashable, ...] | None, Chunks | None]] = []
    fixed = {id(v.node) for v, _ in arguments if isinstance(v, Fixed)}
    for value, index in arguments:
        found = None if index is None else _array_operand(value)
        if index is None or found is None:
            if index is not None:
                value = np.asarray(value)
                found = (value, regular_chunks(value.shape, value.shape))
            else:
                prepared.append((value, None, None))
                continue
        array, chunks = found
        labels = tuple(index)
        if len(labels) != array.ndim:
            raise ValueError(f"blockwise: index {labels} for an array of {array.ndim} dimensions")
        prepared.append((array, labels, chunks))
    # Block sizes per label: the oocarray arrays' first (NumPy arrays are one block each).
    for prefer_trees in (True, False):
        for item, item_labels, item_chunks in prepared:
            if item_labels is None or item_chunks is None:
                continue
            if isinstance(item, Node) != prefer_trees:
                continue
            for label, sizes in zip(item_labels, item_chunks, strict=True):
                if sum(sizes) > 1 and label not in label_chunks:
                    label_chunks[label] = sizes
    operands = []
    for item, item_labels, item_chunks in prepared:
        if item_labels is None or item_chunks is None:
            operands.append(Operand(item))
            continue
        aligned = tuple(
            label_chunks.get(label, sizes) if sum(sizes) > 1 else sizes
            for label, sizes in zip(item_labels, item_chunks, strict=True)
        )
        kept = item_chunks if id(item) in fixed else aligned
        operands.append(Operand(item, item_labels, kept))
    out_chunks = []
    for label in out_index:
        if new_axes and label in new_axes:
            size = new_axes[label]
            sizes = tuple(size) if isinstance(size, tuple | list) else (int(size),)
        else:
            sizes = label_chunks.get(label, (1,))
        if adjust_chunks and label in adjust_chunks:
            rule = adjust_chunks[label]
            if callable(rule):
                sizes = tuple(int(rule(s)) for s in sizes)
            elif isinstance(rule, tuple | list):
                sizes = tuple(int(s) for s in rule)
            else:
                sizes = (int(rule),) * len(sizes)
        out_chunks.append(sizes)
    if dtype is None:
        dtype = infer_dtype(function, [o.value for o in operands], kwargs)
    name = getattr(function, "__name__", "function")
    node = Blockwise(
        function, operands, tuple(out_index), tuple(out_chunks), dtype, kwargs, name=name
    )
    return OOCLazyArray(Expr(node))


def _as_tuple(axes: int | Sequence[int] | None) -> tuple[int, ...]:
    if axes is None:
        return ()
    return (int(axes),) if isinstance(axes, int | np.integer) else tuple(int(a) for a in axes)


def map_blocks(
    function: Callable[..., Any],
    *args: Any,
    dtype: Any = None,
    chunks: Any = None,
    drop_axis: int | Sequence[int] | None = None,
    new_axis: int | Sequence[int] | None = None,
    **kwargs: Any,
) -> OOCLazyArray:
    """dask's ``map_blocks``: arrays aligned on their last axes; ``drop_axis`` axes are given
    whole to each call and leave the output, ``new_axis`` ones enter it (of ``chunks``' size,
    else 1); ``chunks`` gives the output's block sizes (one int per axis: every block)."""
    arrays = [a for a in args if is_lazy(a) or isinstance(a, np.ndarray)]
    if not arrays:
        raise TypeError("map_blocks needs at least one array argument")
    ndim = max(a.ndim for a in arrays)
    pairs: list[Any] = []
    for a in args:
        if is_lazy(a) or isinstance(a, np.ndarray):
            pairs += [a, tuple(range(ndim - a.ndim, ndim))]
        else:
            pairs += [a, None]
    dropped = {a % ndim for a in _as_tuple(drop_axis)}
    out_index: list[Hashable] = [i for i in range(ndim) if i not in dropped]
    added = sorted(_as_tuple(new_axis))
    for position in added:
        out_index.insert(position, f"new{position}")
    new_axes: dict[Hashable, Any] = {f"new{p}": 1 for p in added}
    adjust: dict[Hashable, Any] = {}
    if chunks is not None:
        if len(chunks) != len(out_index):
            raise ValueError(
                f"map_blocks: chunks has {len(chunks)} entries for an output of "
                f"{len(out_index)} dimensions"
            )
        for label, sizes in zip(out_index, chunks, strict=True):
            if label in new_axes:
                new_axes[label] = sizes
            else:
                adjust[label] = tuple(sizes) if isinstance(sizes, tuple | list) else int(sizes)
    return blockwise(
        function,
        tuple(out_index),
        *pairs,
        dtype=dtype,
        adjust_chunks=adjust,
        new_axes=new_axes,
        **kwargs,
    )


_GROUP = re.compile(r"\(([^()]*)\)")


def parse_signature(signature: str) -> tuple[list[tuple[str, ...]], list[tuple[str, ...]]]:
    """The core dimensions of each input and output of a gufunc signature such as
    ``"(i,j),(j)->(i)"``.  (NumPy's parser is private; the grammar is a few lines.)"""
    text = signature.replace(" ", "")
    if text.count("->") != 1:
        raise ValueError(f"not a gufunc signature: {signature!r}")
    left, right = text.split("->")

    def groups(part: str) -> list[tuple[str, ...]]:
        return [tuple(d for d in g.split(",") if d) for g in _GROUP.findall(part)]

    return groups(left), groups(right)


class _Pick:
    """One output of a function that returns several (picklable, unlike a lambda)."""

    def __init__(self, function: Callable[..., Any], which: int) -> None:
        self.function, self.which = function, which
        self.__name__ = getattr(function, "__name__", "function")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.function(*args, **kwargs)[self.which]


def apply_gufunc(
    function: Callable[..., Any],
    signature: str,
    *args: Any,
    axes: Any = None,
    keepdims: bool = False,
    output_dtypes: Any = None,
    output_sizes: dict[str, int] | None = None,
    vectorize: bool | None = None,
    **kwargs: Any,
) -> Any:
    """dask's ``apply_gufunc``: loop dimensions block by block, core dimensions (the last axes
    of each input) whole in every call; raises ``MemoryBudgetError`` when one call's blocks
    cannot fit the active manager's budget."""
    if axes is not None or keepdims:
        raise missing("apply_gufunc with axes= or keepdims=True")
    kwargs.pop("allow_rechunk", None)  # core dimensions are always read whole here
    inputs, outputs = parse_signature(signature)
    if len(inputs) != len(args):
        raise ValueError(f"signature {signature!r} takes {len(inputs)} inputs, got {len(args)}")
    dtypes = output_dtypes if isinstance(output_dtypes, list | tuple) else [output_dtypes]
    if vectorize:
        otypes = None if any(d is None for d in dtypes) else [np.dtype(d) for d in dtypes]
        function = np.vectorize(function, signature=signature, otypes=otypes)
    sizes: dict[str, int] = dict(output_sizes or {})
    loop_ndim = 0
    for arg, core in zip(args, inputs, strict=True):
        ndim = np.ndim(arg) if not is_lazy(arg) else len(arg.shape)
        if ndim < len(core):
            raise ValueError(f"an input has {ndim} dimensions, fewer than its core {core}")
        loop_ndim = max(loop_ndim, ndim - len(core))
        shape = arg.shape if hasattr(arg, "shape") else np.shape(arg)
        for label, n in zip(core, shape[ndim - len(core) :], strict=True):
            sizes.setdefault(label, int(n))
    pairs: list[Any] = []
    for arg, core in zip(args, inputs, strict=True):
        value = arg if (is_lazy(arg) or isinstance(arg, np.ndarray)) else np.asarray(arg)
        loops = len(value.shape) - len(core)
        labels = tuple(f"loop{i}" for i in range(loop_ndim - loops, loop_ndim)) + core
        pairs += [_whole_along(value, len(core)), labels]
    loop_labels = tuple(f"loop{i}" for i in range(loop_ndim))
    results = []
    for which, core in enumerate(outputs):
        missing_sizes = [label for label in core if label not in sizes]
        if missing_sizes:
            raise ValueError(f"apply_gufunc: output_sizes must give {missing_sizes}")
        dtype = dtypes[which] if which < len(dtypes) else None
        call = function if len(outputs) == 1 else _Pick(function, which)
        result = blockwise(
            call,
            loop_labels + core,
            *pairs,
            dtype=dtype,
            new_axes={label: sizes[label] for label in core},
            **kwargs,
        )
        _require_block_memory(result, pairs, loop_ndim)
        results.append(result)
    return results[0] if len(outputs) == 1 else tuple(results)


def _whole_along(value: Any, core_ndim: int) -> Any:
    """``value`` seen as one block along its last ``core_ndim`` axes."""
    if core_ndim == 0:
        return value
    if isinstance(value, np.ndarray):
        return value
    node, chunks = node_of(value)
    return _CoreWhole(node, chunks, core_ndim)


class Fixed:
    """An array operand of ``blockwise`` with the block sizes given here, never aligned to the
    other operands' (its blocks line up with theirs by count, as a scan's carries do)."""

    def __init__(self, node: Node | np.ndarray, chunks: Chunks) -> None:
        self.node, self.chunks = node, chunks
        self.shape, self.ndim, self.dtype = node.shape, node.ndim, node.dtype


class _CoreWhole:
    """An array operand whose core axes are one block each (read whole by every call)."""

    def __init__(self, node: Node, chunks: Chunks, core_ndim: int) -> None:
        keep = len(chunks) - core_ndim
        self.node = node
        self.chunks = (*chunks[:keep], *((sum(c),) for c in chunks[keep:]))
        self.shape, self.ndim, self.dtype = node.shape, node.ndim, node.dtype


def _require_block_memory(result: OOCLazyArray, pairs: Sequence[Any], loop_ndim: int) -> None:
    node = unwrap(result)._tree()
    assert isinstance(node, Blockwise)
    block_bytes = node.dtype.itemsize * int(np.prod([c[0] for c in node.out_chunks]))
    for operand in node.operands:
        if operand.chunks is not None:
            item = np.dtype(operand.value.dtype).itemsize
            block_bytes += item * int(np.prod([max(c) for c in operand.chunks]))
    require_memory(
        f"apply_gufunc({node.name})",
        block_bytes,
        smallest_bytes=block_bytes,
        hint="chunk the loop (non-core) dimensions smaller, so one call's blocks fit",
    )
