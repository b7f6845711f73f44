"""W11 over HDF5 by hand (not registered in __main__): ``as_ndarray()`` of a chunked HDF5
dataset (W5's (N, 64) float32 data, shuffle + gzip level 1, chunks of 4096 rows = 1 MiB), warm
page cache, against reading it with h5py and the streaming reduction over the same dataset, and
against ``as_ndarray()`` of the same data in a zstd zarr array.  Rounds are interleaved; best /
median of each side.  Run: ``python -m benchmarks.w11_hdf5_by_hand [MiB] [rounds]``."""

import os
import shutil
import sys
import tempfile
import time

import h5py
import numpy as np

import oocarray as oc
from datasets import w5_data

MiB = 1 << 20
nbytes = int(sys.argv[1]) * MiB if len(sys.argv) > 1 else 128 * MiB
rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 5
tmp = tempfile.mkdtemp()
h5_path = os.path.join(tmp, "w11.h5")
zarr_path = os.path.join(tmp, "w11.zarr")
n = w5_data.rows_for(nbytes)
rows = 4096
z = oc.create(zarr_path, (n, 64), np.float32, chunks=(rows, 64), codec="zstd")
with h5py.File(h5_path, "w") as f:
    d = f.create_dataset(
        "x",
        (n, 64),
        np.float32,
        chunks=(rows, 64),
        compression="gzip",
        compression_opts=1,
        shuffle=True,
    )
    for b in w5_data.blocks(n):
        blk = w5_data.block(b, n)
        d[b * w5_data.BLOCK_ROWS : b * w5_data.BLOCK_ROWS + len(blk)] = blk
        z[b * w5_data.BLOCK_ROWS : b * w5_data.BLOCK_ROWS + len(blk)] = blk
x = oc.open(h5_path)
zx = oc.open(zarr_path)
print(
    f"{x.nbytes / MiB:.0f} MiB logical; HDF5 {x.stored_bytes() / MiB:.0f} MiB stored "
    f"(shuffle+gzip-1), zarr {zx.stored_bytes() / MiB:.0f} MiB (zstd)"
)
os.system(f"cat {h5_path} {zarr_path}/c/*/* > /dev/null")


def paged_h5() -> np.ndarray:
    return x.as_ndarray().mean(axis=0)


def h5py_read() -> np.ndarray:
    with h5py.File(h5_path, "r") as f:
        return f["x"][...].mean(axis=0)


def stream_h5() -> np.ndarray:
    with oc.Manager(max_bytes="1G"):
        return np.asarray(x.mean(axis=0))


def paged_zarr() -> np.ndarray:
    return zx.as_ndarray().mean(axis=0)


sides = {
    "paged HDF5": paged_h5,
    "h5py ds[...]": h5py_read,
    "streaming HDF5 x.mean": stream_h5,
    "paged zarr zstd": paged_zarr,
}
times: dict[str, list[float]] = {k: [] for k in sides}
same = 0
for _ in range(rounds):
    for name, side in sides.items():
        t = time.perf_counter()
        side()
        times[name].append(time.perf_counter() - t)
        if name == "paged HDF5":
            with h5py.File(h5_path, "r") as f:
                same += int(np.array_equal(x.as_ndarray(), f["x"][...]))
for name, ts in times.items():
    ts.sort()
    print(f"{name:24s} best {ts[0]:.3f} s  median {ts[len(ts) // 2]:.3f} s")
print(f"paged HDF5 bytes equal to h5py's: {same}/{rounds}")
shutil.rmtree(tmp)
