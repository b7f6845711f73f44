"""The one patch of a class oocarray does not own: ``numpy._core._exceptions._ArrayMemoryError``
gets a ``__new__`` (``oocarray._memory._refusals``) that turns a refusal of oocarray's
handler into oocarray's error, still NumPy's class.  These tests pin what it changes and what
it leaves alone, so that a NumPy that moves or reshapes the class is noticed."""

from __future__ import annotations

import numpy as np
import pytest
from numpy._core._exceptions import _ArrayMemoryError

import oocarray as oc
from oocarray import _native
from oocarray._memory import _refusals


def test_the_patch_is_new_of_numpys_class_only() -> None:
    patched = _ArrayMemoryError.__dict__["__new__"]
    assert patched.__module__ == "oocarray._memory._refusals"
    # Nothing else of NumPy's class is replaced: its other members are NumPy's own.
    for name, member in vars(_ArrayMemoryError).items():
        if name != "__new__" and callable(member):
            assert getattr(member, "__module__", "numpy").startswith("numpy"), name
    # MemoryError itself (and so every other error) keeps the builtin __new__.
    assert MemoryError.__new__ is not patched


def test_installing_again_changes_nothing() -> None:
    before = _ArrayMemoryError.__dict__["__new__"]
    _refusals.install()
    assert _ArrayMemoryError.__dict__["__new__"] is before


def test_a_refusal_is_oocarrays_error_and_still_numpys() -> None:
    with (
        oc.Manager("pinned", max_bytes="1M", spill="fail"),
        pytest.raises(oc.MemoryBudgetError) as caught,
    ):
        np.ones(2**20)  # 8 MiB over a 1 MiB budget
    error = caught.value
    assert isinstance(error, _ArrayMemoryError) and isinstance(error, MemoryError)
    assert error.shape == (2**20,) and error.dtype == np.dtype(float)  # NumPy's __init__
    assert "'pinned'" in str(error) and "budget" in str(error)  # oocarray's message


def test_an_error_without_a_refusal_stays_numpys() -> None:
    _native.take_failure()  # no stale record of an earlier refusal
    error = _ArrayMemoryError((3, 4), np.dtype(np.float32))
    assert type(error) is _ArrayMemoryError
    assert not isinstance(error, oc.OOCArrayError)
    assert str(error) == (
        "Unable to allocate 48 bytes for an array with shape (3, 4) and data type float32"
    )
