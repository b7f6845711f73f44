"""Choosing and building the backend of a location (:func:`backend_for`).

obstore serves ``s3://``, ``gs://``, ``az://``/``abfs://`` and ``http(s)://``; a zarr ``Store``
given ready-made is used as it is; fsspec (zarr-python's ``FsspecStore``) takes the options
obstore does not know.  The options users know from s3fs, gcsfs and adlfs (``anon``, ``key``,
``secret``, ``endpoint_url``, ``client_kwargs``, ``requester_pays``...) are translated to
obstore's here, AWS profiles and config files are read through boto3 where it is installed, and
in a process forked after obstore ran, fsspec takes its place (:class:`PerProcess`).
"""

from __future__ import annotations

import os
from typing import Any

from oocarray._storage._objects._backend import (
    Backend,
    Fetched,
    NotModified,
    ObstoreBackend,
    ZarrStoreBackend,
    is_error,
)
from oocarray._storage._objects._urls import REMOTE_SCHEMES, Remote
from oocarray.errors import ObjectStoreError

__all__ = ["backend_for"]


# ---- storage_options in obstore's words ------------------------------------------------------

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

    async def get(self, key: str, unless: str | None = None) -> Fetched | NotModified | None:
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
                if not is_error(error, "UnknownConfigurationKeyError"):
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
