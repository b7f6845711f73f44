"""oc.serve_metrics(): a Prometheus endpoint scraped over loopback."""

from __future__ import annotations

import sys
import urllib.error
import urllib.request

import numpy as np
import pytest

import oocarray as oc

prometheus_client = pytest.importorskip("prometheus_client")
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

MiB = 2**20


def _scrape(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = urllib.request.urlopen(url, timeout=60).read().decode()  # 60 s: a hang guard only
    values = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            values[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return values


def test_scrape_returns_the_figures() -> None:
    oc.configure(max_bytes="1G")
    with oc.serve_metrics() as server, oc.Manager("served", max_bytes="64M"):
        assert server.port > 0
        assert server.url == f"http://127.0.0.1:{server.port}/metrics"
        a = np.ones(8 * MiB // 8)
        b = np.ones(MiB // 8)
        oc.spill(b)
        ws = oc.Workspace("cycles")
        for _ in range(2):
            with ws:
                pass
        values = _scrape(server.url)
        report = oc.memory_report()
        ws.close()
        del a, b
    served = (("kind", "manager"), ("manager", "System/served"))
    assert values[("oocarray_manager_ram_bytes", served)] == 8 * MiB
    assert values[("oocarray_manager_bytes", served)] == 9 * MiB
    assert values[("oocarray_manager_budget_bytes", served)] == 64 * MiB
    assert values[("oocarray_manager_arrays", served)] == 2
    assert values[("oocarray_manager_spills_total", served)] == 1
    assert values[("oocarray_manager_peak_bytes", served)] >= 8 * MiB
    workspace = (("kind", "workspace"), ("manager", "System/served/cycles"))
    assert values[("oocarray_workspace_cycles_total", workspace)] == 2
    assert values[("oocarray_limit_bytes", (("setting", "max_bytes"),))] == 2**30
    assert values[("oocarray_spilled_bytes", ())] == report.managers.spilled_bytes == MiB
    assert values[("oocarray_managed_bytes", ())] == report.managed_bytes
    assert values[("oocarray_spill_file_bytes", ())] >= MiB
    anon = values[("oocarray_resident_bytes", (("kind", "anon"),))]
    assert abs(anon - report.resident.anon_bytes) < 16 * MiB
    assert ("oocarray_resident_bytes", (("kind", "file"),)) in values
    assert values[("oocarray_spills_total", ())] >= 1


def test_close_releases_the_port() -> None:
    server = oc.serve_metrics(port=0)
    url = server.url
    assert "serving" in repr(server)
    server.close()
    server.close()
    assert server.closed
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(url, timeout=2)


def test_bad_arguments_and_a_missing_prometheus_client(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ValueError, match="port"):
        oc.serve_metrics(port=70000)
    monkeypatch.setitem(sys.modules, "prometheus_client", None)
    with pytest.raises(ImportError, match=r"pip install prometheus_client"):
        oc.serve_metrics()
