"""Opening the array a command names, with errors worded for the command line."""

from __future__ import annotations

from typing import Any

import oocarray as oc

__all__ = ["open_array"]


def open_array(
    path: str, dataset: str | None, storage_options: dict[str, Any] | None = None
) -> oc.ChunkedArray:
    """``oc.open(path, dataset=dataset, storage_options=...)``, read-only; an error that
    points at the Python argument ``dataset=`` points at the option ``--dataset`` instead.

    Examples
    --------
    >>> import os, tempfile, numpy as np
    >>> path = os.path.join(tempfile.mkdtemp(), "a.npy")
    >>> np.save(path, np.arange(3))
    >>> open_array(path, None).shape
    (3,)
    """
    try:
        return oc.open(path, dataset=dataset, storage_options=storage_options)
    except (ValueError, FileNotFoundError) as error:
        text = str(error)
        if "dataset=" not in text:
            raise
        text = text.replace("with dataset=...", "with --dataset NAME").replace(
            "dataset=", "--dataset "
        )
        raise type(error)(text) from None
