"""W16's unique harness (benchmarks/w16_unique.py): a dask run is stopped at twenty times
oocarray's, and a workload whose every dask run was stopped is reported as a bound."""

from __future__ import annotations

import pytest

from benchmarks import w16_unique as w16
from benchmarks._timing import Row, TextRow


def test_a_dask_side_is_limited_by_oocarray_on_the_same_workload() -> None:
    times: dict[str, list[float]] = {
        "oocarray": [],
        "dask": [],
        "oocarray (values only)": [2.0, 4.0, 3.0],
        "dask (values only)": [],
        "numpy": [],
    }
    assert w16.peer_limit("dask", times) is None  # oocarray has not run yet
    assert w16.peer_limit("oocarray", times) is None
    assert w16.peer_limit("numpy", times) is None
    assert w16.peer_limit("dask (values only)", times) == pytest.approx(60.0)
    times["oocarray"] = [5.0]
    assert w16.peer_limit("dask", times) == pytest.approx(w16.STOP_PEER_AFTER * 5.0)


def test_a_stopped_peer_bounds_the_ratio() -> None:
    result = w16._result(
        500_000_000,
        {
            "oocarray": [5.0, 5.5, 6.0],
            "dask": [],
            "oocarray (values only)": [3.0, 3.0],
            "dask (values only)": [30.0, 33.0],
        },
        {"dask": 110.0},
    )
    counted, values = result.rows
    assert isinstance(counted, TextRow) and isinstance(values, Row)
    assert counted.ratio == "< 0.05x" and counted.met == "yes"
    assert "not finished in" in counted.peer
    assert "stopped after" in result.tables[0].rows[1][2]
