"""Sphinx configuration of oocarray's documentation site.

Built offline (no intersphinx, no downloads) with warnings as errors by
``python -m sphinx -W --keep-going -n docs docs/_build/html`` and by tests/docs.
"""

from __future__ import annotations

import json
from pathlib import Path

import oocarray

ROOT = Path(__file__).resolve().parent.parent

project = "oocarray"
author = "the oocarray authors"
copyright = "2026, the oocarray authors"  # noqa: A001 (Sphinx's own name)
release = oocarray.__version__
version = release

extensions = [
    "myst_nb",  # Markdown pages (MyST) and the notebooks, rendered with their outputs
    "numpydoc",
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
]

# The notebooks live in notebooks/ (checked by tests/docs/test_notebooks.py); the site renders a
# copy executed at build time, with the small sizes the tests use injected after each
# notebook's parameters cell, so every page shows its outputs and plots in seconds.
NOTEBOOKS = Path(__file__).resolve().parent / "notebooks"
NOTEBOOKS.mkdir(exist_ok=True)
SMALL = json.loads((ROOT / "notebooks" / "small_parameters.json").read_text())
for source in sorted((ROOT / "notebooks").glob("*.ipynb")):
    notebook = json.loads(source.read_text())
    cells = notebook["cells"]
    at = next(i for i, c in enumerate(cells) if "parameters" in c["metadata"].get("tags", []))
    small = {"cell_type": "code", "execution_count": None, "id": "small-sizes", "metadata": {}}
    small["outputs"] = []
    small["source"] = "# the sizes this page was built with\n" + SMALL[source.name]
    cells.insert(at + 1, small)
    (NOTEBOOKS / source.name).write_text(json.dumps(notebook, indent=1))

# The benchmark run records (benchmarks/results/) rendered as pages under the benchmarks page,
# their links to BENCHMARKS.md and to the records' index pointed at the site's pages.
RECORDS = Path(__file__).resolve().parent / "benchmark-records"
RECORDS.mkdir(exist_ok=True)
for record in sorted((ROOT / "benchmarks" / "results").glob("*.md")):
    text = record.read_text().replace("](../../BENCHMARKS.md)", "](../benchmarks.md)")
    text = text.replace("](README.md)", "](index.md)")
    if record.name == "README.md":
        text += "\n```{toctree}\n:hidden:\n:glob:\n\n2*\n```\n"
    (RECORDS / ("index.md" if record.name == "README.md" else record.name)).write_text(text)

# docs/imports.md is the layer drawing for developers (Mermaid, which GitHub renders), not a page.
exclude_patterns = ["imports.md", "_build", "**.ipynb_checkpoints", "jupyter_execute"]
# .rst first: autosummary writes its generated pages with the first suffix.
source_suffix = {".rst": "restructuredtext", ".md": "myst-nb", ".ipynb": "myst-nb"}
myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 3
nb_execution_mode = "force"
nb_execution_timeout = 120  # seconds per cell
nb_execution_raise_on_error = True
nb_execution_show_tb = True

autosummary_generate = True
autodoc_default_options = {"members": False}
autodoc_typehints = "none"  # numpydoc's Parameters sections give the types
numpydoc_show_class_members = False
numpydoc_class_members_toctree = False
numpydoc_xref_param_type = False
# Every public name's docstring is checked (numpydoc's validation; a failure is a warning,
# and warnings are errors): a summary, every parameter, what it returns and an example.
numpydoc_validation_checks = {
    "GL08",  # no docstring
    "SS01",  # no summary
    "PR01",  # a parameter not documented
    "PR02",  # a documented parameter that does not exist
    "RT01",  # no Returns section
    "EX01",  # no Examples section
}
# Members the base classes give (exceptions' args, dataclasses' fields) are not ours to document.
numpydoc_validation_exclude = {
    r"\.args$",
    r"\.with_traceback$",
    r"\.add_note$",
    # distributed.WorkerPlugin's own hook, inherited as distributed documents it.
    r"^oocarray\.dask\.MemoryBudgetPlugin\.transition$",
}

html_theme = "pydata_sphinx_theme"
html_title = f"oocarray {release}"
html_theme_options = {
    "navigation_with_keys": False,
    "show_toc_level": 2,
}
templates_path = ["_templates"]
html_static_path: list[str] = []

# The build is offline (no intersphinx inventories): names of other libraries stay plain text.
nitpick_ignore_regex = [
    ("py:.*", r"(numpy|np|pandas|pd|xarray|xr|dask|distributed|zarr|h5py|torch|pyarrow|scipy"
     r"|contextlib)(\..*)?"),
    # A page of distributed's own site, named by the docstring MemoryBudgetPlugin inherits.
    ("std:doc", r"worker-state"),
    ("py:.*", r"(int|float|str|bytes|bool|dict|list|tuple|callable|iterable|optional|None)"),
]
