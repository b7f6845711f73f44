"""Where the compute layer's array types put their values besides NumPy arrays: a new zarr
array written chunk by chunk (``to_zarr``), a stored array in new chunks (``rechunk``) and a
lazy ``xarray.DataArray`` (``to_xarray``).  A base class of ``LazyArray``
(``_compute._array``).

The class is generic in the type of the stored arrays it opens (``StoredT``: ``ChunkedArray``,
defined above this module with the other array types), which the array type names
(:meth:`OutputMethods._stored_type`).
"""

from __future__ import annotations

from typing import Any, Generic, TypeVar

from oocarray._compute._engine import StoreTarget, evaluate
from oocarray._compute._nodes import Node, as_node
from oocarray._compute._rechunk import rechunk
from oocarray._compute._to_xarray import to_xarray
from oocarray._storage import StoredArray, create
from oocarray._storage._objects._urls import Remote, locate
from oocarray._storage._replace import refuse_replacing_an_input

__all__ = ["OutputMethods"]

# The stored array type of the array types (``ChunkedArray``).
StoredT = TypeVar("StoredT", bound=StoredArray)


class OutputMethods(Generic[StoredT]):
    """Writing to zarr, rechunking and viewing from xarray; a subclass says what is written
    (:meth:`_tree`) and as what type the new stored arrays open (:meth:`_stored_type`)."""

    def _tree(self) -> Node | StoredArray:
        """What is written: an expression tree or a stored array."""
        raise NotImplementedError

    def _stored_type(self) -> type[StoredT]:
        """The type new stored arrays open as."""
        raise NotImplementedError

    def to_xarray(self, name: str | None = None, dims: Any = None) -> Any:
        """A lazy ``xarray.DataArray`` over this array, computed by oocarray's chunk manager
        (``chunked_array_type="oocarray"``): its operations stream in the active budget.

        Nothing is read.

        Parameters
        ----------
        name : str, optional
            The DataArray's name.
        dims : sequence of str, optional
            Its dimension names; by default the stored ones (zarr ``dimension_names`` or
            ``_ARRAY_DIMENSIONS``), else ``dim_0``, ``dim_1``, ...

        Returns
        -------
        xarray.DataArray
            Over this array, with the stored attributes as ``attrs``.

        Examples
        --------
        >>> import numpy as np, oocarray as oc
        >>> x = oc.from_numpy(np.arange(6.0).reshape(2, 3), chunks=(1, 3))
        >>> da = x.to_xarray(name="t")
        >>> da.dims, float(da.sum("dim_1").max())
        (('dim_0', 'dim_1'), 12.0)
        """
        return to_xarray(self, name=name, dims=dims)

    def rechunk(self, chunks: Any, out: Any = None, **options: Any) -> Any:
        """Rechunk into a zarr array of ``chunks`` in a memory budget (see
        :func:`oocarray.rechunk`, which takes the same ``options``).

        An expression is written with :meth:`to_zarr` (``chunks=``) instead: it has no
        source chunks to regroup.

        Parameters
        ----------
        chunks : tuple, dict, int or "auto"
            The new chunk shape (see :func:`oocarray.rechunk`).
        out : path or URL, optional
            The output zarr array; a temporary one when omitted.
        **options
            ``shards``, ``codec``, ``max_mem``, ``resume``, ``dry_run``, ``dataset``,
            ``mode``, ``storage_options``, ``progress``: as for :func:`oocarray.rechunk`.

        Returns
        -------
        ChunkedArray
            The rechunked array (the plan instead, with ``dry_run=True``).

        Raises
        ------
        TypeError
            This is an expression, not a stored array.

        Examples
        --------
        >>> import numpy as np, oocarray as oc
        >>> x = oc.from_numpy(np.arange(12).reshape(4, 3), chunks=(1, 3))
        >>> y = x.rechunk((4, 1), progress=False)
        >>> (y.chunks, y[:, 2])
        ((4, 1), array([ 2,  5,  8, 11]))
        """
        if not isinstance(self, StoredArray):
            raise TypeError(
                "rechunk needs a stored array; write an expression in new chunks with "
                "expr.to_zarr(path, chunks=...)"
            )
        return rechunk(self, chunks, out, **options)

    def to_zarr(
        self,
        path: Any,
        codec: str = "zstd",
        chunks: Any = None,
        shards: Any = None,
        mode: str = "w-",
        dimension_names: Any = None,
        attributes: Any = None,
        progress: bool = True,
        storage_options: Any = None,
        dataset: str | None = None,
        coords: Any = None,
    ) -> StoredT:
        """Write the values to a new zarr array, chunk by chunk (each written whole).

        ``path``, ``codec``, ``chunks``, ``shards``, ``mode``, ``dimension_names``,
        ``attributes``, ``dataset``, ``coords`` and ``storage_options`` are as for
        :func:`oocarray.create` (``path`` may be an object-store URL): by default
        (``mode="w-"``) the array must not exist yet (:class:`~oocarray.StoreExistsError`);
        ``mode="w"`` replaces a zarr array, and nothing else.  With ``dataset="name"`` the
        array goes inside the zarr group at ``path`` beside the arrays already there, so
        several outputs share one group that ``xarray.open_zarr(path)`` opens as a Dataset
        (name the axes with ``dimension_names``).  ``progress=False`` hides the progress
        report.

        Parameters
        ----------
        path
            The new array's directory (or the group's, with ``dataset``), or a URL.
        codec
            ``"zstd"`` (default), ``"lz4"``, ``"blosc"``, ``"gzip"`` or ``"none"``.
        chunks, shards : optional
            Chunk and shard shapes; default: chunks of about 4 MiB, no shards (as for
            :func:`oocarray.create`).
        mode
            ``"w-"`` (default) refuses an existing array; ``"w"`` replaces a zarr array.
        dimension_names : optional
            One name per axis.
        attributes : optional
            JSON-serialisable metadata stored with the array.
        progress
            Show a progress bar (default ``True``).
        storage_options : optional
            For URLs: the object store's settings (see :func:`oocarray.open`).
        dataset : optional
            The array's path inside the zarr group at ``path``.
        coords : optional
            With ``dataset``: coordinate arrays written into the group beside it.

        Returns
        -------
        ChunkedArray
            The new zarr array, open for reading and writing.

        Raises
        ------
        StoreExistsError
            Something is at the array's path that ``mode`` may not replace.

        Examples
        --------
        >>> import numpy as np, oocarray as oc, os, tempfile
        >>> group = os.path.join(tempfile.mkdtemp(), "out.zarr")
        >>> x = oc.from_numpy(np.arange(6.0).reshape(2, 3), chunks=(1, 3))
        >>> _ = (x * 2).to_zarr(group, dataset="double", dimension_names=("y", "x"),
        ...                     progress=False)
        >>> _ = (x + 1).to_zarr(group, dataset="plus_one", dimension_names=("y", "x"),
        ...                     progress=False)
        >>> oc.open(group, dataset="plus_one")[1]
        array([4., 5., 6.])
        """
        expr = as_node(self._tree())
        if mode == "w":
            location = locate(path, storage_options, "path", writing=True)
            target = location.name if isinstance(location, Remote) else location
            if dataset is not None and isinstance(dataset, str):
                target = target.rstrip("/") + "/" + dataset.strip("/")
            refuse_replacing_an_input(target, (s.path for s in expr.sources()), "to_zarr(mode='w')")
        out = create(
            path,
            expr.shape,
            expr.dtype,
            chunks=chunks,
            codec=codec,
            shards=shards,
            mode=mode,
            dimension_names=dimension_names,
            attributes=attributes,
            dataset=dataset,
            storage_options=storage_options,
            array_type=self._stored_type(),
            coords=coords,
        )
        evaluate(
            [], [StoreTarget(expr, out.__setitem__, out.shards or out.chunks)], progress, "to_zarr"
        )
        assert isinstance(out, self._stored_type())
        return out
