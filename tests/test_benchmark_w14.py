"""W14's harness (benchmarks/w14_xarray.py): a peer far slower than the fastest is stopped
at ``SLOW_PEER`` times its run and not run again; oocarray and the first peer have no limit."""

from __future__ import annotations

import subprocess
import sys

import pytest

from benchmarks import w14_xarray as w14
from benchmarks.w14_xarray import SideRuns


def _ran(climatology: float, anomaly: float) -> SideRuns:
    return SideRuns(climatology=[climatology], anomaly=[anomaly], peak_rss=1)


def test_a_peer_is_limited_to_twice_the_fastest_other_peers_first_run() -> None:
    runs = {"oocarray": _ran(1.0, 2.0), "dask": SideRuns(), "cubed": SideRuns()}
    assert w14._peer_limit("oocarray", runs) is None
    assert w14._peer_limit("dask", runs) is None  # no other peer has run yet
    runs["dask"] = _ran(10.0, 30.0)
    assert w14._peer_limit("cubed", runs) == pytest.approx(w14.SLOW_PEER * 40.0)
    assert w14._peer_limit("dask", runs) is None
    runs["cubed"] = _ran(100.0, 200.0)  # slower than the limit: not run again
    assert w14._first(runs["cubed"]) > (w14._peer_limit("cubed", runs) or 0)
    assert w14._peer_limit("dask", runs) == pytest.approx(w14.SLOW_PEER * 300.0)


def test_a_run_past_its_limit_is_stopped_and_reported(
    tmp_path: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    started: list[float | None] = []
    real_run = subprocess.run

    def run(command: list[str], **kw: object) -> object:
        started.append(kw.get("timeout"))  # type: ignore[arg-type]
        # A child that would outlive any limit, in place of the side's code.
        return real_run([sys.executable, "-c", "import time; time.sleep(60)"], **kw)

    monkeypatch.setattr(w14.subprocess, "run", run)
    with pytest.raises(RuntimeError, match=r"not finished in .* stopped"):
        w14.run_side("cubed", "unused.zarr", str(tmp_path), "512M", limit=0.5)
    assert started == [0.5]
