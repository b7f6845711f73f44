"""Opening the array a command names, with errors worded for the command line."""

from __future__ import annotations

import oocarray as oc

__all__ = ["open_array"]


def open_array(path: str, dataset: str | None) -> oc.ChunkedArray:
    """``oc.open(path, dataset=dataset)``, read-only; an error that points at the Python
    argument ``dataset=`` points at the option ``--dataset`` instead.

    Examples
    --------
    >>> import os, tempfile, numpy as np
    >>> path = os.path.join(tempfile.mkdtemp(), "a.npy")
    >>> np.save(path, np.arange(3))
    >>> open_array(path, None).shape
    (3,)
    """
    try:
        return oc.open(path, dataset=dataset)
    except (ValueError, FileNotFoundError) as error:
        text = str(error)
        if "dataset=" not in text:
            raise
        text = text.replace("with dataset=...", "with --dataset NAME").replace(
            "dataset=", "--dataset "
        )
        raise type(error)(text) from None
