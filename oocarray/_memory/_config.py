"""Process-wide settings: ``oc.configure()``, ``oc.config()`` and the OOCARRAY_* variables."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Final

from oocarray._memory._units import parse_size

__all__ = ["Config", "config", "configure", "on_change"]


@dataclass(frozen=True, slots=True)
class Config:
    """The settings in force, as :func:`config` and :func:`configure` return them.

    Parameters
    ----------
    max_bytes
        RAM budget of the system (root) manager, or ``None`` for no limit.
    max_physical_bytes
        Resident-memory limit of the process, or ``None``.
    spill_dir
        Directory for temporary files, or ``None`` for the system temporary directory.
    max_spill_bytes
        Cap on disk used for spilled data, or ``None``.
    trace
        Whether allocation tracebacks are recorded.
    checksum
        Whether the zarr arrays oocarray creates carry a CRC-32C of every chunk (zarr's
        ``crc32c`` codec), checked on every read of a whole chunk: a damaged chunk is then
        :class:`~oocarray.CorruptChunkError`, never wrong data.  ``False`` saves the check's
        4-7 % of a chunk read, and loses that detection for the arrays created meanwhile.

    Examples
    --------
    >>> import oocarray as oc
    >>> settings = oc.config()
    >>> (type(settings).__name__, isinstance(settings.checksum, bool))
    ('Config', True)
    """

    max_bytes: int | None = None
    max_physical_bytes: int | None = None
    spill_dir: str | None = None
    max_spill_bytes: int | None = None
    trace: bool = False
    checksum: bool = True


class _Unset:
    def __repr__(self) -> str:
        return "<unset>"


_UNSET: Final = _Unset()
_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"", "0", "false", "no", "off"})

_lock = threading.Lock()
_listeners: list[Callable[[Config], None]] = []


def _parse_flag(value: object, setting: str) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in _TRUE | _FALSE:
        return value.strip().lower() in _TRUE
    raise ValueError(f"{setting} must be a bool (e.g. {setting}=True or '1'/'0'), got {value!r}")


def _parse_dir(value: object, setting: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, (str, os.PathLike)):
        raise TypeError(f"{setting} must be a directory path or None, got {value!r}")
    path = os.fspath(value)
    if not isinstance(path, str) or not path:
        raise ValueError(
            f"{setting} must be a non-empty directory path (e.g. '/scratch'), got {value!r}"
        )
    if not os.path.isdir(path):
        raise ValueError(
            f"{setting} must be an existing directory (e.g. '/scratch'), got {value!r}: "
            f"{'it is not a directory' if os.path.exists(path) else 'it does not exist'}"
        )
    return path


def _from_environment() -> Config:
    env = os.environ
    settings = Config()
    for name, field in (
        ("OOCARRAY_MAX_BYTES", "max_bytes"),
        ("OOCARRAY_MAX_PHYSICAL_BYTES", "max_physical_bytes"),
        ("OOCARRAY_MAX_SPILL_BYTES", "max_spill_bytes"),
    ):
        if env.get(name, "").strip():
            settings = replace(settings, **{field: parse_size(env[name], name)})  # type: ignore[arg-type]
    if env.get("OOCARRAY_SPILL_DIR", "").strip():
        settings = replace(
            settings, spill_dir=_parse_dir(env["OOCARRAY_SPILL_DIR"], "OOCARRAY_SPILL_DIR")
        )
    for name, field in (("OOCARRAY_TRACE", "trace"), ("OOCARRAY_CHECKSUM", "checksum")):
        if name in env:
            settings = replace(settings, **{field: _parse_flag(env[name], name)})  # type: ignore[arg-type]
    return settings


_current: Config = _from_environment()


def config() -> Config:
    """Return the frozen settings in force.

    Returns
    -------
    Config
        The process-wide settings, changed only by :func:`configure`.

    Examples
    --------
    >>> import oocarray as oc
    >>> isinstance(oc.config().trace, bool)
    True
    """
    return _current


def configure(
    max_bytes: object = _UNSET,
    max_physical_bytes: object = _UNSET,
    spill_dir: object = _UNSET,
    max_spill_bytes: object = _UNSET,
    trace: object = _UNSET,
    checksum: object = _UNSET,
) -> Config:
    """Change process-wide settings; arguments left out keep their value.

    Sizes accept ints or strings such as ``"512M"``, ``"8G"`` or ``"1.5GiB"``; ``None`` removes a
    limit. The environment variables ``OOCARRAY_MAX_BYTES``, ``OOCARRAY_MAX_PHYSICAL_BYTES``,
    ``OOCARRAY_SPILL_DIR``, ``OOCARRAY_MAX_SPILL_BYTES``, ``OOCARRAY_TRACE`` and
    ``OOCARRAY_CHECKSUM`` give the initial values.  ``checksum`` (default ``True``) decides
    whether the zarr arrays created from then on carry a CRC-32C of every chunk.

    Parameters
    ----------
    max_bytes
        RAM budget of the system (root) manager, or ``None`` for no limit.
    max_physical_bytes
        Resident-memory limit of the process, or ``None``.
    spill_dir
        Directory for temporary files, or ``None`` for the system temporary directory.
    max_spill_bytes
        Cap on disk used for spilled data, or ``None``.
    trace
        Whether allocation tracebacks are recorded (for :meth:`Manager.debug_dump` and
        budget errors).
    checksum
        Whether the zarr arrays created from now on carry a CRC-32C of every chunk.

    Returns
    -------
    Config
        The new settings.

    Raises
    ------
    ValueError
        A value is not valid for its setting; the message names both and gives an example.
    TypeError
        A value has the wrong type.

    Examples
    --------
    >>> import oocarray as oc
    >>> previous = oc.config()
    >>> oc.configure(max_bytes="8G").max_bytes
    8589934592
    >>> _ = oc.configure(max_bytes=previous.max_bytes)
    """
    global _current
    changes: dict[str, object] = {}
    for name, value in (
        ("max_bytes", max_bytes),
        ("max_physical_bytes", max_physical_bytes),
        ("max_spill_bytes", max_spill_bytes),
    ):
        if value is not _UNSET:
            changes[name] = parse_size(value, name, allow_none=True)
    if spill_dir is not _UNSET:
        changes["spill_dir"] = _parse_dir(spill_dir, "spill_dir")
    for name, flag in (("trace", trace), ("checksum", checksum)):
        if flag is not _UNSET:
            if not isinstance(flag, bool):
                raise TypeError(f"{name} must be True or False, got {flag!r}")
            changes[name] = flag
    with _lock:
        _current = replace(_current, **changes)  # type: ignore[arg-type]
        settings = _current
        listeners = list(_listeners)
    for listener in listeners:
        listener(settings)
    return settings


def on_change(listener: Callable[[Config], None]) -> None:
    """Call ``listener(config)`` now and after every :func:`configure`."""
    with _lock:
        _listeners.append(listener)
    listener(_current)
