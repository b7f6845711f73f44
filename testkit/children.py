"""The one runner of child Python interpreters, for tests (and anything else) that must see a
fresh process: a crash, a signal, an exit status, memory measured from the start, settings read
from the environment.

Every child runs ``sys.executable`` with this repository first on ``PYTHONPATH`` (so that it
imports the tree under test, also from another directory), its output captured as text, and a
timeout that only guards against a hang (no test depends on how long a child takes).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
HANG_GUARD_S = 180.0
CHILD_OK = "CHILD OK"


def child_env(
    env: Mapping[str, str] | None = None, *, keep_settings: bool = False, **extra: str
) -> dict[str, str]:
    """The environment of a child: this process's, with this repository importable.

    Parameters
    ----------
    env
        Variables to set (added last, with ``extra``).
    keep_settings
        Keep the ``OOCARRAY_*`` settings of this process (a suite run in a mode, say
        ``OOCARRAY_MOVE_GUARD=signal``, passes it on); by default they are removed, so that the
        child starts from the library's defaults.
    """
    child = {k: v for k, v in os.environ.items() if keep_settings or not k.startswith("OOCARRAY_")}
    child["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), child.get("PYTHONPATH")]))
    child.update(env or {})
    child.update(extra)
    return child


def _popen_kwargs(
    cwd: str | Path | None,
    env: Mapping[str, str] | None,
    keep_settings: bool,
    kwargs: dict[str, Any],
) -> dict[str, Any]:
    kwargs.setdefault("stdout", subprocess.PIPE)
    kwargs.setdefault("stderr", subprocess.PIPE)
    return {
        "cwd": str(ROOT if cwd is None else cwd),
        "env": child_env(env, keep_settings=keep_settings),
        "text": True,
        **kwargs,
    }


def run(
    argv: Sequence[str],
    *,
    timeout: float = HANG_GUARD_S,
    cwd: str | Path | None = None,
    env: Mapping[str, str] | None = None,
    keep_settings: bool = False,
    wrap: Callable[[list[str]], list[str]] | None = None,
    **kwargs: Any,
) -> subprocess.CompletedProcess[str]:
    """Run ``python ARGV`` to its end; a hang fails the test through the timeout.

    Parameters
    ----------
    argv
        The interpreter's arguments (``["-m", "oocarray", ...]``, ``["script.py"]``, ...).
    timeout
        A hang guard only.
    cwd
        The working directory (the repository's root by default).
    env, keep_settings
        As for :func:`child_env`.
    wrap
        Makes the command that is run from ``[python, *argv]``: a
        :meth:`testkit.cgroup.Cgroup.command` runs the child inside a memory cgroup.
    **kwargs
        Passed to :func:`subprocess.run` (``stdout``/``stderr`` replace the default pipes,
        ``input`` feeds stdin).
    """
    command = [sys.executable, *argv]
    return subprocess.run(
        command if wrap is None else wrap(command),
        timeout=timeout,
        check=False,
        **_popen_kwargs(cwd, env, keep_settings, kwargs),
    )


def run_python(
    code: str, *args: str, flags: Sequence[str] = (), **kwargs: Any
) -> subprocess.CompletedProcess[str]:
    """Run ``code`` (dedented) in a fresh interpreter, with ``sys.argv[1:] == args``;
    ``flags`` go to the interpreter (``-X``, ``-W``, ...).  Keywords as for :func:`run`."""
    return run([*flags, "-c", textwrap.dedent(code), *args], **kwargs)


def run_ok(code: str, *args: str, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    """Run a child that must exit 0 after printing ``CHILD OK`` (it caught what it had to)."""
    result = run_python(code, *args, **kwargs)
    assert result.returncode == 0, result.stdout + result.stderr
    assert CHILD_OK in result.stdout, result.stdout + result.stderr
    return result


def start(
    argv: Sequence[str],
    *,
    cwd: str | Path | None = None,
    env: Mapping[str, str] | None = None,
    keep_settings: bool = False,
    **kwargs: Any,
) -> subprocess.Popen[str]:
    """Start ``python ARGV``, its stdout and stderr pipes of text unless ``kwargs`` say
    otherwise; the caller waits for it (with a timeout) or kills it.  Keywords as for
    :func:`run`."""
    return subprocess.Popen(
        [sys.executable, *argv], **_popen_kwargs(cwd, env, keep_settings, kwargs)
    )


def start_python(code: str, *args: str, **kwargs: Any) -> subprocess.Popen[str]:
    """Start ``code`` (dedented) in a fresh interpreter; keywords as for :func:`start`."""
    return start(["-c", textwrap.dedent(code), *args], **kwargs)


def wait_forked(pid: int, what: str, timeout: float = HANG_GUARD_S) -> int:
    """The exit code of a child this process forked (``os.fork()``), waited for without
    blocking a signal or the GIL for long; killed, and an AssertionError naming ``what``, when
    it is still running after ``timeout`` (a guard against a hang, never reached when it
    works)."""
    pause = threading.Event()
    for _ in range(int(timeout / 0.01)):
        ended, status = os.waitpid(pid, os.WNOHANG)
        if ended == pid:
            return os.waitstatus_to_exitcode(status)
        pause.wait(0.01)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    raise AssertionError(f"the forked child did not {what}")
