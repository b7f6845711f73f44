"""Path arguments: local paths, ``file://`` URLs taken as local paths, and other URLs refused.

Object stores (``s3://``, ``gs://``, ...) are not supported yet.  A URL given for one must not
be taken for a local path (that reads as "no such file", which misleads), and its text must
not appear in errors: URLs carry credentials (``user:password@``) and signed query strings.
"""

from __future__ import annotations

import os
import re
from urllib.parse import unquote, urlsplit

__all__ = ["local_path"]

# RFC 3986 scheme, then "://": "s3://bucket/key", "https://host/x.zarr", "file:///data/x.zarr".
_URL = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")


def local_path(path: str | os.PathLike[str], what: str = "path") -> str:
    """``path`` as a local file-system path: ``file://`` URLs become the path they name; any
    other URL raises :class:`NotImplementedError` naming only its scheme.

    Examples
    --------
    >>> local_path("file:///data/my%20array.zarr"), local_path("out.zarr")
    ('/data/my array.zarr', 'out.zarr')
    >>> local_path("s3://key:secret@bucket/x.zarr?token=abc")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    NotImplementedError: s3:// URLs are not supported yet: ...
    """
    text = os.fspath(path)
    if not isinstance(text, str):
        raise TypeError(f"{what} must be a str or os.PathLike of str, got {path!r}")
    match = _URL.match(text)
    if match is None:
        return text
    scheme = match.group(1).lower()
    if scheme == "file":
        parts = urlsplit(text)
        if parts.netloc not in ("", "localhost") or parts.query or parts.fragment:
            raise ValueError(
                "a file:// URL names a local path: file:///absolute/path (no host other than "
                "localhost, no query or fragment)"
            )
        return unquote(parts.path)
    raise NotImplementedError(
        f"{scheme}:// URLs are not supported yet: oocarray reads and writes local paths only "
        "for now. Copy the data to a local disk and give its path (file:// URLs are accepted)."
    )
