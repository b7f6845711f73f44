"""The libzstd the native code uses (oocarray/_memory/_zstd_library.py): numcodecs' own copy,
what zarr-python encodes and decodes with, where numcodecs has one; the system's libzstd.so.1
where not, or where the given library cannot be loaded; frames written by one read by the
other; and the streamed rechunk codec uses the same library."""

from __future__ import annotations

import ctypes
import subprocess
import sys

import numcodecs
import numcodecs.zstd
import numpy as np
import pytest

from oocarray import _native
from oocarray._compute._rechunk._zstd_stream import _library
from oocarray._memory._zstd_library import SYSTEM_ZSTD, zstd_library


def _system_version() -> int | None:
    try:
        return int(ctypes.CDLL(SYSTEM_ZSTD).ZSTD_versionNumber())
    except OSError:
        return None


def test_numcodecs_own_libzstd_is_the_one_in_use() -> None:
    assert zstd_library() == numcodecs.zstd.__file__
    assert _native.zstd_available()
    assert _native.zstd_version() == numcodecs.zstd.VERSION_NUMBER
    assert _library().ZSTD_versionNumber() == numcodecs.zstd.VERSION_NUMBER


def test_frames_cross_between_the_native_codec_and_numcodecs(tmp_path: object) -> None:
    values = np.random.default_rng(5).random(300_000).astype("f4")
    path = f"{tmp_path}/frame"
    with open(path, "wb") as f:
        _native.zstd_write(f.fileno(), values, 3, True)
    with open(path, "rb") as f:
        stored = f.read()
    assert np.array_equal(np.frombuffer(numcodecs.Zstd().decode(stored), "f4"), values)
    assert stored == numcodecs.Zstd(level=3, checksum=True).encode(values)


_WITHOUT_NUMCODECS = """
import importlib.util, sys
real = importlib.util.find_spec
importlib.util.find_spec = lambda name, *a: None if name == "numcodecs" else real(name, *a)
import oocarray as oc
from oocarray import _native
from oocarray._memory._zstd_library import zstd_library
print(zstd_library(), _native.zstd_version())
"""

_GIVEN_A_MISSING_LIBRARY = """
import glob, importlib.util, os
# The native module alone, before oocarray's import binds a library: one that cannot be
# loaded is refused, and zstd's first use binds the system's.
folder = importlib.util.find_spec("oocarray").submodule_search_locations[0]
spec = importlib.util.spec_from_file_location(
    "oocarray._native", glob.glob(os.path.join(folder, "_native*.so"))[0]
)
_native = importlib.util.module_from_spec(spec)
spec.loader.exec_module(_native)
print(_native.codec_library(_native.LIB_ZSTD, "/nonexistent/libzstd.so"))
print(_native.zstd_available(), _native.zstd_version())
"""


@pytest.mark.skipif(_system_version() is None, reason="no system libzstd.so.1 here")
def test_without_numcodecs_copy_the_system_libzstd_is_used() -> None:
    done = subprocess.run(
        [sys.executable, "-c", _WITHOUT_NUMCODECS], capture_output=True, text=True, check=True
    )
    assert done.stdout.split() == [SYSTEM_ZSTD, str(_system_version())]
    done = subprocess.run(
        [sys.executable, "-c", _GIVEN_A_MISSING_LIBRARY],
        capture_output=True,
        text=True,
        check=True,
    )
    assert done.stdout.split() == ["False", "True", str(_system_version())]
