"""Blocked linear algebra of chunked arrays (to be built: matmul, dot, tensordot, vecdot,
outer, einsum's contractions)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["FUNCTIONS"]

FUNCTIONS: dict[Any, Callable[..., Any]] = {}
