"""Scratch directories for the disk benchmarks (W3, W4): free space, file system, spill_dir."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager

import oocarray as oc

GiB = 1 << 30
# Below this much free disk the disk benchmarks scale their sizes down (and say so).
COMFORTABLE_FREE_BYTES = 10 * GiB


def free_bytes(path: str) -> int:
    """Free disk space usable by this user at ``path``."""
    return shutil.disk_usage(path).free


def fs_description(path: str) -> str:
    """``ext4 on /dev/vda``: the file system holding ``path``, from the longest mount prefix."""
    real = os.path.realpath(path)
    best = ("", "?", "?")
    try:
        with open("/proc/self/mounts", encoding="utf-8") as mounts:
            for line in mounts:
                device, mount_point, fs_type = line.split()[:3]
                mount_point = mount_point.replace("\\040", " ")
                inside = real == mount_point or real.startswith(mount_point.rstrip("/") + "/")
                if inside and len(mount_point) >= len(best[0]):
                    best = (mount_point, fs_type, device)
    except OSError:
        return "unknown file system"
    return f"{best[1]} on {best[2]}"


@contextmanager
def scratch_spill_dir(prefix: str) -> Iterator[str]:
    """A fresh temporary directory, set as oocarray's ``spill_dir`` for the block.

    The previous ``spill_dir`` is restored and the directory removed afterwards.
    """
    path = tempfile.mkdtemp(prefix=prefix)
    previous = oc.config().spill_dir
    try:
        oc.configure(spill_dir=path)
        yield path
    finally:
        oc.configure(spill_dir=previous)
        shutil.rmtree(path, ignore_errors=True)
