"""Checked by mypy (``tests/typing/test_types.py``), never run: what the reductions of chunked
arrays and expressions are typed to return.  ``compute=False`` gives the lazy type."""

from __future__ import annotations

from typing import Any, assert_type

import oocarray as oc


def reductions_of_a_chunked_array(x: oc.ChunkedArray, flag: bool) -> None:
    assert_type(x.sum(compute=False), oc.LazyResult)
    assert_type(x.mean(axis=0, compute=False), oc.LazyResult)
    assert_type(x.std(0, None, 1, compute=False), oc.LazyResult)
    assert_type(x.var(ddof=1, compute=False, progress=False), oc.LazyResult)
    assert_type(x.min(compute=False), oc.LazyResult)
    assert_type(x.argmax(axis=1, keepdims=True, compute=False), oc.LazyResult)
    assert_type(x.count_nonzero(compute=False), oc.LazyResult)
    assert_type(x.sum(), Any)
    assert_type(x.max(axis=0, compute=True), Any)
    assert_type(x.prod(None, None, False, flag), Any)  # a bool not known: either


def reductions_of_an_expression(x: oc.ChunkedArray) -> None:
    z = (x - 1.5) * 2
    assert_type(z, oc.Expr)
    assert_type(z.any(compute=False), oc.LazyResult)
    assert_type(z.all(), Any)
    assert_type(oc.compute(z.mean(compute=False), x.max(compute=False)), tuple[Any, ...])


def constructors_give_chunked_arrays(path: str) -> None:
    assert_type(oc.open(path), oc.ChunkedArray)
    assert_type(oc.create(path, (4,), "f8"), oc.ChunkedArray)
    assert_type(oc.temp((4,), "f8"), oc.ChunkedArray)
    assert_type(oc.from_numpy([1.0, 2.0]), oc.ChunkedArray)
    assert_type(oc.open(path).to_zarr(path), oc.ChunkedArray)
