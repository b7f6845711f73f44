"""``oocarray rechunk``: the plan printed first, the output exact, errors as one line."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import h5py
import numpy as np
import zarr

from tests.cli._helpers import Result

VALUES = np.arange(60 * 40, dtype="f4").reshape(60, 40)


def test_rechunk_hdf5_to_zarr(tmp_path: Path, cli: Callable[..., Result]) -> None:
    src = tmp_path / "in.h5"
    with h5py.File(src, "w") as f:
        f.create_dataset("t", data=VALUES, chunks=(1, 40))
    dst = tmp_path / "out.zarr"
    dry = cli("rechunk", src, dst, "--chunks=-1,8", "--dry-run")
    assert dry.code == 0 and "direct" in dry.out and not dst.exists()
    done = cli("rechunk", src, dst, "--chunks", "60,8", "--max-ram", "64K", "--no-progress")
    assert done.code == 0, done.err
    assert done.out.startswith("rechunk (60, 40) float32")
    z = zarr.open_array(dst, mode="r")
    assert z.chunks == (60, 8)
    np.testing.assert_array_equal(z[...], VALUES)
    again = cli("rechunk", src, dst, "--chunks", "60,8", "--no-progress")
    assert again.code == 1 and "already holds" in again.one_error_line()
    assert cli("rechunk", src, dst, "--chunks", "30,_", "--overwrite", "--no-progress").code == 0
    assert zarr.open_array(dst, mode="r").chunks == (30, 40)


def test_rechunk_with_a_codec_and_shards(tmp_path: Path, cli: Callable[..., Result]) -> None:
    src = tmp_path / "in.npy"
    np.save(src, VALUES)
    dst = tmp_path / "out.zarr"
    done = cli(
        "rechunk",
        src,
        dst,
        "--chunks",
        "6,8",
        "--shards",
        "30,40",
        "--codec",
        "lz4",
        "--max-ram",
        "1M",
        "--no-progress",
    )
    assert done.code == 0, done.err
    z = zarr.open_array(dst, mode="r")
    assert (z.chunks, z.shards) == ((6, 8), (30, 40))
    assert "lz4" in str(z.metadata.to_dict()["codecs"]).lower()
    np.testing.assert_array_equal(z[...], VALUES)


def test_rechunk_usage_errors(tmp_path: Path, cli: Callable[..., Result]) -> None:
    src = tmp_path / "in.zarr"
    zarr.create_array(src, shape=(4, 4), dtype="i4", chunks=(1, 4))[...] = 1
    assert cli("rechunk", src, tmp_path / "o.zarr", "--chunks", "2").code == 2
    assert cli("rechunk", src, tmp_path / "o.zarr", "--chunks", "0,1").code == 2
    tight = cli("rechunk", src, tmp_path / "o.zarr", "--chunks", "4,4", "--max-ram", "10")
    assert tight.code != 0 and "at least" in tight.err
