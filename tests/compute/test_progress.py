"""Progress reports (issue 21, item 9): a bar on a terminal, one summary line per long step
where stderr is a file or a pipe (cron, CI, ``nohup``, ``2> file``), nothing with
``progress=False``.

A step is "long" when it ran ``DELAY_SECONDS``: the child scripts set it to 0 (every step
reports) or to an hour (no step does), so that no test depends on how fast the machine is.
"""

from __future__ import annotations

import fcntl
import os
import pty
import struct
import subprocess
import termios
import textwrap
from pathlib import Path

import pytest

from testkit import children

STEPS = """
import sys
import numpy as np
import oocarray as oc
from oocarray._compute import _engine, _progress

_engine.TARGET_BLOCK_BYTES = 1  # a block per chunk: every step has 16 blocks
_progress.DELAY_SECONDS = float(sys.argv[1])
progress = sys.argv[3] == "on"
out = sys.argv[2]
x = oc.from_numpy(np.ones((64, 8)), chunks=(4, 8))
x.sum(progress=progress)
(x * 2).to_zarr(out + "/y.zarr", chunks=(4, 8), progress=progress)
oc.map_chunks(lambda b: b + 1, x, out=out + "/m.zarr", workers=1, progress=progress)
print("finished", file=sys.stderr)
"""


def _run(tmp_path: Path, delay: float, progress: str = "on", **redirect: object) -> str:
    script = tmp_path / "steps.py"
    script.write_text(textwrap.dedent(STEPS))
    result = children.run(
        [str(script), str(delay), str(tmp_path), progress], keep_settings=True, **redirect
    )
    assert result.returncode == 0, result.stderr
    return str(result.stderr or "")


def _summaries(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("oocarray: ")]


def test_a_pipe_gets_one_summary_line_per_long_step_and_no_bar(tmp_path: Path) -> None:
    err = _run(tmp_path, 0.0, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert "\r" not in err
    lines = _summaries(err)
    assert [line.split()[1] for line in lines] == ["compute", "to_zarr", "map_chunks"], err
    assert lines[0].startswith("oocarray: compute 4.0 KiB in ") and lines[0].endswith("/s)")
    assert lines[2].startswith("oocarray: map_chunks 16 blocks in ")
    assert err.strip().splitlines()[-1] == "finished"  # nothing else was written


def test_a_file_gets_the_same_lines(tmp_path: Path) -> None:
    log = tmp_path / "log.txt"
    with open(log, "w") as f:
        _run(tmp_path, 0.0, stdout=subprocess.DEVNULL, stderr=f)
    text = log.read_text()
    assert "\r" not in text
    assert [line.split()[1] for line in _summaries(text)] == ["compute", "to_zarr", "map_chunks"]


def test_short_steps_and_progress_false_write_nothing(tmp_path: Path) -> None:
    quick = _run(tmp_path, 3600.0, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert quick.strip() == "finished"
    (tmp_path / "off").mkdir()
    off = _run(tmp_path / "off", 0.0, "off", stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert off.strip() == "finished"


def test_a_terminal_gets_the_bar(tmp_path: Path) -> None:
    script = tmp_path / "steps.py"
    script.write_text(textwrap.dedent(STEPS))
    master, terminal = pty.openpty()
    # A terminal of 100 columns (a new pseudo-terminal has none, and tqdm draws to its width).
    fcntl.ioctl(terminal, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))
    child = children.start(
        [str(script), "0", str(tmp_path), "on"],
        keep_settings=True,
        stdin=terminal,
        stdout=terminal,
        stderr=terminal,
    )
    os.close(terminal)
    seen = b""
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: every writer of the terminal has closed it
            break
        if not chunk:
            break
        seen += chunk
    os.close(master)
    assert child.wait(timeout=120) == 0, seen.decode(errors="replace")
    text = seen.decode(errors="replace")
    for step in ("compute", "to_zarr", "map_chunks"):
        assert f"\r{step}:" in text, text
    assert "block/s" in text
    assert not _summaries(text.replace("\r", "\n")), "a terminal gets the bar, not the summary"


@pytest.mark.parametrize("args", [["--no-progress"], []])
def test_convert_writes_one_line_to_a_log(tmp_path: Path, args: list[str]) -> None:
    import numpy as np

    np.save(tmp_path / "a.npy", np.arange(4096.0).reshape(512, 8))
    code = (
        "import sys; from oocarray._compute import _progress; _progress.DELAY_SECONDS = 0.0\n"
        "from oocarray._cli import main; sys.exit(main(sys.argv[1:]))"
    )
    command = ["convert", str(tmp_path / "a.npy"), str(tmp_path / "b.h5"), "--chunks", "16,8"]
    result = children.run_python(code, *command, "--max-ram", "64M", *args, keep_settings=True)
    assert result.returncode == 0, result.stderr
    assert "\r" not in result.stderr
    expected = [] if args else ["oocarray: convert 32.0 KiB in"]
    assert [line[:29] for line in _summaries(result.stderr)] == expected, result.stderr
