"""The free-region cache (native/regions.c) keeps what loops reuse and nothing else: a freed
region serves the next request of about its size, and a request it cannot serve gives the
oldest cached regions back first, so a manager adds little resident memory over plain NumPy
when sizes vary."""

from __future__ import annotations

import numpy as np

import oocarray as oc
from oocarray import _native

MiB = 1 << 20


def cached() -> int:
    return _native.region_cache()[0]


def test_a_loop_of_one_size_reuses_its_region() -> None:
    _native.region_cache(-1)
    with oc.Manager("loop"):
        first = np.ones(2 * MiB // 8)
        address = first.ctypes.data
        del first
        assert cached() >= 2 * MiB
        for _ in range(5):
            again = np.ones(2 * MiB // 8)
            assert again.ctypes.data == address and (again == 1).all()
            del again


def test_a_request_the_cache_cannot_serve_gives_cached_regions_back() -> None:
    _native.region_cache(-1)
    with oc.Manager("sizes"):
        old = [np.ones(size // 8) for size in (1 * MiB, 2 * MiB, 3 * MiB)]
        del old
        assert cached() >= 6 * MiB
        other = np.zeros(5 * MiB // 8)  # no cached region of about this size
        assert not other.any()
        # The oldest freed (1 and 2 MiB) went back, then 3 MiB: at least 5 MiB given back.
        assert cached() <= 6 * MiB + 3 * 4096 - 5 * MiB
