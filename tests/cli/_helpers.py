"""Tiny arrays in every format the command line reads, and the result of a command."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

import oocarray as oc

# (20, 6) float32 with one NaN: column 2 has it.
DATA = np.arange(120, dtype=np.float32).reshape(20, 6) / 7
DATA[3, 2] = np.nan

FORMATS = ("npy", "hdf5", "zarr3", "zarr3-sharded", "zarr2")


@dataclass
class Result:
    code: int
    out: str
    err: str

    def json(self) -> Any:
        return json.loads(self.out)

    def one_error_line(self) -> str:
        """The error, checked to be exactly one line with no traceback."""
        assert "Traceback" not in self.out + self.err
        lines = self.err.strip().splitlines()
        assert len(lines) == 1, self.err
        assert lines[0].startswith("oocarray"), lines[0]
        assert ": error: " in lines[0], lines[0]
        return lines[0]


def write(fmt: str, path: Path, data: np.ndarray = DATA) -> Path:
    """``data`` written in ``fmt`` under ``path`` (a directory); returns the array's path."""
    if fmt == "npy":
        target = path / "a.npy"
        np.save(target, data)
    elif fmt == "hdf5":
        import h5py

        target = path / "a.h5"
        with h5py.File(target, "w") as f:
            f.create_dataset("x", data=data)
    elif fmt == "zarr3":
        target = path / "a.zarr"
        oc.create(target, data.shape, data.dtype, chunks=(8, 6))[...] = data
    elif fmt == "zarr3-sharded":
        target = path / "s.zarr"
        oc.create(target, data.shape, data.dtype, chunks=(4, 3), shards=(8, 6))[...] = data
    elif fmt == "zarr2":
        import zarr

        target = path / "v2.zarr"
        z = zarr.create_array(
            str(target), shape=data.shape, dtype=data.dtype, chunks=(8, 6), zarr_format=2
        )
        z[...] = data
    else:
        raise AssertionError(fmt)
    return target
