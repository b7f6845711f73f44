"""The code each W15 side runs in its fresh process (``benchmarks/w15_rechunk.py``), and the
peers that need an environment and a view of the source of their own."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from benchmarks._peer_venv import RECHUNKER, XARRAY_BEAM, PeerEnv
from benchmarks._source_views import xarray_view, zarr_v2_view

# The side that measures the floor: the codec work alone (not a peer, its output is not the
# data's).
FLOOR = "floor"

CHILD = """
import json, resource, sys, time
src, out, work = sys.argv[1], sys.argv[2], sys.argv[5]
target, budget = tuple(json.loads(sys.argv[3])), int(sys.argv[4])
start = time.perf_counter()
{body}
seconds = time.perf_counter() - start
# VmHWM, not ru_maxrss: Linux keeps ru_maxrss across exec, so a child would report the
# benchmark process's own peak at the fork.
with open("/proc/self/status") as status:
    peak = next(int(s.split()[1]) * 1024 for s in status if s.startswith("VmHWM"))
print("RESULT " + json.dumps([seconds, peak]))
"""

SIDES = {
    "oocarray": """
import oocarray as oc
with oc.Manager("w15", max_bytes=budget):
    oc.rechunk(oc.open(src), target, out, progress=False)
""",
    # Not a peer: the codec work alone, what no rechunk can skip -- every source chunk decoded
    # once and every target chunk encoded (and its file written) once, on every core, with
    # nothing moved between them.  The values encoded are a source chunk's, laid out as a
    # target chunk: random floats compress alike in either order.  The files are written as
    # oc.rechunk writes them: past the page cache where the output outgrows it.
    FLOOR: """
import itertools, math, numpy as np, oocarray as oc
from concurrent.futures import ThreadPoolExecutor
from oocarray._compute._limits import outgrows_page_cache
from oocarray._storage._pool import workers
x = oc.open(src)
s = x._store
y = oc.create(out, x.shape, x.dtype, chunks=target)
d = y._store
d.write_direct(outgrows_page_cache(x.nbytes))
sample = np.resize(s.read_chunk((0,) * x.ndim).ravel(), target)
def grid(chunks):
    return itertools.product(*(range(-(-n // c)) for n, c in zip(x.shape, chunks)))
def decode(chunk):
    s.read_chunk(chunk, scratch=True)
def encode(block):
    valid = tuple(slice(0, r.stop - r.start) for r in d.block_region(block))
    d.write_blocks([(block, sample[valid])])
start = time.perf_counter()  # the timed part: decode, then encode
with ThreadPoolExecutor(workers()) as pool:
    list(pool.map(decode, grid(s.chunks)))
    list(pool.map(encode, grid(target)))
""",
    "dask tasks": """
import dask, dask.array as da
with dask.config.set(scheduler="threads"):
    da.from_zarr(src).rechunk(target, method="tasks").to_zarr(out)
""",
    "dask p2p": """
import dask.array as da, distributed, resource
if __name__ == "__main__":
    with distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True,
        memory_limit=budget // 2 + (256 << 20),
        host="127.0.0.1", dashboard_address=None,
    ) as cluster, distributed.Client(cluster) as client:
        da.from_zarr(src).rechunk(target, method="p2p").to_zarr(out)
        workers = client.run(lambda: resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
    print("WORKERS " + json.dumps(max(workers.values()) * 1024))  # spawned: ru_maxrss is theirs
""",
    "cubed": """
import cubed, zarr
spec = cubed.Spec(work_dir=work, allowed_mem=budget)
x = cubed.from_zarr(src, spec=spec)
store = zarr.open_array(out, mode="w", shape=x.shape, dtype=x.dtype, chunks=target)
cubed.to_zarr(x.rechunk(target), store)
""",
    # In its own environment (zarr 2), on the source's chunk files described as zarr v2.
    "rechunker": """
import dask, zarr
from rechunker import rechunk
source = zarr.open_array(src, mode="r")
codecs = {"filters": source.filters, "compressor": source.compressor}
plan = rechunk(
    source, target, budget, out, target_options=codecs,
    temp_store=work + "/intermediate.zarr", temp_options=codecs,
)
with dask.config.set(scheduler="threads"):
    plan.execute()
""",
    # In its own environment (Apache Beam), on the source as an xarray dataset's variable x;
    # Beam's local runner with a worker process per core (its thread mode fails on this
    # pipeline: "Invalid PaneInfoEncoding").
    "xarray-beam": """
import resource
import apache_beam as beam, xarray_beam as xbeam
from apache_beam.options.pipeline_options import PipelineOptions
source, source_chunks = xbeam.open_zarr(src, consolidated=False)
target_chunks = dict(zip(source.x.dims, target))
encoding = {"x": {"compressors": source.x.encoding["compressors"]}}
options = PipelineOptions(direct_num_workers=2, direct_running_mode="multi_processing")
with beam.Pipeline(runner="DirectRunner", options=options) as pipeline:
    (
        pipeline
        | xbeam.DatasetToChunks(source, source_chunks)
        | xbeam.Rechunk(source.sizes, source_chunks, target_chunks, itemsize=4, max_mem=budget)
        | xbeam.ChunksToZarr(out, xbeam.make_template(source), target_chunks, encoding=encoding)
    )
# Its worker processes, waited for: the largest one's peak.
print("WORKERS " + json.dumps(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024))
""",
}


@dataclass(frozen=True, slots=True)
class OwnEnvPeer:
    """A peer run in an environment of its own, on a view of the source made for it; its
    output array at ``array`` inside the output store ("": the store itself)."""

    env: PeerEnv
    view: Callable[[str, str], None]
    array: str = ""


OWN_ENV = {
    "rechunker": OwnEnvPeer(RECHUNKER, zarr_v2_view),
    "xarray-beam": OwnEnvPeer(XARRAY_BEAM, xarray_view, "x"),
}


def output_array(side: str, out: str) -> str:
    """Where ``side``'s output array is, given the store it was told to write."""
    inside = OWN_ENV[side].array if side in OWN_ENV else ""
    return f"{out}/{inside}" if inside else out
