"""Sorting and selection of chunked arrays out of core: sort, argsort, partition,
quantiles, searchsorted."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from oocarray._compute import _quantiles

__all__ = ["FUNCTIONS"]

FUNCTIONS: dict[Any, Callable[..., Any]] = {**_quantiles.FUNCTIONS}
