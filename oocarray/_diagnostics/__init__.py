"""The diagnostics layer: memory reports, the monitor and its plots, metrics, listeners on
memory events, HTML for notebooks and the leak hint.

Sits above the feed layer: it may import ``_memory``, ``_storage``, ``_compute`` and
``_feed``; nothing below imports it.  What the lower layers show through it (their
``_repr_html_``, listeners, holder hints in leak reports) is put in place by :func:`install`,
which ``oocarray`` runs at import.  matplotlib and prometheus_client are imported only when a
plot or a metrics server is asked for.
"""

from oocarray._diagnostics import _html
from oocarray._diagnostics._events import MemoryEvent, on_event, remove_listener
from oocarray._diagnostics._holders import Holder, holder_lines, who_holds
from oocarray._diagnostics._metrics import MetricsServer, serve_metrics
from oocarray._diagnostics._monitor import MemoryMonitor, MemoryPeak, MemorySample
from oocarray._diagnostics._report import MemoryReport, memory_report
from oocarray._diagnostics._usage import ManagerUsage, SpillUsage, TemporaryUsage
from oocarray._memory import _events as _memory_events
from oocarray._memory._physical import ResidentMemory

__all__ = [
    "Holder",
    "ManagerUsage",
    "MemoryEvent",
    "MemoryMonitor",
    "MemoryPeak",
    "MemoryReport",
    "MemorySample",
    "MetricsServer",
    "ResidentMemory",
    "SpillUsage",
    "TemporaryUsage",
    "install",
    "memory_report",
    "on_event",
    "remove_listener",
    "serve_metrics",
    "who_holds",
]


def install() -> None:
    """Give managers, workspaces and chunked arrays their ``_repr_html_``, and leak reports
    their holder hints."""
    _html.install()
    if holder_lines not in _memory_events.holder_hints:
        _memory_events.holder_hints.append(holder_lines)


install()
