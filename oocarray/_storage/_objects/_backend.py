"""The object-store backend: obstore (Rust ``object_store``) first, any zarr ``Store`` else.

One small interface, :class:`Backend`, of the few requests oocarray makes of an object store:
get an object (whole, a byte range, its last bytes, or only if it changed), put one whole,
delete and list.  :func:`~._backend_choice.backend_for` builds it from a URL and
``storage_options``:

- obstore for ``s3://``, ``gs://``, ``az://``/``abfs://`` and ``http(s)://``: requests run on
  its Rust runtime, without the GIL, with its retries (``retry_config``), timeouts
  (``client_options``) and credential chains (the standard ``AWS_*``, ``GOOGLE_*`` and
  ``AZURE_*`` variables; AWS config files and profiles through boto3 where it is installed);
- a zarr ``Store`` otherwise: one given ready-made, or fsspec's (``FsspecStore``) for options
  obstore does not know, through zarr-python's async store API.

The options users know from s3fs, gcsfs and adlfs (``anon``, ``key``, ``secret``,
``endpoint_url``, ``client_kwargs``, ``requester_pays``...) are translated to obstore's (in
:mod:`._backend_choice`).  Every error leaving here names the URL without credentials
(:func:`~._urls.redact`).
"""

from __future__ import annotations

import abc
import asyncio
from collections.abc import Mapping
from typing import Any, NamedTuple

from oocarray.errors import ObjectStoreError, StoreAccessError

__all__ = [
    "NOT_MODIFIED",
    "Backend",
    "Fetched",
    "NotModified",
    "ObstoreBackend",
    "VersionChanged",
    "ZarrStoreBackend",
    "is_error",
    "translate",
]


class Fetched(NamedTuple):
    """Bytes fetched (a buffer: obstore's ``Bytes`` or ``bytes``) and the object's version
    (its ETag, or None where the store gives none)."""

    data: Any
    version: str | None


class NotModified:
    """The type of :data:`NOT_MODIFIED`: a conditional get's answer when the object is still
    of the version the caller has."""

    def __repr__(self) -> str:
        return "NOT_MODIFIED"


NOT_MODIFIED = NotModified()


class Backend(abc.ABC):
    """Requests of one object store below one root (``name``: the root's URL, redacted)."""

    name: str
    zarr_store: Any  # a zarr Store over the same objects, for zarr-python's metadata work

    @abc.abstractmethod
    async def get(self, key: str, unless: str | None = None) -> Fetched | NotModified | None:
        """The whole object; None when it does not exist; NOT_MODIFIED when its version is
        still ``unless``."""

    @abc.abstractmethod
    async def get_range(self, key: str, start: int, end: int, version: str | None) -> Any:
        """Bytes ``[start, end)``; when ``version`` is given, only of that version (else
        :class:`VersionChanged`)."""

    @abc.abstractmethod
    async def get_suffix(self, key: str, nbytes: int, unless: str | None = None) -> Any:
        """The last ``nbytes`` bytes with the object's size and version, as
        ``(Fetched, size)``; None when it does not exist; NOT_MODIFIED as for :meth:`get`."""

    @abc.abstractmethod
    async def put(self, key: str, data: Any) -> None:
        """Write the object whole (one request: readers see the old or the new one)."""

    @abc.abstractmethod
    async def delete(self, key: str) -> None: ...

    @abc.abstractmethod
    async def list(self, prefix: str) -> list[tuple[str, int]]:
        """(key, size) of every object under ``prefix``, keys relative to the root."""

    async def versions(
        self, prefix: str, after: str | None, last: str, limit: int
    ) -> dict[str, str]:
        """The versions of the objects under ``prefix`` whose keys sort after ``after`` and
        up to ``last``, from one listing of at most ``limit`` objects; ``{}`` where the backend
        cannot list versions (each object is then validated by a request of its own)."""
        return {}

    def where(self, key: str) -> str:
        return f"{self.name.rstrip('/')}/{key}"


class VersionChanged(ObjectStoreError):
    """The object changed between two requests of one read: the read starts over."""


# ---- obstore ---------------------------------------------------------------------------------


class ObstoreBackend(Backend):
    def __init__(self, store: Any, name: str, zarr_store: Any = None) -> None:
        import obstore

        self._obs = obstore
        self._store = store
        self.name = name
        if zarr_store is None:
            from zarr.storage import ObjectStore

            zarr_store = ObjectStore(store)
        self.zarr_store = zarr_store

    async def get(self, key: str, unless: str | None = None) -> Fetched | NotModified | None:
        options = {"if_none_match": unless} if unless else None
        try:
            result = await self._obs.get_async(self._store, key, options=options)  # type: ignore[arg-type]
            data = await result.bytes_async()
        except Exception as error:
            answer: Fetched | NotModified | None = self._answer(error, key)
            return answer
        _check_length(len(data), result.meta["size"], self.where(key))
        return Fetched(data, _version(result.meta))

    async def get_range(self, key: str, start: int, end: int, version: str | None) -> Any:
        options: dict[str, Any] = {"range": (start, end)}
        if version is not None:
            options["if_match"] = version
        try:
            result = await self._obs.get_async(self._store, key, options=options)  # type: ignore[arg-type]
            data = await result.bytes_async()
        except Exception as error:
            if self._answer(error, key) is None:  # anything but "not found" raised there
                raise ObjectStoreError(f"{self.where(key)} is gone") from error
            raise
        _check_length(len(data), end - start, self.where(key))
        return data

    async def get_suffix(self, key: str, nbytes: int, unless: str | None = None) -> Any:
        options: dict[str, Any] = {"range": {"suffix": nbytes}}
        if unless:
            options["if_none_match"] = unless
        try:
            result = await self._obs.get_async(self._store, key, options=options)  # type: ignore[arg-type]
            data = await result.bytes_async()
        except Exception as error:
            return self._answer(error, key)
        start, end = result.range
        _check_length(len(data), end - start, self.where(key))
        return Fetched(data, _version(result.meta)), int(result.meta["size"])

    async def put(self, key: str, data: Any) -> None:
        try:
            await self._obs.put_async(self._store, key, data)
        except Exception as error:
            raise self._error(error, key) from error

    async def delete(self, key: str) -> None:
        try:
            await self._obs.delete_async(self._store, key)
        except Exception as error:
            if not is_error(error, "NotFoundError"):
                raise self._error(error, key) from error

    async def list(self, prefix: str) -> list[tuple[str, int]]:
        try:
            found: list[tuple[str, int]] = []
            async for batch in self._obs.list(self._store, prefix or None):
                found.extend((str(m["path"]), int(m["size"])) for m in batch)
            return found
        except Exception as error:
            raise self._error(error, prefix) from error

    async def versions(
        self, prefix: str, after: str | None, last: str, limit: int
    ) -> dict[str, str]:
        found: dict[str, str] = {}
        listed = 0
        try:
            stream = self._obs.list(self._store, prefix or None, offset=after, chunk_size=1000)
            async for batch in stream:
                for meta in batch:
                    key, version = str(meta["path"]), _version(meta)
                    listed += 1
                    if key > last or listed > limit:
                        return found
                    if version is not None:
                        found[key] = version
        except Exception as error:
            raise self._error(error, prefix) from error
        return found

    def _answer(self, error: Exception, key: str) -> Any:
        """What a failed get means: absent (None), unchanged, or an error raised."""
        if is_error(error, "NotFoundError"):
            return None
        if is_error(error, "NotModifiedError"):
            return NOT_MODIFIED
        if is_error(error, "PreconditionError"):
            raise VersionChanged(f"{self.where(key)} changed during the read") from error
        raise self._error(error, key) from error

    def _error(self, error: Exception, key: str) -> Exception:
        return translate(error, self.where(key))


def is_error(error: Exception, name: str) -> bool:
    """Whether ``error`` is of the obstore error class called ``name`` (matched by name:
    obstore is imported only where it serves), a built-in ``FileNotFoundError`` counting as
    its ``NotFoundError``."""
    if name == "NotFoundError" and isinstance(error, FileNotFoundError):
        return True  # obstore raises the built-in for a missing key or bucket
    return any(type_.__name__ == name for type_ in type(error).__mro__)


def translate(error: Exception, where: str) -> Exception:
    """An obstore or fsspec failure as oocarray's error, naming ``where`` (redacted) and the
    kind of failure, never the request (its signed headers) or the options."""
    if isinstance(error, (ObjectStoreError, StoreAccessError)):
        return error
    kind = type(error).__name__
    if is_error(error, "PermissionDeniedError") or is_error(error, "UnauthenticatedError"):
        return StoreAccessError(
            f"{where}: access denied ({kind}); check the credentials (storage_options= or the "
            "AWS_*/GOOGLE_*/AZURE_* variables), or pass storage_options={'anon': True} for a "
            "public bucket"
        )
    if isinstance(error, PermissionError):
        return StoreAccessError(f"{where}: access denied ({kind})")
    status = _status(str(error))
    detail = f"HTTP {status}" if status else kind
    return ObjectStoreError(f"{where}: the request failed after retries ({detail})")


def _status(message: str) -> int | None:
    """The HTTP status in an obstore message ("status: 503"), which carries no secrets."""
    import re

    match = re.search(r"status: (\d{3})", message)
    return int(match.group(1)) if match else None


def _version(meta: Mapping[str, Any]) -> str | None:
    return meta.get("e_tag") or meta.get("version")


def _check_length(got: int, expected: int, where: str) -> None:
    # A body shorter than the object (a connection closed mid-transfer that the HTTP layer
    # took for the end) is an error, never short data.
    if got != expected:
        raise ObjectStoreError(f"{where}: {got} bytes arrived of {expected} (truncated)")


# ---- any zarr Store (fsspec among them) ------------------------------------------------------


class ZarrStoreBackend(Backend):
    """Requests through zarr-python's async ``Store`` API: any store zarr reads (fsspec's for
    protocols or options obstore lacks, a ``MemoryStore``, ...).  It knows no versions, so a
    chunk cache keeps nothing of it (a chunk it cannot revalidate could be stale)."""

    def __init__(self, store: Any, name: str) -> None:
        from zarr.core.buffer import default_buffer_prototype

        self.zarr_store = store
        self.name = name
        self._prototype = default_buffer_prototype()

    async def get(self, key: str, unless: str | None = None) -> Fetched | NotModified | None:
        buffer = await self._call(self.zarr_store.get(key, self._prototype), key)
        return None if buffer is None else Fetched(buffer.as_numpy_array(), None)

    async def get_range(self, key: str, start: int, end: int, version: str | None) -> Any:
        from zarr.abc.store import RangeByteRequest

        request = RangeByteRequest(start, end)
        buffer = await self._call(self.zarr_store.get(key, self._prototype, request), key)
        if buffer is None:
            raise ObjectStoreError(f"{self.where(key)} is gone")
        data = buffer.as_numpy_array()
        _check_length(len(data), end - start, self.where(key))
        return data

    async def get_suffix(self, key: str, nbytes: int, unless: str | None = None) -> Any:
        whole = await self.get(key)
        if whole is None or whole is NOT_MODIFIED:
            return whole
        assert isinstance(whole, Fetched)
        data = whole.data
        return Fetched(data[max(0, len(data) - nbytes) :], None), len(data)

    async def put(self, key: str, data: Any) -> None:
        from zarr.core.buffer import default_buffer_prototype

        buffer = default_buffer_prototype().buffer.from_bytes(bytes(memoryview(data)))
        await self._call(self.zarr_store.set(key, buffer), key)

    async def delete(self, key: str) -> None:
        await self._call(self.zarr_store.delete(key), key)

    async def list(self, prefix: str) -> list[tuple[str, int]]:
        async def listed() -> list[tuple[str, int]]:
            found = []
            async for key in self.zarr_store.list_prefix(prefix):
                found.append((key, int(await self.zarr_store.getsize(key))))
            return found

        result: list[tuple[str, int]] = await self._call(listed(), prefix)
        return result

    async def _call(self, awaitable: Any, key: str) -> Any:
        # On zarr-python's own loop: fsspec's async file systems are bound to the loop they
        # first ran on, which zarr-python's metadata work made that one.
        from zarr.core.sync import _get_loop

        future = asyncio.run_coroutine_threadsafe(awaitable, _get_loop())
        try:
            return await asyncio.wrap_future(future)
        except FileNotFoundError:
            return None
        except Exception as error:
            raise translate(error, self.where(key)) from error
