"""The object-store backend: obstore (Rust ``object_store``) first, any zarr ``Store`` else.

One small interface, :class:`Backend`, of the few requests oocarray makes of an object store:
get an object (whole, a byte range, its last bytes, or only if it changed), put one whole,
delete and list.  :func:`backend_for` builds it from a URL and ``storage_options``:

- obstore for ``s3://``, ``gs://``, ``az://``/``abfs://`` and ``http(s)://``: requests run on
  its Rust runtime, without the GIL, with its retries (``retry_config``), timeouts
  (``client_options``) and credential chains (the standard ``AWS_*``, ``GOOGLE_*`` and
  ``AZURE_*`` variables; AWS config files and profiles through boto3 where it is installed);
- a zarr ``Store`` otherwise: one given ready-made, or fsspec's (``FsspecStore``) for options
  obstore does not know, through zarr-python's async store API.

The options users know from s3fs, gcsfs and adlfs (``anon``, ``key``, ``secret``,
``endpoint_url``, ``client_kwargs``, ``requester_pays``...) are translated to obstore's.
Every error leaving here names the URL without credentials (:func:`~._urls.redact`).
"""

from __future__ import annotations

import abc
import asyncio
import os
from collections.abc import Mapping
from typing import Any, NamedTuple

from oocarray._storage._objects._urls import REMOTE_SCHEMES, Remote
from oocarray.errors import ObjectStoreError, StoreAccessError

__all__ = ["NOT_MODIFIED", "Backend", "Fetched", "backend_for"]


class Fetched(NamedTuple):
    """Bytes fetched (a buffer: obstore's ``Bytes`` or ``bytes``) and the object's version
    (its ETag, or None where the store gives none)."""

    data: Any
    version: str | None


class _NotModified:
    def __repr__(self) -> str:
        return "NOT_MODIFIED"


NOT_MODIFIED = _NotModified()


class Backend(abc.ABC):
    """Requests of one object store below one root (``name``: the root's URL, redacted)."""

    name: str
    zarr_store: Any  # a zarr Store over the same objects, for zarr-python's metadata work

    @abc.abstractmethod
    async def get(self, key: str, unless: str | None = None) -> Fetched | _NotModified | None:
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

# s3fs/gcsfs/adlfs names (and zarr-python's, dask's, xarray's) -> obstore's.
_ALIASES = {
    "key": "access_key_id",
    "secret": "secret_access_key",
    "token": "session_token",
    "endpoint_url": "endpoint",
    "region_name": "region",
    "aws_access_key_id": "access_key_id",
    "aws_secret_access_key": "secret_access_key",
    "aws_session_token": "session_token",
    "account_name": "account_name",
    "account_key": "account_key",
}
_OURS = ("retries",)  # options oocarray reads itself


def _obstore_options(remote: Remote) -> dict[str, Any] | None:
    """``storage_options`` in obstore's words, or None where some have no obstore meaning."""
    given = dict(remote.options)
    options: dict[str, Any] = {}
    client = dict(given.pop("client_options", None) or {})
    retry = given.pop("retry_config", None)
    kwargs = dict(given.pop("client_kwargs", None) or {})  # s3fs: botocore client arguments
    for name in ("endpoint_url", "region_name"):
        if name in kwargs:
            given.setdefault(name, kwargs.pop(name))
    if kwargs:
        return None
    anon = given.pop("anon", None)
    if anon:
        options["skip_signature"] = True
    if given.pop("requester_pays", False):
        options["request_payer"] = True
    retries = given.pop("retries", None)  # a number: obstore's retry_config, in one word
    if retries is not None:
        retry = {**(retry or {}), "max_retries": int(retries)}
    for name in _OURS:
        given.pop(name, None)
    for name, value in given.items():
        options[_ALIASES.get(name, name)] = value
    endpoint = str(options.get("endpoint", ""))
    if endpoint.startswith("http://") or remote.scheme == "http":  # asked for by name
        client.setdefault("allow_http", True)
    if client:
        options["client_options"] = client
    if retry is not None:
        options["retry_config"] = retry
    return options


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

    async def get(self, key: str, unless: str | None = None) -> Fetched | _NotModified | None:
        options = {"if_none_match": unless} if unless else None
        try:
            result = await self._obs.get_async(self._store, key, options=options)  # type: ignore[arg-type]
            data = await result.bytes_async()
        except Exception as error:
            answer: Fetched | _NotModified | None = self._answer(error, key)
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
            if not _is(error, "NotFoundError"):
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
        if _is(error, "NotFoundError"):
            return None
        if _is(error, "NotModifiedError"):
            return NOT_MODIFIED
        if _is(error, "PreconditionError"):
            raise VersionChanged(f"{self.where(key)} changed during the read") from error
        raise self._error(error, key) from error

    def _error(self, error: Exception, key: str) -> Exception:
        return translate(error, self.where(key))


def _is(error: Exception, name: str) -> bool:
    if name == "NotFoundError" and isinstance(error, FileNotFoundError):
        return True  # obstore raises the built-in for a missing key or bucket
    return any(type_.__name__ == name for type_ in type(error).__mro__)


def translate(error: Exception, where: str) -> Exception:
    """An obstore or fsspec failure as oocarray's error, naming ``where`` (redacted) and the
    kind of failure, never the request (its signed headers) or the options."""
    if isinstance(error, (ObjectStoreError, StoreAccessError)):
        return error
    kind = type(error).__name__
    if _is(error, "PermissionDeniedError") or _is(error, "UnauthenticatedError"):
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

    async def get(self, key: str, unless: str | None = None) -> Fetched | _NotModified | None:
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


# ---- after a fork ----------------------------------------------------------------------------


_obstore_in: int | None = None  # the process whose obstore runtime exists (pid), if any
_obstore_unusable = False  # a forked child of a process that had obstore's runtime


def _forked() -> None:
    global _obstore_unusable
    _obstore_unusable = _obstore_in is not None


os.register_at_fork(after_in_child=_forked)


class PerProcess(Backend):
    """An obstore backend, and in a forked child of the process that made it, an fsspec one:
    obstore's runtime (its threads) does not survive a fork, and a request made on it in the
    child never ends, while fsspec's (through zarr-python) starts afresh.  What PyTorch's
    DataLoader and multiprocessing's pools do with the default start method on Linux."""

    def __init__(self, remote: Remote, read_only: bool, backend: Backend) -> None:
        global _obstore_in
        _obstore_in = os.getpid()
        self._remote = remote
        self._read_only = read_only
        self._backend = backend
        self._pid = os.getpid()
        self.name = backend.name

    def _current(self) -> Backend:
        if os.getpid() != self._pid:
            self._backend = _forked_backend(self._remote, self._read_only)
            self._pid = os.getpid()
        return self._backend

    @property
    def zarr_store(self) -> Any:
        return self._current().zarr_store

    async def get(self, key: str, unless: str | None = None) -> Fetched | _NotModified | None:
        return await self._current().get(key, unless)

    async def get_range(self, key: str, start: int, end: int, version: str | None) -> Any:
        return await self._current().get_range(key, start, end, version)

    async def get_suffix(self, key: str, nbytes: int, unless: str | None = None) -> Any:
        return await self._current().get_suffix(key, nbytes, unless)

    async def put(self, key: str, data: Any) -> None:
        await self._current().put(key, data)

    async def delete(self, key: str) -> None:
        await self._current().delete(key)

    async def list(self, prefix: str) -> list[tuple[str, int]]:
        return await self._current().list(prefix)

    async def versions(
        self, prefix: str, after: str | None, last: str, limit: int
    ) -> dict[str, str]:
        return await self._current().versions(prefix, after, last, limit)


# obstore's names -> s3fs's (the rest of an S3 location's options has no s3fs meaning)
_S3FS = {"access_key_id": "key", "secret_access_key": "secret", "session_token": "token"}
_S3FS_CLIENT = {"endpoint": "endpoint_url", "region": "region_name"}


def _forked_backend(remote: Remote, read_only: bool) -> Backend:
    """The backend of a forked child: fsspec's, with the location's options in its words."""
    if remote.zarr_store is not None:
        raise ObjectStoreError(
            f"{remote.name}: this zarr Store object uses obstore, which cannot run in a process "
            "forked after it was used; give the URL instead of the Store, or start the "
            "processes with the 'spawn' method"
        )
    options = {k: v for k, v in remote.options.items() if k not in (*_OURS, "retry_config")}
    if REMOTE_SCHEMES[remote.scheme] == "s3":
        s3fs: dict[str, Any] = {"client_kwargs": {}}
        for name, value in (_obstore_options(remote) or {}).items():
            if name in _S3FS:
                s3fs[_S3FS[name]] = value
            elif name in _S3FS_CLIENT:
                s3fs["client_kwargs"][_S3FS_CLIENT[name]] = value
            elif name == "skip_signature":
                s3fs["anon"] = bool(value)
            elif name == "request_payer":
                s3fs["requester_pays"] = bool(value)
        options = s3fs
    try:
        return _fsspec_backend(Remote(remote.url, options), read_only)
    except ImportError as error:
        raise ObjectStoreError(
            f"{remote.name}: obstore cannot run in a process forked after it was used, and "
            f"fsspec's {remote.scheme} package is not installed to take over; install it, or "
            "start the processes with the 'spawn' method"
        ) from error


# ---- building one --------------------------------------------------------------------------


def backend_for(remote: Remote, read_only: bool) -> Backend:
    """The backend of ``remote``: its zarr Store where one was given, else obstore, else
    fsspec (zarr-python's ``FsspecStore``) where obstore cannot take the options."""
    given = remote.zarr_store
    if given is not None:
        inner = getattr(given, "store", None)
        if type(given).__name__ == "ObjectStore" and inner is not None:
            return PerProcess(remote, read_only, ObstoreBackend(inner, remote.name, given))
        return ZarrStoreBackend(given, remote.name)
    if _obstore_unusable:  # an array opened in a forked child (unpickled there, say)
        return _forked_backend(remote, read_only)
    options = _obstore_options(remote)
    scheme = REMOTE_SCHEMES[remote.scheme]
    if options is not None:
        try:
            import obstore.store
        except ImportError:
            obstore_store = None
        else:
            _add_default_credentials(remote, scheme, options)
            try:
                obstore_store = obstore.store.from_url(remote.url, **options)
            except Exception as error:
                if not _is(error, "UnknownConfigurationKeyError"):
                    raise ValueError(
                        f"{remote.name}: storage_options are not valid for obstore "
                        f"({type(error).__name__}: {_first_line(error)})"
                    ) from None
                obstore_store = None
        if obstore_store is not None:
            from zarr.storage import ObjectStore

            backend = ObstoreBackend(
                obstore_store, remote.name, ObjectStore(obstore_store, read_only=read_only)
            )
            return PerProcess(remote, read_only, backend)
    return _fsspec_backend(remote, read_only)


def _fsspec_backend(remote: Remote, read_only: bool) -> Backend:
    try:
        from zarr.storage import FsspecStore

        options = {k: v for k, v in remote.options.items() if k not in _OURS}
        store = FsspecStore.from_url(remote.url, storage_options=options, read_only=read_only)
    except ImportError as error:
        raise ImportError(
            f"{remote.name}: reading {remote.scheme}:// needs obstore (pip install obstore), "
            f"or fsspec and its {remote.scheme} package for options obstore does not take"
        ) from error
    return ZarrStoreBackend(store, remote.name)


def _add_default_credentials(remote: Remote, scheme: str, options: dict[str, Any]) -> None:
    """AWS profiles and config files (``~/.aws``), which obstore alone does not read: through
    boto3's credential chain where it is installed and nothing else says how to sign."""
    if scheme != "s3" or options.get("skip_signature") or "access_key_id" in options:
        return
    if os.environ.get("AWS_ACCESS_KEY_ID") or "credential_provider" in options:
        return
    files = [os.path.expanduser(f"~/.aws/{name}") for name in ("credentials", "config")]
    profile = options.get("profile") or os.environ.get("AWS_PROFILE")
    if not profile and not any(os.path.exists(f) for f in files):
        return  # nothing for boto3 to add: obstore's own chain (variables, instance roles)
    try:
        import boto3
        from obstore.auth.boto3 import Boto3CredentialProvider
    except ImportError:
        return
    session = boto3.Session(profile_name=options.pop("profile", None))
    if session.get_credentials() is not None:
        options["credential_provider"] = Boto3CredentialProvider(session)


def _first_line(error: Exception) -> str:
    return str(error).strip().splitlines()[0][:200] if str(error).strip() else ""
