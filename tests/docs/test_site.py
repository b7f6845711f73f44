"""The documentation site builds without a warning (numpydoc's validation of every public
docstring, cross-references and toctrees included) and covers what it promises: every public
name in the API reference, every exception on the errors page, every README link to a page
that exists."""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING

import oocarray
import oocarray.errors

if TYPE_CHECKING:
    from tests.docs.conftest import Site

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"


def test_the_site_builds_without_a_warning(site: Site) -> None:
    assert site.returncode == 0, site.output[-8000:]
    assert site.warnings() == []
    for page in (
        "index",
        "getting-started",
        "guide/managers",
        "errors",
        "api/index",
        "benchmarks",
        "changelog",
        "notebooks/04_xarray_climate_cube",
    ):
        assert (site.html / f"{page}.html").exists(), page


def test_every_benchmark_record_is_a_page(site: Site) -> None:
    records = sorted(p.stem for p in (ROOT / "benchmarks" / "results").glob("2*.md"))
    assert records
    pages = sorted(p.stem for p in (site.html / "benchmark-records").glob("2*.html"))
    assert pages == records
    assert (site.html / "benchmark-records" / "index.html").exists()


def test_every_public_name_is_in_the_api_reference() -> None:
    listed = set(re.findall(r"^   ([\w.]+)$", (DOCS / "api" / "index.rst").read_text(), re.M))
    public = {name for name in oocarray.__all__ if name != "__version__"}
    assert sorted(public - listed) == []
    assert sorted(f"errors.{n}" for n in oocarray.errors.__all__ if n not in public) == sorted(
        n for n in listed if n.startswith("errors.")
    )


def test_every_exception_has_its_entry_on_the_errors_page() -> None:
    page = (DOCS / "errors.md").read_text()
    entries = set(re.findall(r"^`(\w+)`$", page, re.M))
    assert entries == set(oocarray.errors.__all__)
    for name in entries:  # each says when it is raised and what to do
        entry = page.split(f"`{name}`\n", 1)[1].split("\n\n", 1)[0]
        assert "**When**" in entry and "**What to do**" in entry, name


def test_the_notebooks_render_with_their_outputs(site: Site) -> None:
    for page in sorted((site.html / "notebooks").glob("*.html")):
        text = page.read_text()
        assert "cell_output" in text, page.name
    assert any("<img" in p.read_text() for p in (site.html / "notebooks").glob("*.html"))


def test_readme_links_reach_pages() -> None:
    readme = (ROOT / "README.md").read_text()
    links = re.findall(r"\]\(((?:docs/)?[^)#:]+\.(?:md|rst))(?:#[^)]*)?\)", readme)
    assert links
    missing = sorted({link for link in links if not (ROOT / link).exists()})
    assert missing == []


def test_every_guide_page_links_resolve() -> None:
    # Relative Markdown links between pages (Sphinx checks them too; this names the page).
    problems = []
    for page in sorted(DOCS.rglob("*.md")):
        if "_build" in page.parts:
            continue
        for link in re.findall(r"\]\(([^)#:]+\.(?:md|rst|ipynb))(?:#[^)]*)?\)", page.read_text()):
            if not (page.parent / link).resolve().exists():
                problems.append(f"{page.relative_to(ROOT)}: {link}")
    assert problems == []
