"""The diagnostics layer: memory reports, the monitor and its plots, metrics, listeners on
memory events, HTML for notebooks and the leak hint.

Sits above the feed layer: it may import ``_memory``, ``_storage``, ``_compute`` and
``_feed``; nothing below imports it.  Managers, workspaces and chunked arrays render their own
``_repr_html_`` in their layers; the one thing this layer adds to a lower one is the holder
hint of leak reports, registered with the memory layer's events by :func:`install`, which
runs at import.  matplotlib and prometheus_client are imported only when a
plot or a metrics server is asked for.
"""

from oocarray._diagnostics._events import MemoryEvent, on_event, remove_listener
from oocarray._diagnostics._holders import Holder, holder_lines, who_holds
from oocarray._diagnostics._metrics import MetricsServer, serve_metrics
from oocarray._diagnostics._monitor import MemoryMonitor
from oocarray._diagnostics._report import MemoryReport, memory_report
from oocarray._diagnostics._samples import MemoryPeak, MemorySample
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
    """Give leak reports their holder hints (who still holds an escaped array)."""
    if holder_lines not in _memory_events.holder_hints:
        _memory_events.holder_hints.append(holder_lines)


install()
