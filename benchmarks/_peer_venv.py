"""Peers that cannot share the benchmarks' environment (rechunker needs zarr<3, xarray-beam
brings Apache Beam's pins), each in a virtual environment of its own, built with pip on first
use and kept for later runs.

The environments live under ``$OOCARRAY_BENCH_VENVS`` (default
``~/.cache/oocarray/benchmark-venvs``).  One is used only once its install completed (a
marker holding its requirements is written last), so an interrupted or changed one is built
again; where pip cannot install it (no index reachable), the peer is reported as not run,
with pip's reason.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

INSTALL_TIMEOUT = 1200  # seconds


@dataclass(frozen=True, slots=True)
class PeerEnv:
    """A peer's own environment: its name and the requirements pip installs into it."""

    name: str
    requirements: tuple[str, ...]


# rechunker 0.5 (its latest) pins zarr<3; crc32c lets numcodecs 0.15 read checksummed chunks.
RECHUNKER = PeerEnv("rechunker", ("rechunker==0.5.*", "zarr>=2.18,<3", "dask[array]", "crc32c"))
# xarray-beam brings Apache Beam, whose pins (pyarrow, protobuf, ...) are its own.
XARRAY_BEAM = PeerEnv("xarray-beam", ("xarray-beam==0.11.*",))


def venvs_root() -> Path:
    default = Path.home() / ".cache" / "oocarray" / "benchmark-venvs"
    return Path(os.environ.get("OOCARRAY_BENCH_VENVS", default))


def interpreter(env: PeerEnv) -> tuple[str | None, str]:
    """The Python of ``env``'s environment, built first where it is missing or incomplete;
    or None and why it could not be built."""
    root = venvs_root() / env.name
    python = root / "bin" / "python"
    marker = root / "installed"
    wanted = "\n".join(env.requirements)
    if marker.is_file() and marker.read_text() == wanted and python.exists():
        return str(python), ""
    # Rebuilt only where it is an environment (``$OOCARRAY_BENCH_VENVS`` may name a folder
    # that holds other things): anything else there is left alone.
    if root.exists() and not (root / "pyvenv.cfg").is_file():
        return None, f"{env.name} not run: {root} is not an environment made here; not removed"
    shutil.rmtree(root, ignore_errors=True)
    steps = (
        [sys.executable, "-m", "venv", str(root)],
        [str(python), "-m", "pip", "install", "-q", *env.requirements],
    )
    for step in steps:
        try:
            done = subprocess.run(step, capture_output=True, text=True, timeout=INSTALL_TIMEOUT)
        except (OSError, subprocess.TimeoutExpired) as error:
            reason = str(error)
        else:
            if done.returncode == 0:
                continue
            lines = [s for s in done.stderr.splitlines() if s.startswith("ERROR")]
            reason = (lines or done.stderr.strip().splitlines() or ["no output"])[-1]
        shutil.rmtree(root, ignore_errors=True)
        return None, f"{env.name} not run: its environment could not be built: {reason[:160]}"
    marker.write_text(wanted)
    return str(python), ""
