"""The plot of a :class:`MemoryMonitor` timeline (matplotlib, imported only here)."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["plot_timeline"]

# Colours of named managers (and their budget lines): tab10 without those of the fixed lines.
_MANAGER_COLORS = ("#9467bd", "#8c564b", "#e377c2", "#bcbd22", "#17becf", "#7f7f7f")
_UNITS = (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10), ("bytes", 1))


def _matplotlib() -> Any:
    try:
        import matplotlib
        from matplotlib.figure import Figure
    except ImportError as error:
        raise ImportError(
            "MemoryMonitor.plot() needs matplotlib: pip install matplotlib "
            "(or pip install 'oocarray[plot]')"
        ) from error
    return matplotlib, Figure


def _unit(largest: float) -> tuple[str, int]:
    for name, size in _UNITS:
        if largest >= size:
            return name, size
    return "bytes", 1


def plot_timeline(
    samples: Sequence[Any],
    budget_lines: Mapping[str, int],
    *,
    ax: Any = None,
    managers: bool = True,
    budgets: bool = True,
    title: str | None = None,
) -> Any:
    """Draw memory over time on ``ax`` (or a new Figure) and return the Figure."""
    _, figure_class = _matplotlib()
    if ax is None:
        figure = figure_class(figsize=(9, 4.5), layout="constrained")
        ax = figure.add_subplot()
        _show_in_notebook(figure_class)
    else:
        figure = ax.figure
    t = [s.time_s for s in samples]
    series: list[tuple[str, list[int], dict[str, Any]]] = [
        (
            "resident: anonymous + shared",
            [s.rss_anon_bytes + s.rss_shmem_bytes for s in samples],
            {"color": "#1f77b4", "linewidth": 2},
        ),
        (
            "resident: all (with file-backed pages)",
            [s.rss_bytes for s in samples],
            {"color": "#1f77b4", "linewidth": 1, "alpha": 0.5},
        ),
        ("managed arrays in RAM", [s.ram_bytes for s in samples], {"color": "#2ca02c"}),
        (
            "managed arrays on disk (spilled + placed)",
            [s.spilled_bytes + s.mmap_bytes for s in samples],
            {"color": "#ff7f0e"},
        ),
    ]
    if managers:
        names: dict[str, None] = {}
        for s in samples:
            names.update(dict.fromkeys(s.managers))
        for i, name in enumerate(names):
            series.append(
                (
                    f"RAM of manager {name!r}",
                    [s.managers.get(name, 0) for s in samples],
                    {
                        "linestyle": "--",
                        "linewidth": 1.5,
                        "color": _MANAGER_COLORS[i % len(_MANAGER_COLORS)],
                    },
                )
            )
    lines = dict(budget_lines) if budgets else {}
    largest = max([max(v, default=0) for _, v, _ in series] + list(lines.values()) + [1])
    unit, scale = _unit(largest)
    colors: dict[str, Any] = {}
    for label, values, style in series:
        (line,) = ax.plot(t, [v / scale for v in values], label=label, **style)
        colors[label] = line.get_color()
    for name, value in lines.items():
        if name in ("max_bytes", "max_physical_bytes"):
            label = f"budget: {name}"
            color = "#d62728" if name == "max_bytes" else "#000000"
        else:
            label = f"budget of {name!r}"
            color = colors.get(f"RAM of manager {name!r}", "#7f7f7f")
        ax.axhline(value / scale, linestyle=":", linewidth=1.5, color=color, label=label)
    ax.set_xlabel("time (s)")
    ax.set_ylabel(f"memory ({unit})")
    ax.set_ylim(bottom=0)
    if t:
        ax.set_xlim(left=0, right=max(t[-1], 1e-3))
    if title:
        ax.set_title(title)
    ax.grid(True, alpha=0.3)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small", frameon=False)
    return figure


def _show_in_notebook(figure_class: type) -> None:
    """In IPython, make a Figure made outside pyplot display as a PNG (pyplot's inline
    backend registers that only once pyplot is imported)."""
    ipython = sys.modules.get("IPython")
    if ipython is None:
        return
    try:
        shell = ipython.get_ipython()
        if shell is None:
            return
        pylabtools: Any = importlib.import_module("IPython.core.pylabtools")
        formatter = shell.display_formatter.formatters["image/png"]
        try:
            formatter.lookup_by_type(figure_class)
        except KeyError:
            formatter.for_type(figure_class, lambda fig: pylabtools.print_figure(fig, "png"))
    except Exception:  # an IPython without these: the figure is still returned
        return
