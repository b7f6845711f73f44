"""Deferred reductions: kept lazy inside expressions, evaluated together, and reductions of
gathered rows (a groupby's groups) folded into one pass over their input."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import oocarray as oc
from oocarray._compute._deferred import Deferred, GatheredRows, defer, gathered_rows, resolve
from oocarray._compute._nodes import BlockReads
from oocarray._compute._reduction_kinds import make_reduction

RNG = np.random.default_rng(14)
VALUES = RNG.normal(size=(40, 6, 5))
VALUES[3, 2, 1] = np.nan  # the nan reductions skip it, the others propagate it


def _chunked() -> oc.ChunkedArray:
    return oc.from_numpy(VALUES, chunks=(7, 4, 5))


NAMES = ["sum", "nansum", "mean", "nanmean", "var", "nanstd", "min", "nanmax", "prod"]


@settings(deadline=None, max_examples=40)  # the machine's speed must not fail a test
@given(
    groups=st.lists(
        st.lists(st.integers(-40, 39), min_size=1, max_size=15), min_size=1, max_size=5
    ),
    name=st.sampled_from(NAMES),
    axis=st.sampled_from([0, (0, 2)]),
)
def test_reductions_of_groups_equal_numpy(groups: list[list[int]], name: str, axis: object) -> None:
    x = _chunked()
    nodes = [defer(name, np.take(x, g, axis=0)._tree(), axis=axis) for g in groups]
    with warnings.catch_warnings():  # all-NaN groups warn, as in NumPy
        warnings.simplefilter("ignore", RuntimeWarning)
        resolve(nodes, progress=False)
        expected_values = [getattr(np, name)(VALUES[g], axis=axis) for g in groups]
    for expected, node in zip(expected_values, nodes, strict=True):
        got = node.evaluate(tuple(slice(0, n) for n in node.shape), BlockReads())
        np.testing.assert_allclose(got, expected, rtol=1e-10, equal_nan=True)


def test_groups_along_an_inner_axis_and_keepdims() -> None:
    x = _chunked()
    picks = [np.array([5, 0, 5, 2]), np.array([1, 3])]
    nodes = [defer("mean", np.take(x, p, axis=1)._tree(), axis=1, keepdims=True) for p in picks]
    stacked = oc.Expr(nodes[0]) - oc.Expr(nodes[1])  # an expression over two pending results
    np.testing.assert_allclose(
        np.asarray(stacked),
        VALUES[:, picks[0]].mean(axis=1, keepdims=True)
        - VALUES[:, picks[1]].mean(axis=1, keepdims=True),
    )
    assert all(node.resolved for node in nodes)


def test_only_gathers_along_a_reduced_axis_are_folded() -> None:
    x = _chunked()
    rows = np.take(x, [4, 1, 1], axis=0)._tree()
    folded = gathered_rows(make_reduction("nanmean", rows, axis=0))
    assert isinstance(folded, GatheredRows)
    assert folded.expr.shape == x.shape  # the input itself, not the gather
    kept = make_reduction("mean", rows, axis=1)  # the gathered axis stays: no folding
    assert gathered_rows(kept) is kept
    positional = make_reduction("argmax", rows, axis=0)  # its partials need block positions
    assert gathered_rows(positional) is positional


def test_a_pending_reduction_evaluates_alone_when_read_first() -> None:
    x = _chunked()
    node = defer("max", x._tree(), axis=(1, 2))
    assert isinstance(node, Deferred) and not node.resolved
    np.testing.assert_array_equal(oc.Expr(node)[2:5], VALUES.max(axis=(1, 2))[2:5])
    assert node.resolved


def test_nested_pending_reductions_resolve_inner_first() -> None:
    x = _chunked()
    means = oc.Expr(defer("nanmean", x._tree(), axis=0))
    anomaly = x - means
    spread = defer("nanstd", anomaly._tree(), axis=0)
    expected = np.nanstd(VALUES - np.nanmean(VALUES, axis=0), axis=0)
    np.testing.assert_allclose(np.asarray(oc.Expr(spread)), expected)


def test_bad_arguments_raise_when_deferred() -> None:
    x = _chunked()
    with pytest.raises(np.exceptions.AxisError):
        defer("sum", x._tree(), axis=3)
    with pytest.raises(TypeError, match="defers"):
        defer("argmax", x._tree())


def test_a_deferred_reduction_travels_to_another_process_with_its_result() -> None:
    # (what a Dask worker receives: the held result, never the reduction to run again)
    import pickle

    x = oc.from_numpy(np.arange(12.0).reshape(4, 3), chunks=(2, 3))
    expr = oc.Expr(defer("mean", x, axis=0)) * 2
    copy = pickle.loads(pickle.dumps(expr))
    np.testing.assert_array_equal(copy[...], np.arange(12.0).reshape(4, 3).mean(axis=0) * 2)
