"""Progress bars for long work: tqdm's, in a notebook or on a terminal."""

from __future__ import annotations

import warnings
from typing import Any

__all__ = ["progress_bar"]


def progress_bar(**kwargs: Any) -> Any:
    """``tqdm.auto.tqdm(**kwargs)``: a notebook widget where ipywidgets can draw one, a text bar
    elsewhere.  tqdm.auto warns on its first import in a kernel without ipywidgets and then
    falls back to the text bar; the fallback is fine, so the warning is not passed on."""
    from tqdm import TqdmWarning

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TqdmWarning)
        from tqdm.auto import tqdm
    return tqdm(**kwargs)
