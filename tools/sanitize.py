"""Run the native-facing tests against a sanitizer build of the extension (issue 15, item 6).

    python tools/sanitize.py --asan     # AddressSanitizer + UndefinedBehaviorSanitizer
    python tools/sanitize.py --tsan     # ThreadSanitizer (the handler and chunk reader tests)
    python tools/sanitize.py --asan -- -x -k spill tests/memory/test_spill.py  # own pytest args

The extension is built with ``OOCARRAY_SANITIZE=...`` (read by ``setup.py``: ``-fsanitize=...
-fno-omit-frame-pointer -O1 -g`` for compiling and linking) into ``build/sanitize-<kind>/``, never
over the normal ``oocarray/_native*.so``.  A ``sitecustomize.py`` written beside it loads that
copy as ``oocarray._native`` before anything imports oocarray, in the test process and in every
child interpreter the tests start (``PYTHONPATH`` reaches them).  The sanitizer runtime is
preloaded (``LD_PRELOAD``) because the interpreter itself is not instrumented.

The tests see ``OOCARRAY_SANITIZER=asan`` (or ``tsan``) and skip what cannot mean anything under
a sanitizer (``pytest.mark.no_sanitizer``: RSS and timing budgets, cgroup memory limits).  Leak
detection is off: CPython keeps its objects until exit by design.  See RELIABILITY.md, "Native
code under sanitizers", for what was run and found.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# The tests that reach native code: the handler and manager tree, spill and moves (userfaultfd),
# workspaces, the pager behind x.as_ndarray(), the chunk reader and writer, the compute engine.
ASAN_TESTS = [
    "tests/memory",
    "tests/storage/test_store_contract.py",
    "tests/storage/test_as_ndarray_refusals.py",
    "tests/storage/test_as_ndarray_writeback.py",
    "tests/storage/test_hdf5_chunks.py",
    "tests/storage/test_zarr_chunks.py",
    "tests/storage/test_chunk_reads.py",
    "tests/storage/test_chunk_writes.py",
    "tests/storage/test_chunk_damage.py",
    "tests/storage/test_as_ndarray_damage.py",
    "tests/compute/test_engine.py",
]
# ThreadSanitizer: the handler under threads and the chunk reader's native pool.
TSAN_TESTS = [
    "tests/memory/test_handler.py",
    "tests/memory/test_manager.py",
    "tests/storage/test_chunk_reads.py",
    "tests/reliability/test_concurrency.py",
    # ThreadSanitizer refuses to start threads in a child forked from a threaded process
    # ("starting new threads after multi-threaded fork is not supported").
    "--deselect=tests/storage/test_chunk_reads.py::test_reads_work_in_a_forked_child",
    # Threads spilling each other's arrays: the writers are held by userfaultfd write-protect
    # faults, a synchronisation in the kernel that ThreadSanitizer cannot see; it reports the
    # copy as a race with every earlier write and spends minutes per report (a hang).
    "--deselect=tests/reliability/test_concurrency.py"
    "::test_threads_share_one_budgeted_manager_that_spills",
    # The pager (reader and decode workers) behind x.as_ndarray() and compressed spill, less
    # the tests that fork a threaded process (as above) and the kill -9 loop, whose child did
    # not start under ThreadSanitizer inside pytest (it does when run alone).
    "tests/storage/test_store_contract.py",
    "tests/storage/test_as_ndarray_writeback.py",
    "tests/memory/test_compressed_spill.py",
    "-k",
    "not fork and not kill_minus_nine",
]

KINDS = {
    "asan": ("address,undefined", "libasan.so"),
    "tsan": ("thread", "libtsan.so"),
}

SITECUSTOMIZE = '''\
"""Written by tools/sanitize.py: load the sanitizer build of oocarray._native."""
import importlib.util
import sys

_spec = importlib.util.spec_from_file_location("oocarray._native", {path!r})
_module = importlib.util.module_from_spec(_spec)
sys.modules["oocarray._native"] = _module
_spec.loader.exec_module(_module)
'''

TSAN_SUPPRESSIONS = """\
# The interpreter is not instrumented: its own accesses (reference counts, the GIL's fast
# paths, pymalloc) look like races to ThreadSanitizer, and are suppressed by name below; races
# with a frame in _native are kept.  (No called_from_lib:libpython3: it would also hide the
# interpreter's calls to pthread and semaphore functions, the GIL's hand-overs among them, and
# every access ordered only by the GIL would then be reported as a race.)
# Reference counts are the interpreter's, changed under the GIL; inlined into _native they are
# instrumented, but the GIL hand-over between them happens in uninstrumented code.
race:Py_INCREF
race:Py_DECREF
race:Py_XINCREF
race:Py_XDECREF
race:_Py_NewRef
race:_Py_XNewRef
race:_Py_IsImmortal
race:_PyEval_EvalFrameDefault
race:_Py_Dealloc
race:PyObject_Malloc
race:PyObject_Free
race:take_gil
race:drop_gil
race:_multiarray_umath
race:libopenblas
race:libzstd
race:zstd.cpython
race:libblosc
race:libz.so
race:liblz4
called_from_lib:_socket.cpython
called_from_lib:select.cpython
race:sock_close
race:pyepoll_internal_close
"""


def build(kind: str) -> Path:
    """Build the sanitizer copy of the extension; return the directory for ``PYTHONPATH``."""
    flags, _ = KINDS[kind]
    base = ROOT / "build" / f"sanitize-{kind}"
    env = dict(os.environ, OOCARRAY_SANITIZE=flags)
    subprocess.run(
        [
            sys.executable,
            "setup.py",
            "-q",
            "build_ext",
            "--build-lib",
            str(base / "lib"),
            "--build-temp",
            str(base / "tmp"),
        ],
        cwd=ROOT,
        env=env,
        check=True,
    )
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    so = base / "lib" / "oocarray" / f"_native{suffix}"
    if not so.exists():
        raise SystemExit(f"sanitize: {so} was not built")
    site = base / "site"
    site.mkdir(parents=True, exist_ok=True)
    (site / "sitecustomize.py").write_text(SITECUSTOMIZE.format(path=str(so)))
    if kind == "tsan":
        (base / "tsan.supp").write_text(TSAN_SUPPRESSIONS)
    return site


def runtime(kind: str) -> str:
    """The path of the sanitizer runtime to preload (from the compiler that built it)."""
    _, lib = KINDS[kind]
    path = subprocess.run(
        ["gcc", f"-print-file-name={lib}"], capture_output=True, text=True, check=True
    ).stdout.strip()
    if not os.path.isabs(path):
        raise SystemExit(f"sanitize: gcc has no {lib}")
    return path


def environment(kind: str, site: Path) -> dict[str, str]:
    """The environment of the test run: preloaded runtime, options, the sitecustomize path."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(site), env.get("PYTHONPATH")]))
    env["LD_PRELOAD"] = runtime(kind)
    env["OOCARRAY_SANITIZER"] = kind
    # The interpreter's own allocations are not freed at exit; pymalloc hides small objects.
    env["PYTHONMALLOC"] = "malloc"
    if kind == "asan":
        env["ASAN_OPTIONS"] = ":".join(
            [
                "detect_leaks=0",
                "abort_on_error=1",
                "halt_on_error=1",
                "allocator_may_return_null=1",
                "detect_stack_use_after_return=0",
                # A damaged chunk behind x.as_ndarray() is a SIGBUS that the pager's own
                # handler turns into CorruptChunkError (native/pager_errors.c); ASan's would
                # take it first and report it.
                "handle_sigbus=0",
                "print_summary=1",
                # Reports go to files too: pytest captures a test's stderr, and a report that
                # halts the run would be lost with it (the run only exits 1).
                f"log_path={ROOT / 'build' / 'sanitize-asan' / 'report'}",
            ]
        )
        env["UBSAN_OPTIONS"] = "halt_on_error=1:print_stacktrace=1"
    else:
        supp = ROOT / "build" / "sanitize-tsan" / "tsan.supp"
        env["TSAN_OPTIONS"] = ":".join(
            [
                f"suppressions={supp}",
                # Reports go to files (pytest captures and drops a passing test's stderr).
                f"log_path={supp.parent / 'report'}",
                "halt_on_error=0",
                "exitcode=66",
                "report_signal_unsafe=0",
                # The pager's SIGBUS handler answers damaged chunks (see asan above).
                "handle_sigbus=0",
                "second_deadlock_stack=1",
                "history_size=4",
                # TSan turns subprocess's vfork into a fork, which runs the pager's atfork
                # handler (it restarts its threads in the child) before the exec: a child
                # started while a chunk-backed array is alive (the tiny_tmpfs fixture's mount)
                # died at once, unseen but for a report file.  Forking tests stay deselected.
                "die_after_fork=0",
            ]
        )
    return env


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--asan", action="store_true", help="AddressSanitizer + UBSan")
    group.add_argument("--tsan", action="store_true", help="ThreadSanitizer")
    parser.add_argument("--build-only", action="store_true", help="build, run nothing")
    parser.add_argument("pytest_args", nargs="*", help="pytest arguments (after --)")
    args = parser.parse_args(argv)
    kind = "asan" if args.asan else "tsan"
    site = build(kind)
    if args.build_only:
        print(f"sanitize: built {kind}; PYTHONPATH={site}")
        return 0
    tests = args.pytest_args or (ASAN_TESTS if kind == "asan" else TSAN_TESTS)
    # one process: the sanitizer runtime is preloaded into it
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-n", "0", *tests]
    if not args.pytest_args:
        command.insert(3, "-q")
    if kind == "tsan":
        # ThreadSanitizer maps its shadow at fixed addresses; the kernel's randomized layout
        # (vm.mmap_rnd_bits=32 on recent kernels) can overlap it, so run without ASLR.
        command = ["setarch", os.uname().machine, "-R", *command]
    print("sanitize:", " ".join(command), flush=True)
    reports = ROOT / "build" / f"sanitize-{kind}"
    for old in reports.glob("report.*"):
        old.unlink()
    code = subprocess.run(command, cwd=ROOT, env=environment(kind, site), check=False).returncode
    for report in sorted(reports.glob("report.*")):
        print(f"sanitize: a report in {report}", flush=True)
    return code


if __name__ == "__main__":
    raise SystemExit(main())
