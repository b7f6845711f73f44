"""oc.MemoryMonitor: a timeline of a known allocation pattern, CSV, pandas and the plot."""

from __future__ import annotations

import gc
import io
import time
from pathlib import Path

import numpy as np
import pytest

import oocarray as oc

MiB = 2**20


def _pattern(mon: oc.MemoryMonitor) -> None:
    """Two steps up by 16 MiB in manager 'pattern', a hold, then everything freed."""
    with oc.Manager("pattern", max_bytes="256M"):
        a = np.ones(16 * MiB // 8)
        mon.sample()
        b = np.ones(16 * MiB // 8)
        mon.sample()
        time.sleep(0.03)
        del a, b
        mon.sample()


def test_the_monitor_records_a_known_pattern() -> None:
    # Garbage an earlier test left (arrays in a reference cycle) must not be freed meanwhile:
    # the last sample is compared with the first.
    gc.collect()
    with oc.MemoryMonitor(interval=0.005) as mon:
        assert mon.running
        base = mon.samples[0]
        _pattern(mon)
    assert not mon.running
    samples = mon.samples
    assert len(samples) >= 5  # start, three explicit, stop, and the thread's
    assert [s.time_s for s in samples] == sorted(s.time_s for s in samples)
    peak = mon.peak
    # (np.ones makes an 8-byte temporary: a sample may catch it.)
    assert peak.managers["pattern"] == pytest.approx(32 * MiB, abs=64)
    assert peak.ram_bytes >= 32 * MiB
    assert peak.managed_bytes - base.managed_bytes == pytest.approx(32 * MiB, abs=MiB)
    assert peak.rss_anon_bytes - (base.rss_anon_bytes + base.rss_shmem_bytes) >= 28 * MiB
    assert peak.samples == len(samples)
    assert mon.budgets["pattern"] == 256 * MiB
    # Freed at the end: the last samples no longer hold the pattern.
    assert samples[-1].managers.get("pattern") is None
    assert samples[-1].managed_bytes == base.managed_bytes
    assert "peak resident" in str(peak)


def test_start_stop_and_bad_arguments() -> None:
    mon = oc.MemoryMonitor(interval=0.01).start()
    with pytest.raises(RuntimeError, match="already running"):
        mon.start()
    mon.stop()
    mon.stop()
    assert "stopped" in repr(mon)
    with pytest.raises(ValueError, match=r"at least 0\.001"):
        oc.MemoryMonitor(interval=0)
    with pytest.raises(TypeError, match="number of seconds"):
        oc.MemoryMonitor(interval="fast")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="no samples"):
        _ = oc.MemoryMonitor().peak


def test_max_samples_keeps_the_newest() -> None:
    mon = oc.MemoryMonitor(interval=1.0, max_samples=3)
    with mon:
        for _ in range(5):
            mon.sample()
    assert len(mon.samples) == 3


def test_csv_round_trips(tmp_path: Path) -> None:
    with oc.MemoryMonitor(interval=0.005) as mon:
        _pattern(mon)
    path = tmp_path / "timeline.csv"
    mon.to_csv(path)
    header = path.read_text().splitlines()[0].split(",")
    assert header[0] == "time_s" and "ram_bytes[pattern]" in header
    again = oc.MemoryMonitor.from_csv(path)
    assert again.samples == mon.samples
    assert again.peak.managers == mon.peak.managers
    (tmp_path / "other.csv").write_text("a,b\n1,2\n")
    with pytest.raises(ValueError, match="not a MemoryMonitor CSV"):
        oc.MemoryMonitor.from_csv(tmp_path / "other.csv")


def test_to_frame() -> None:
    pd = pytest.importorskip("pandas")
    with oc.MemoryMonitor(interval=0.005) as mon:
        _pattern(mon)
    frame = mon.to_frame()
    assert isinstance(frame, pd.DataFrame)
    assert frame.index.name == "time_s"
    assert len(frame) == len(mon.samples)
    assert frame["ram_bytes[pattern]"].max() == pytest.approx(32 * MiB, abs=64)
    assert frame["ram_bytes[pattern]"].isna().iloc[-1]  # closed by then


def test_plot_draws_the_lines_and_budgets() -> None:
    pytest.importorskip("matplotlib")
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    oc.configure(max_bytes="512M")
    with oc.MemoryMonitor(interval=0.005) as mon:
        _pattern(mon)
    fig = mon.plot()
    assert isinstance(fig, Figure)
    (ax,) = fig.axes
    labels = [line.get_label() for line in ax.get_lines()]
    assert labels[:4] == [
        "resident: anonymous + shared",
        "resident: all (with file-backed pages)",
        "managed arrays in RAM",
        "managed arrays on disk (spilled + placed)",
    ]
    assert "RAM of manager 'pattern'" in labels
    assert "budget of 'pattern'" in labels and "budget: max_bytes" in labels
    assert ax.get_xlabel() == "time (s)"
    assert ax.get_ylabel() == "memory (MiB)"
    pattern = ax.get_lines()[labels.index("RAM of manager 'pattern'")]
    assert max(pattern.get_ydata()) == pytest.approx(32.0, abs=1e-3)
    budget = ax.get_lines()[labels.index("budget: max_bytes")]
    assert list(budget.get_ydata()) == [512.0, 512.0]
    assert ax.get_legend() is not None
    png = io.BytesIO()
    fig.savefig(png, format="png")
    assert png.getvalue().startswith(b"\x89PNG")
    # Drawing on given axes returns their figure.
    other = Figure()
    assert mon.plot(other.add_subplot(), managers=False, budgets=False) is other
    assert all("manager" not in line.get_label() for line in other.axes[0].get_lines())
