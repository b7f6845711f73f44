"""HTML for notebooks of a stored (chunked) array: its description, and its stored bytes
against its logical bytes as a bar.  Every name and path is escaped."""

from __future__ import annotations

from typing import Protocol

from oocarray._memory._html import LEFT, TABLE, bar, escape
from oocarray._memory._units import format_bytes

__all__ = ["stored_array_html"]


class Described(Protocol):
    """What the table shows of an array (``StoredArray`` answers it)."""

    @property
    def shape(self) -> tuple[int, ...]: ...
    @property
    def dtype(self) -> object: ...
    @property
    def chunks(self) -> tuple[int, ...]: ...
    @property
    def shards(self) -> tuple[int, ...] | None: ...
    @property
    def codec(self) -> str: ...
    @property
    def nbytes(self) -> int: ...
    @property
    def format(self) -> str: ...
    @property
    def path(self) -> str: ...
    @property
    def location(self) -> str: ...
    @property
    def readonly(self) -> bool: ...
    @property
    def closed(self) -> bool: ...

    _temporary: bool

    def stored_bytes(self) -> int: ...


def stored_array_html(array: Described) -> str:
    """Shape, dtype, chunks, codec, logical and stored bytes (with a bar), path, format."""
    if array.closed:
        stored = 0
    else:
        try:
            stored = array.stored_bytes()
        except Exception:  # a store that cannot say: the rest of the table is still useful
            stored = 0
    chunks = str(array.chunks) + (f" in shards {array.shards}" if array.shards else "")
    ratio = "" if not stored else f" ({array.nbytes / stored:.1f}x smaller on disk)"
    items = [
        ("shape", str(array.shape)),
        ("dtype", str(array.dtype)),
        ("chunks", chunks),
        ("codec", array.codec),
        ("logical", format_bytes(array.nbytes)),
        ("on disk", format_bytes(stored) + ratio),
        ("format", array.format + (" (temporary)" if array._temporary else "")),
        ("path", array.path),
        ("location", array.location),
        ("mode", "closed" if array.closed else "read-only" if array.readonly else "read-write"),
    ]
    rows = "".join(
        f"<tr><th style='{LEFT}'>{escape(k)}</th><td style='{LEFT}'>{escape(v)}</td></tr>"
        for k, v in items
    )
    stored_bar = bar(stored, array.nbytes or None, "stored bytes against logical bytes")
    return (
        f"<div class='oc-chunked' style='{TABLE}'><table>"
        f"<caption>oocarray.ChunkedArray</caption>{rows}"
        f"<tr><th style='{LEFT}'>stored / logical</th><td style='{LEFT}'>{stored_bar}</td></tr>"
        "</table></div>"
    )
