"""W11 by hand (not yet registered in __main__): ``as_ndarray()`` of a zstd (N, 64) float32
store, warm page cache.  Run: ``python -m benchmarks.w11_by_hand [MiB]``."""

import os
import shutil
import sys
import tempfile
import time

import numpy as np

import oocarray as oc
from datasets import w5_data

MiB = 1 << 20
nbytes = int(sys.argv[1]) * MiB if len(sys.argv) > 1 else 512 * MiB
tmp = tempfile.mkdtemp(dir="/tmp/p13")
path = os.path.join(tmp, "w11.zarr")
n = w5_data.rows_for(nbytes)
x = oc.create(path, (n, 64), np.float32, chunks=(16384, 64), codec="zstd")
for b in w5_data.blocks(n):
    blk = w5_data.block(b, n)
    x[b * w5_data.BLOCK_ROWS : b * w5_data.BLOCK_ROWS + len(blk)] = blk
x = oc.open(path)
print("stored", x.stored_bytes() / MiB, "MiB of", x.nbytes / MiB)
os.system(f"cat {path}/c/*/* > /dev/null")


def best(f, k=5):
    ts = []
    for _ in range(k):
        t = time.perf_counter()
        r = f()
        ts.append(time.perf_counter() - t)
    return min(ts), sorted(ts)[len(ts) // 2], r


def scan():
    a = x.as_ndarray()
    return a.mean(axis=0)


def stream():
    with oc.Manager(max_bytes="1G"):
        return x.mean(axis=0)


def dask_side():
    import dask.array as da

    return da.from_zarr(path).mean(axis=0).compute(scheduler="threads")


ts_scan = best(scan)
ts_stream = best(stream)
print("full scan as_ndarray().mean(0): best {:.3f} med {:.3f} s".format(*ts_scan[:2]))
print("streaming x.mean(0):           best {:.3f} med {:.3f} s".format(*ts_stream[:2]))
try:
    ts_dask = best(dask_side, 5)
    print("dask from_zarr mean(0):        best {:.3f} med {:.3f} s".format(*ts_dask[:2]))
except ImportError:
    pass
print(
    "max |diff| of the means (float32 accumulation in NumPy):",
    float(np.abs(ts_scan[2] - ts_stream[2]).max()),
)
rng = np.random.default_rng(0)
rows = np.sort(rng.integers(0, n, 2000))


def rnd_paged():
    a = x.as_ndarray()
    return a[rows]


def rnd_x():
    return x[rows]


tp = best(rnd_paged)
tx = best(rnd_x)
assert np.array_equal(tp[2], tx[2])
print("2000 random rows, cold as_ndarray: best {:.3f} med {:.3f} s".format(*tp[:2]))
print("2000 random rows, x[rows]:         best {:.3f} med {:.3f} s".format(*tx[:2]))
a = x.as_ndarray()
a[rows]
warm = a
tw = best(lambda: warm[rows])
print("2000 random rows, warm as_ndarray: best {:.4f} med {:.4f} s".format(*tw[:2]))
with oc.Manager(max_bytes="128M") as m:
    a = x.as_ndarray()
    t = time.perf_counter()
    r = a.mean(axis=0)
    dt = time.perf_counter() - t
    print(
        f"scan under a 128M budget: {dt:.3f} s, peak {m.stats().peak_bytes / MiB:.1f} MiB,",
        f"stats {x.paging_stats()[-1]}",
    )
    del a
shutil.rmtree(tmp)
