"""``oc.map_chunks``: the call and its run (``_chunks``), the parts it is made of (arguments,
the job, outputs, the resume sidecar, one block) and its two engines (``_threads``,
``_dask``)."""
