"""What several memory tests share."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).parents[2]


def run_child(
    code: str, env: dict[str, str] | None = None, *, timeout: float = 180
) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a fresh interpreter from the repository root, with ``env`` added to
    this process's environment; a hang fails the test through the timeout."""
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        env={**os.environ, **(env or {})},
        cwd=str(ROOT),
    )
