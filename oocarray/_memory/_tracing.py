"""Allocation tracebacks, recorded while ``oc.configure(trace=True)`` is in force."""

from __future__ import annotations

import sys
from dataclasses import dataclass

from oocarray import _native

__all__ = ["TraceRecord", "disable", "enable", "record_for", "records_owned_by", "set_owner"]

_STACK_DEPTH = 12
_PACKAGE_DIR = __file__.rsplit("/", 1)[0] + "/"


@dataclass(frozen=True, slots=True)
class Frame:
    filename: str
    lineno: int
    name: str


@dataclass(slots=True)
class TraceRecord:
    alloc_id: int
    size: int
    owner_id: int
    stack: tuple[Frame, ...]

    def format(self, indent: str = "    ") -> str:
        lines = [f'{indent}File "{f.filename}", line {f.lineno}, in {f.name}' for f in self.stack]
        return "\n".join(lines) if lines else f"{indent}(no Python frame)"


_records: dict[int, TraceRecord] = {}


def _on_alloc(alloc_id: int, size: int, owner_id: int) -> None:
    frame = sys._getframe(1)
    stack: list[Frame] = []
    while frame is not None and len(stack) < _STACK_DEPTH:
        filename = frame.f_code.co_filename
        if not filename.startswith(_PACKAGE_DIR):
            stack.append(Frame(filename, frame.f_lineno, frame.f_code.co_name))
        frame = frame.f_back  # type: ignore[assignment]
    _records[alloc_id] = TraceRecord(alloc_id, size, owner_id, tuple(stack))


def _on_free(alloc_id: int) -> None:
    _records.pop(alloc_id, None)


def enable() -> None:
    _native.set_trace(_on_alloc, _on_free)


def disable() -> None:
    _native.set_trace(None, None)


def record_for(alloc_id: int) -> TraceRecord | None:
    return _records.get(alloc_id)


def set_owner(alloc_id: int, owner_id: int) -> None:
    record = _records.get(alloc_id)
    if record is not None:
        record.owner_id = owner_id


def records_owned_by(owner_ids: set[int]) -> list[TraceRecord]:
    return [r for r in list(_records.values()) if r.owner_id in owner_ids]
