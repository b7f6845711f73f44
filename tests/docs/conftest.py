"""The documentation site, built once per test session: ``python -m sphinx -W --keep-going -n``
into a temporary directory, as the README says to build it.  The build executes the notebooks
(at the small sizes of notebooks/small_parameters.json); tests/docs/test_notebooks.py reads
what they printed from the executed copies the build keeps."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from testkit import children

ROOT = Path(__file__).resolve().parent.parent.parent
BUILD_GUARD_S = 900  # a hang guard only: the build takes about a minute


@dataclass(frozen=True)
class Site:
    returncode: int
    output: str  # what sphinx-build printed (its warnings among it)
    html: Path
    executed: Path  # the notebooks as the build executed them

    def warnings(self) -> list[str]:
        # The kernels' own log lines ("[IPKernelApp] WARNING | ...") are not Sphinx's.
        return [
            line
            for line in self.output.splitlines()
            if "WARNING" in line and "[IPKernelApp]" not in line
        ]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The tests of the site run in one process (pytest-xdist's ``loadgroup``): each process
    would build it again, a minute and a half of the run."""
    for item in items:
        if "site" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.xdist_group("docs-site"))


@pytest.fixture(scope="session")
def site(tmp_path_factory: pytest.TempPathFactory) -> Site:
    pytest.importorskip("sphinx")
    pytest.importorskip("myst_nb")
    pytest.importorskip("numpydoc")
    pytest.importorskip("pydata_sphinx_theme")
    out = tmp_path_factory.mktemp("site")
    html = out / "html"
    result = children.run(
        ["-m", "sphinx", "-W", "--keep-going", "-n", "-q", "-b", "html", "docs", str(html)],
        cwd=ROOT,
        timeout=BUILD_GUARD_S,
    )
    # myst-nb keeps each executed notebook beside the output folder.
    executed = out / "jupyter_execute" / "notebooks"
    return Site(result.returncode, result.stdout + result.stderr, html, executed)
