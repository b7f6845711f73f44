"""A chunk that cannot be read behind ``x.as_ndarray()`` (issue 21, item 4): the thread that
touches it gets ``CorruptChunkError`` (``PagedChunkError``), the process lives, the result of
the call that touched it never reaches the caller, and the damaged chunk is never taken for
data (touched again, it raises again).  native/pager_errors.c says how.

Every case runs in a child interpreter, so that a SIGBUS (the behaviour before) fails the test
instead of ending the run; the child asserts that it caught the exception itself and then reads
the intact chunks correctly, and exits 0."""

from __future__ import annotations

import re
import signal
from pathlib import Path

import numpy as np
import pytest

import oocarray as oc
from oocarray._memory import _compressed
from oocarray._storage._paged._arrays import paging_available
from testkit.children import run_ok, run_python

needs_paging = pytest.mark.skipif(
    not paging_available()[0], reason=f"no chunk-backed ndarrays here: {paging_available()[1]}"
)
ROWS, COLS, CHUNK_ROWS, DAMAGED = 1024, 64, 64, 3  # float64: 32 KiB chunks, chunk 3 damaged


def _store(path: Path) -> Path:
    data = np.arange(ROWS * COLS, dtype=np.float64).reshape(ROWS, COLS)
    x = oc.create(path, data.shape, data.dtype, chunks=(CHUNK_ROWS, COLS), codec="zstd")
    x[...] = data
    return path


def _damage(store: Path, how: str) -> None:
    chunk = store / "c" / str(DAMAGED) / "0"
    if how == "garbage":  # not a zstd frame at all
        chunk.write_bytes(np.random.default_rng(0).bytes(chunk.stat().st_size))
    elif how == "truncated":
        chunk.write_bytes(chunk.read_bytes()[:50])
    elif how == "directory":  # reading it is an I/O error (EISDIR)
        chunk.unlink()
        chunk.mkdir()
    else:
        raise AssertionError(how)


# The child: each way of touching the damaged chunk, in the main thread and in another thread,
# twice; then the intact chunks.
_CHILD = """
import sys, threading
import numpy as np
import oocarray as oc

path, mode = sys.argv[1], sys.argv[2]
ROWS, COLS, CHUNK_ROWS, DAMAGED = 1024, 64, 64, 3
data = np.arange(ROWS * COLS, dtype=np.float64).reshape(ROWS, COLS)
x = oc.open(path, mode=mode)
v = x.as_ndarray(mode)
lo, hi = DAMAGED * CHUNK_ROWS - 10, DAMAGED * CHUNK_ROWS + 10  # across the damaged chunk

def python_loop():
    total = 0.0
    for i in range(lo, hi):
        total += v[i, 0]
    return total

FORMS = {
    "np.sum": lambda: np.sum(v),
    "max": lambda: v.max(),
    "slice copy": lambda: v[lo:hi].copy(),
    "python loop": python_loop,
}

def attempt(name):
    result = "untouched"
    try:
        result = FORMS[name]()
    except oc.CorruptChunkError as error:
        assert isinstance(error, oc.errors.PagedChunkError), type(error)
        assert result == "untouched", "the result reached the caller"
        text = str(error)
        assert f"chunk {DAMAGED}" in text and path in text, text
        return text
    raise AssertionError(f"{name}: no error, the result was {result!r}")

messages = []
for name in FORMS:
    for round in range(2):  # touched again, the chunk is read again and fails again
        messages.append(attempt(name))
        box = []
        t = threading.Thread(target=lambda: box.append(attempt(name)))
        t.start()
        t.join()
        assert len(box) == 1, f"{name}: the thread did not catch the error"
# chunk 2 is in the same fill unit (at least 64 KiB) as chunk 3: read-only, it reads; r+, the
# whole unit fails (a write to a page of it must not be lost)
intact = (DAMAGED if mode == "r" else DAMAGED - 1) * CHUNK_ROWS
assert (v[:intact] == data[:intact]).all()
assert (v[4 * CHUNK_ROWS :] == data[4 * CHUNK_ROWS :]).all()
assert float(np.sum(v[:CHUNK_ROWS])) == float(data[:CHUNK_ROWS].sum())
stats = v.base.stats() if hasattr(v.base, "stats") else x.paging_stats()[0]
assert stats["failures"] >= 2 * len(FORMS), stats
print("CHILD OK", messages[0])
"""


@needs_paging
@pytest.mark.parametrize("how", ["garbage", "truncated", "directory"])
@pytest.mark.parametrize("mode", ["r", "r+"])
def test_the_touching_thread_gets_corrupt_chunk_error_and_the_process_lives(
    tmp_path: Path, how: str, mode: str
) -> None:
    store = _store(tmp_path / "a.zarr")
    _damage(store, how)
    result = run_ok(_CHILD, str(store), mode)
    reason = {"garbage": "cannot be decoded", "truncated": "cannot be decoded"}.get(how, "")
    assert reason in result.stdout, result.stdout
    if how == "directory":
        assert "Is a directory" in result.stdout, result.stdout


@needs_paging
def test_a_deleted_chunk_file_reads_as_the_fill_value_as_x_reads_it(tmp_path: Path) -> None:
    """zarr's rule: a missing chunk file holds the fill value (not damage): as x[...] and
    zarr-python read it."""
    store = _store(tmp_path / "a.zarr")
    x = oc.open(store)
    view = x.as_ndarray()
    (store / "c" / str(DAMAGED) / "0").unlink()
    rows = slice(DAMAGED * CHUNK_ROWS, (DAMAGED + 1) * CHUNK_ROWS)
    assert np.array_equal(view[rows], x[rows]) and not view[rows].any()


_WRITE_CHILD = """
import os, sys
import numpy as np
import oocarray as oc

path = sys.argv[1]
x = oc.open(path, mode="r+")
v = x.as_ndarray("r+")
damaged = open(f"{path}/c/3/0", "rb").read()

for write in (
    lambda: v[3 * 64 + 5 : 3 * 64 + 6].fill(7.0),  # a call: raised as it returns
    lambda: np.copyto(v[3 * 64 + 5], 7.0),
):
    try:
        write()
    except oc.CorruptChunkError:
        pass
    else:
        raise AssertionError("a write into a damaged chunk raised nothing")
v[5] = -1.0  # an intact chunk
x.flush()
assert open(f"{path}/c/3/0", "rb").read() == damaged, "the damaged chunk was written over"
y = oc.open(path)
assert (y[5] == -1.0).all()
# a chunked array written from the view: no chunk is stored from the damaged part
copy = oc.create(f"{path}-copy", v.shape, v.dtype, chunks=(64, 64), codec="zstd")
try:
    copy[...] = v
    raise AssertionError("copying a damaged chunk raised nothing")
except oc.CorruptChunkError:
    pass
assert not os.path.exists(f"{path}-copy/c/3/0")
try:
    y[3 * 64 + 5]
except oc.CorruptChunkError:
    print("CHILD OK")
"""


@needs_paging
def test_a_write_into_a_damaged_chunk_raises_and_nothing_of_it_is_stored(tmp_path: Path) -> None:
    store = _store(tmp_path / "a.zarr")
    _damage(store, "garbage")
    run_ok(_WRITE_CHILD, str(store))


_OPERATOR_CHILD = """
import sys
import numpy as np
import oocarray as oc

v = oc.open(sys.argv[1]).as_ndarray()
y = None
try:
    y = v + 1  # an operator: no check of the eval breaker before the result is stored
    z = y * 2  # another operator
    len(y)  # the first call raises
    raise AssertionError("not raised at the first call")
except oc.CorruptChunkError:
    pass
assert y is not None and z is not None  # what the operators stored before the raise
damaged = slice(3 * 64, 4 * 64)
assert np.isnan(y[damaged]).all() and np.isnan(z[damaged]).all()  # never plausible values
assert (y[: 3 * 64] == np.arange(3 * 64 * 64).reshape(-1, 64) + 1).all()  # chunk 2 too

def returns_it():
    return v[3 * 64 + 1, 0] + 0.5  # operators only, then a return: no check on the way

out = "unset"
try:
    out = returns_it()  # a Python function: checked on entry, not on return
    assert np.isnan(out)  # stored, and NaN
    len(v)  # the first call raises
    raise AssertionError("not raised at the first call")
except oc.CorruptChunkError:
    pass
assert np.isnan(out)
print("CHILD OK")
"""


@needs_paging
def test_operators_raise_at_the_next_call_and_their_results_hold_nan(tmp_path: Path) -> None:
    """What an operator (BINARY_OP, subscript) computes from a damaged chunk is stored before
    the exception is raised: CPython 3.11 checks for it after calls of C functions, at
    function entries and at loop back-edges only (not after operators, nor on the return of
    a Python function).  The damaged bytes read as 0xFF there: NaN for float data, never a
    plausible value."""
    store = _store(tmp_path / "a.zarr")
    _damage(store, "truncated")
    run_ok(_OPERATOR_CHILD, str(store))


# ---- signals: threads with no Python state, faulthandler, a user's handler ----

_NATIVE_THREAD_CHILD = """
import ctypes, sys
import oocarray as oc

v = oc.open(sys.argv[1]).as_ndarray()
print("intact", float(v[:64].sum()), flush=True)
libc = ctypes.CDLL(None)
libc.pthread_create.argtypes = [ctypes.POINTER(ctypes.c_ulong), ctypes.c_void_p,
                                ctypes.c_void_p, ctypes.c_void_p]
thread = ctypes.c_ulong()
# strlen on a thread of its own: no Python thread state, nothing can raise there
libc.pthread_create(ctypes.byref(thread), None, ctypes.cast(libc.strlen, ctypes.c_void_p),
                    v[3 * 64 :].ctypes.data)
libc.pthread_join(thread, None)
print("NOT REACHED")
"""


@needs_paging
def test_a_thread_with_no_python_state_keeps_sigbus_with_the_reason(tmp_path: Path) -> None:
    store = _store(tmp_path / "a.zarr")
    _damage(store, "truncated")
    result = run_python(_NATIVE_THREAD_CHILD, str(store))
    assert result.returncode == -signal.SIGBUS, result.stdout + result.stderr
    assert "intact" in result.stdout and "NOT REACHED" not in result.stdout
    assert "chunk 3" in result.stderr and "no Python state" in result.stderr


_SIGNALS_CHILD = """
import faulthandler, mmap, os, signal, sys, tempfile
import numpy as np
import oocarray as oc

path, order = sys.argv[1], sys.argv[2]
got = []
if order == "user handler first":
    signal.signal(signal.SIGBUS, lambda signum, frame: got.append(signum))
v = oc.open(path).as_ndarray()
float(v[:64].sum())  # the pager's threads (and its handler) are started
if order == "faulthandler after":
    faulthandler.enable()
try:
    np.sum(v)
    raise AssertionError("no error")
except oc.CorruptChunkError:
    print("caught", flush=True)
if order == "user handler first":
    signal.raise_signal(signal.SIGBUS)  # passed on to the user's handler
    assert got == [signal.SIGBUS], got
    print("CHILD OK", flush=True)
    sys.exit(0)
# a SIGBUS of someone else's memory: a file mapping past the end of its file
with tempfile.TemporaryFile() as f:
    f.truncate(8192)
    m = mmap.mmap(f.fileno(), 8192)
    f.truncate(0)
    print("foreign", flush=True)
    m[100]
print("NOT REACHED")
"""


@needs_paging
@pytest.mark.parametrize(
    "order", ["faulthandler first", "faulthandler after", "user handler first"]
)
def test_other_sigbus_go_to_the_handler_before_and_faulthandler_still_reports(
    tmp_path: Path, order: str
) -> None:
    store = _store(tmp_path / "a.zarr")
    _damage(store, "truncated")
    flags = ("-X", "faulthandler") if order == "faulthandler first" else ()
    result = run_python(_SIGNALS_CHILD, str(store), order, flags=flags)
    out = result.stdout + result.stderr
    assert "caught" in result.stdout, out
    if order == "user handler first":
        assert result.returncode == 0 and "CHILD OK" in result.stdout, out
        return
    assert "foreign" in result.stdout and "NOT REACHED" not in result.stdout, out
    assert result.returncode == -signal.SIGBUS, out
    # faulthandler first reports the foreign fault only; installed after the pager's handler,
    # it sees the pager's fault first, reports it, and is off for SIGBUS from then on (its
    # own rule), while the pager's handler still raises
    # The pager's fill thread writes its one-line report of the damaged chunk while
    # faulthandler writes its own: the line can land inside faulthandler's first line.
    stderr = re.sub(r"oocarray: a chunk-backed array cannot fill bytes [^\n]*\n", "", result.stderr)
    assert stderr.count("Fatal Python error: Bus error") == 1, result.stderr
    dump = stderr.split("Fatal Python error: Bus error")[1]
    assert ("in <module>" in dump) and (("sum" in dump) == (order == "faulthandler after"))


# ---- compressed spill ----

_SPILL_CHILD = """
import os, sys
import numpy as np
import oocarray as oc

spill_dir = sys.argv[1]
oc.configure(spill_dir=spill_dir)
with oc.Manager(spill="zarr"):
    a = np.arange(4 << 20, dtype=np.int64)  # 32 MiB, 1 MiB units
    b = np.arange(4 << 20, dtype=np.int64)
    oc.spill(a)
    assert oc.location(a) == "zarr"
    files = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{fd}").startswith(spill_dir):
                files.append(fd)
        except OSError:
            pass
    assert len(files) == 1, files
    # the spill's unnamed file, zeroed: no chunk is a zstd frame any more (the encoders
    # append chunks in the order they finish, so which one is first is not known)
    size = os.fstat(int(files[0])).st_size
    with open(f"/proc/self/fd/{files[0]}", "r+b") as f:
        f.write(bytes(size))
    for round in range(2):
        for where in (slice(0, 1 << 16), slice(-(1 << 16), None)):
            try:
                np.sum(a[where])
                raise AssertionError("no error")
            except oc.CorruptChunkError as error:
                assert "compressed spill" in str(error), error
    assert (b == np.arange(4 << 20)).all()  # the process goes on
    print("CHILD OK", flush=True)
"""


@pytest.mark.skipif(not _compressed.available()[0], reason="compressed spill needs userfaultfd")
def test_compressed_spill_that_cannot_be_read_raises_in_the_touching_thread(
    tmp_path: Path,
) -> None:
    run_ok(_SPILL_CHILD, str(tmp_path))


# ---- a large chunk: many pages, every access pattern, two threads at once ----

_LARGE_CHILD = """
import sys, threading
import numpy as np
import oocarray as oc

v = oc.open(sys.argv[1]).as_ndarray()  # (2048, 512) float64, 1 MiB chunks, chunk 3 damaged
FORMS = {
    "sum": lambda: np.sum(v),
    "column": lambda: v[:, 7].sum(),  # a page per element
    "reversed copy": lambda: v[::-1].copy(),
    "transposed copy": lambda: v[700:900, :64].T.copy(),  # every page again and again
    "take": lambda: np.take(v[:, 3], np.arange(0, 2048, 3)),
    "fancy index": lambda: v[np.arange(0, 2048, 5), 9].sum(),
}
for name, form in FORMS.items():
    for round in range(2):
        try:
            form()
        except oc.CorruptChunkError:
            continue
        raise AssertionError(f"{name}: no error")
# Two threads over the same damaged chunk at once: each raises, or (reading one of the few
# placeholder pages the other still holds, and no other page of it) gets NaN, never numbers.
barrier = threading.Barrier(2)
results = []

def scan():
    barrier.wait()
    try:
        results.append(float(np.sum(v[700:1100])))
    except oc.CorruptChunkError:
        results.append("raised")

threads = [threading.Thread(target=scan) for _ in range(2)]
for t in threads:
    t.start()
for t in threads:
    t.join()
assert all(r == "raised" or np.isnan(r) for r in results), results
assert (v[:768] == np.arange(768 * 512).reshape(768, 512)).all()
assert (v[1024:] == np.arange(1024 * 512, 2048 * 512).reshape(1024, 512)).all()
print("CHILD OK", results)
"""


@needs_paging
def test_a_large_damaged_chunk_raises_for_every_access_pattern_and_thread(tmp_path: Path) -> None:
    """A thread keeps a few placeholder pages (more while it comes back to pages it gave up);
    the others go back to poison, so strided, reversed, transposed and gathered reads all
    complete and raise, and a second thread reading the same chunk faults too."""
    data = np.arange(2048 * 512, dtype=np.float64).reshape(2048, 512)
    x = oc.create(tmp_path / "a.zarr", data.shape, data.dtype, chunks=(256, 512), codec="zstd")
    x[...] = data
    chunk = tmp_path / "a.zarr" / "c" / "3" / "0"
    chunk.write_bytes(chunk.read_bytes()[:100])
    run_ok(_LARGE_CHILD, str(tmp_path / "a.zarr"))
