"""A memory cgroup of our own with a hard limit, to run a child process under: the kernel
counts every page the child uses (anonymous memory, shared memory, the page cache of the files
it reads or writes, spill files included) and kills it (SIGKILL, an OOM kill) when it cannot
reclaim enough below the limit.

cgroup v2 (``memory.max``, ``memory.swap.max`` 0) where the memory controller is enabled for
this process's cgroup, else cgroup v1 (``memory.limit_in_bytes``).  Making one needs root:
:func:`memory_cgroup` raises :class:`CgroupUnavailable` saying why where none can be made, and
the tests that need one skip with that reason.  Used by the hard-limit tests
(``tests/reliability``) and the hard-limit benchmarks (``benchmarks/w4_hard.py``,
``benchmarks/w11_hard.py``).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import subprocess
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass


class CgroupUnavailable(Exception):
    """No memory cgroup can be made here; the message says why."""


@dataclass
class Cgroup:
    """A memory cgroup of our own, with a hard limit."""

    path: str
    version: int

    @property
    def procs(self) -> str:
        return os.path.join(self.path, "cgroup.procs")

    def command(self, argv: Sequence[str]) -> list[str]:
        """The command that runs ``argv`` inside this cgroup from its first instruction: a
        shell writes its own process id into ``cgroup.procs``, then becomes ``argv``."""
        return ["sh", "-c", 'echo $$ > "$0" && exec "$@"', self.procs, *argv]

    def _read(self, name: str) -> str:
        with open(os.path.join(self.path, name), encoding="ascii") as f:
            return f.read()

    def peak_bytes(self) -> int | None:
        """The highest usage the kernel saw (page cache included), where it says."""
        name = "memory.peak" if self.version == 2 else "memory.max_usage_in_bytes"
        try:
            return int(self._read(name).split()[0])
        except (OSError, ValueError, IndexError):
            return None

    def oom_kills(self) -> int | None:
        """How many processes the kernel killed for this cgroup's limit, where it says."""
        name = "memory.events" if self.version == 2 else "memory.oom_control"
        try:
            for line in self._read(name).splitlines():
                key, _, value = line.partition(" ")
                if key == "oom_kill":
                    return int(value)
        except (OSError, ValueError):
            pass
        return None


def _own_cgroup(controller: str) -> str | None:
    """This process's cgroup path in the v1 hierarchy of ``controller`` ("" for v2)."""
    with open("/proc/self/cgroup", encoding="ascii") as f:
        for line in f:
            _, controllers, path = line.rstrip("\n").split(":", 2)
            if controllers.split(",") == [controller] or (controller == "" and controllers == ""):
                return path
    return None


def _write(path: str, value: str) -> None:
    with open(path, "w", encoding="ascii") as f:
        f.write(value)


def _v2_parent() -> str:
    path = _own_cgroup("")
    if path is None:
        raise CgroupUnavailable("this process is in no cgroup v2 hierarchy")
    for mount in ("/sys/fs/cgroup", "/sys/fs/cgroup/unified"):
        parent = os.path.join(mount, path.lstrip("/"))
        try:
            with open(os.path.join(parent, "cgroup.controllers"), encoding="ascii") as f:
                controllers = f.read().split()
        except OSError:
            continue
        if "memory" not in controllers:
            raise CgroupUnavailable(
                "the memory controller is not enabled in this process's cgroup v2 "
                f"({parent}: controllers {controllers})"
            )
        return parent
    raise CgroupUnavailable("no cgroup v2 file system is mounted")


@contextlib.contextmanager
def memory_cgroup(limit_bytes: int) -> Iterator[Cgroup]:
    """A new memory cgroup limited to ``limit_bytes`` (no swap), removed afterwards.

    Raises :class:`CgroupUnavailable` saying why where none can be made (not root, no memory
    controller, a read-only cgroup file system, ...).
    """
    if os.geteuid() != 0:
        raise CgroupUnavailable("making a cgroup needs root")
    name = f"oocarray-limit-{os.getpid()}-{secrets.token_hex(4)}"
    group: Cgroup | None = None
    reasons = []
    try:
        parent = _v2_parent()
        path = os.path.join(parent, name)
        os.mkdir(path)
        group = Cgroup(path, 2)
        _write(os.path.join(path, "memory.max"), str(limit_bytes))
        with contextlib.suppress(OSError):  # no swap accounting: nothing to turn off
            _write(os.path.join(path, "memory.swap.max"), "0")
    except (CgroupUnavailable, OSError) as error:
        reasons.append(f"v2: {error}")
        if group is not None:
            with contextlib.suppress(OSError):
                os.rmdir(group.path)
            group = None
        own = _own_cgroup("memory")
        try:
            if own is None:
                raise CgroupUnavailable("no cgroup v1 memory hierarchy") from None
            path = os.path.join("/sys/fs/cgroup/memory", own.lstrip("/"), name)
            os.mkdir(path)
            group = Cgroup(path, 1)
            _write(os.path.join(path, "memory.limit_in_bytes"), str(limit_bytes))
            with contextlib.suppress(OSError):
                _write(os.path.join(path, "memory.memsw.limit_in_bytes"), str(limit_bytes))
        except (CgroupUnavailable, OSError) as error1:
            reasons.append(f"v1: {error1}")
            if group is not None:
                with contextlib.suppress(OSError):
                    os.rmdir(group.path)
            raise CgroupUnavailable("; ".join(reasons)) from None
    try:
        yield group
    finally:
        for _ in range(100):  # the last process may take a moment to leave
            try:
                os.rmdir(group.path)
                break
            except FileNotFoundError:
                break
            except OSError:
                time.sleep(0.05)


def unavailable(limit_bytes: int = 1 << 30) -> str | None:
    """Why no memory cgroup of ``limit_bytes`` can be made here, or None where one can (it
    is made and removed): the tests that need one skip with this reason."""
    try:
        with memory_cgroup(limit_bytes):
            return None
    except CgroupUnavailable as error:
        return str(error)


def run_after_warm_up(child: subprocess.Popen[str], limit_bytes: int, timeout: float) -> str:
    """Move ``child`` into a cgroup of ``limit_bytes`` once it has warmed up, let it run, and
    return what it printed.

    The child prints ``ready`` once its imports and set-up are done (memory the limit is not
    about), then waits for a line on its stdin before the work under test.  Raises
    :class:`CgroupUnavailable` where no cgroup can be made (the child is killed), and
    ``AssertionError`` when the child failed or the kernel OOM-killed it."""
    try:
        assert child.stdout is not None and child.stdin is not None
        ready = child.stdout.readline().strip()
        assert ready == "ready", child.stderr and child.stderr.read()
        with memory_cgroup(limit_bytes) as group:
            with open(group.procs, "w") as procs:
                procs.write(str(child.pid))
            child.stdin.write("go\n")
            child.stdin.flush()
            out, errors = child.communicate(timeout=timeout)
            kills = group.oom_kills()
    finally:
        if child.poll() is None:
            child.kill()
            child.communicate()
    assert child.returncode == 0, f"rc {child.returncode}, OOM kills {kills}: {errors[-3000:]}"
    assert kills in (None, 0), f"{kills} OOM kills"
    return out
