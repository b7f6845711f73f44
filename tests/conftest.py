from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import settings

import oocarray as oc
from oocarray import _native
from oocarray._memory import _manager

# "ci" (the default, and what CI runs): the same examples every run, so that chance cannot fail
# a landing.  "long" (HYPOTHESIS_PROFILE=long): new random examples every run, many more of
# them, to explore; a failure it finds prints a seed to reproduce it with.  Neither has a
# deadline: an example slowed by other work on the machine is not a failure.
settings.register_profile("ci", derandomize=True, database=None, print_blob=True, deadline=None)
settings.register_profile("long", max_examples=2000, database=None, print_blob=True, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE") or "ci")

# Set by tools/sanitize.py ("asan" or "tsan") when the extension under test is a sanitizer build.
SANITIZER = os.environ.get("OOCARRAY_SANITIZER", "")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under a sanitizer, skip the tests marked ``no_sanitizer`` (memory and time budgets)."""
    if not SANITIZER:
        return
    skip = pytest.mark.skip(reason=f"measures memory or time, which {SANITIZER} changes")
    for item in items:
        if item.get_closest_marker("no_sanitizer"):
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _restore_settings() -> Iterator[None]:
    """Each test starts from the default settings and leaves no manager active."""
    before = oc.config()
    handler = _native.get_handler()
    yield
    oc.configure(
        max_bytes=before.max_bytes,
        max_physical_bytes=before.max_physical_bytes,
        spill_dir=before.spill_dir,
        max_spill_bytes=before.max_spill_bytes,
        trace=before.trace,
    )
    assert _manager.active_manager() is None, "a test left a manager active"
    assert _native.get_handler() is handler, "a test left the NumPy handler changed"


@pytest.fixture
def tiny_tmpfs(tmp_path: Path) -> Iterator[Path]:
    """A 4 MiB tmpfs (root only): a disk to fill."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mount_point = tmp_path / "tiny"
    mount_point.mkdir()
    result = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mount_point)],
        capture_output=True,
        check=False,
    )
    if result.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {result.stderr.decode().strip()}")
    yield mount_point
    subprocess.run(["umount", str(mount_point)], check=False)
