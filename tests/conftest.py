from __future__ import annotations

from collections.abc import Iterator

import pytest

import oocarray as oc
from oocarray import _manager, _native


@pytest.fixture(autouse=True)
def _restore_settings() -> Iterator[None]:
    """Each test starts from the default settings and leaves no manager active."""
    before = oc.config()
    handler = _native.get_handler()
    yield
    oc.configure(
        max_bytes=before.max_bytes,
        max_physical_bytes=before.max_physical_bytes,
        spill_dir=before.spill_dir,
        max_spill_bytes=before.max_spill_bytes,
        trace=before.trace,
    )
    assert _manager.active_manager() is None, "a test left a manager active"
    assert _native.get_handler() is handler, "a test left the NumPy handler changed"
