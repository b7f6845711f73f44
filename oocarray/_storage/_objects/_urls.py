"""Where an array lives: a local path, or an object in a store named by a URL.

Every path argument of oocarray goes through :func:`locate`, so ``s3://``, ``gs://``,
``az://``/``abfs://``, ``http(s)://`` and ``file://`` mean the same everywhere.  A URL's text
is never shown whole: URLs carry credentials (``user:password@``) and signed query strings
(``?X-Amz-Signature=...``), so errors, reprs and reports use :func:`redact`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import re
from collections.abc import Mapping
from typing import Any
from urllib.parse import unquote, urlsplit

__all__ = ["REMOTE_SCHEMES", "Remote", "locate", "redact"]

# RFC 3986 scheme, then "://": "s3://bucket/key", "https://host/x.zarr", "file:///data/x.zarr".
_URL = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")

# The schemes of object stores, and the backend's name for each (obstore's parse_scheme).
REMOTE_SCHEMES = {
    "s3": "s3",
    "s3a": "s3",
    "gs": "gcs",
    "gcs": "gcs",
    "az": "azure",
    "azure": "azure",
    "abfs": "azure",
    "abfss": "azure",
    "adl": "azure",
    "http": "http",
    "https": "http",
}
_READ_ONLY = ("http", "https")  # plain HTTP servers: reading public datasets only


@dataclasses.dataclass(frozen=True)
class Remote:
    """An object-store location: the URL (with any credentials in it), the backend options,
    and, for an already-built zarr ``Store``, that store."""

    url: str
    options: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    zarr_store: Any = None

    @property
    def scheme(self) -> str:
        return self.url.split("://", 1)[0].lower()

    @property
    def read_only(self) -> bool:
        return self.scheme in _READ_ONLY

    @property
    def name(self) -> str:
        """The URL as shown to users: without credentials or query."""
        return redact(self.url)

    @property
    def cache_namespace(self) -> str:
        """The array's name in a chunk cache: a hash of where it is (no secrets in it)."""
        endpoint = str(self.options.get("endpoint", self.options.get("endpoint_url", "")))
        return hashlib.sha256(f"{self.name}\0{endpoint}".encode()).hexdigest()[:32]

    def __repr__(self) -> str:  # never the options: they hold keys and tokens
        return f"Remote({self.name!r})"


def redact(url: str) -> str:
    """``url`` without its user information, query and fragment.

    >>> redact("s3://AKIA:secret@bucket/x.zarr?X-Amz-Signature=abc")
    's3://bucket/x.zarr'
    >>> redact("https://data.example.org/era5.zarr")
    'https://data.example.org/era5.zarr'
    """
    parts = urlsplit(url)
    host = parts.hostname or ""
    if parts.port is not None:
        host = f"{host}:{parts.port}"
    return f"{parts.scheme}://{host}{parts.path}"


def locate(
    path: Any,
    storage_options: Mapping[str, Any] | None = None,
    what: str = "path",
    *,
    writing: bool = False,
) -> str | Remote:
    """A local path (``file://`` URLs become the path they name) or a :class:`Remote`; a zarr
    ``Store`` object is taken as it is.  ``writing``: the caller will write there (plain HTTP
    is read-only)."""
    if _is_zarr_store(path):
        if storage_options:
            raise ValueError("storage_options= applies to URLs, not to a zarr Store object")
        return Remote(_store_url(path), {}, path)
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"{what} must be a str, os.PathLike, URL or zarr Store, got {path!r}")
    text = os.fspath(path)
    if not isinstance(text, str):
        raise TypeError(f"{what} must be a str or os.PathLike of str, got {path!r}")
    if storage_options is not None and not isinstance(storage_options, Mapping):
        raise TypeError(f"storage_options must be a dict, got {type(storage_options).__name__}")
    match = _URL.match(text)
    if match is None:
        _no_options(storage_options, text)
        return text
    scheme = match.group(1).lower()
    if scheme == "file":
        _no_options(storage_options, "a file:// URL")
        return _file_path(text)
    if scheme not in REMOTE_SCHEMES:
        raise ValueError(
            f"{what}: {scheme}:// is not a scheme oocarray reads; give a local path or a URL "
            f"of {', '.join(sorted(f'{s}://' for s in REMOTE_SCHEMES))}"
        )
    location = Remote(text, dict(storage_options or {}))
    if writing and location.read_only:
        raise PermissionError(
            f"{location.name}: {scheme}:// URLs are read-only (a plain HTTP server takes no "
            "writes); write to s3://, gs://, az:// or a local path"
        )
    if not urlsplit(text).netloc:
        raise ValueError(f"{what}: {redact(text)} names no bucket or host")
    return location


def _no_options(options: Mapping[str, Any] | None, where: str) -> None:
    if options:
        raise ValueError(
            f"storage_options= applies to object-store URLs (s3://, gs://, ...), not to {where!r}"
        )


def _file_path(text: str) -> str:
    parts = urlsplit(text)
    if parts.netloc not in ("", "localhost") or parts.query or parts.fragment:
        raise ValueError(
            "a file:// URL names a local path: file:///absolute/path (no host other than "
            "localhost, no query or fragment)"
        )
    return unquote(parts.path)


def _is_zarr_store(obj: Any) -> bool:
    try:
        from zarr.abc.store import Store as ZarrStoreBase
    except ImportError:  # pragma: no cover - zarr is a dependency
        return False
    return isinstance(obj, ZarrStoreBase)


def _store_url(store: Any) -> str:
    """A name for a zarr Store object, for messages: its own URL where it has one."""
    inner = getattr(store, "store", None)  # zarr's ObjectStore wraps an obstore store
    for candidate in (inner, store):
        url = getattr(candidate, "url", None) or getattr(candidate, "path", None)
        if isinstance(url, str) and "://" in url:
            return url
    return f"{type(store).__name__.lower()}://{id(store):x}"
