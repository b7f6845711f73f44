"""The package's layers: imports run downwards only, no two modules import each other, and the
drawing in docs/imports.md is the current one."""

from __future__ import annotations

from tools import draw_imports


def test_no_import_runs_upwards() -> None:
    graph = draw_imports.imports(draw_imports.modules())
    assert draw_imports.upward(graph) == []


def test_no_modules_import_each_other() -> None:
    graph = draw_imports.imports(draw_imports.modules())
    assert draw_imports.circles(graph) == []


def test_the_checks_see_a_wrong_import() -> None:
    graph = draw_imports.imports(draw_imports.modules())
    graph["oocarray._memory._manager"].add("oocarray._compute._engine")
    graph["oocarray._compute._engine"].add("oocarray._memory._manager")
    assert ("oocarray._memory._manager", "oocarray._compute._engine") in draw_imports.upward(graph)
    assert any("oocarray._memory._manager" in group for group in draw_imports.circles(graph))


def test_the_drawing_is_current() -> None:
    graph = draw_imports.imports(draw_imports.modules())
    with open(draw_imports.DRAWING, encoding="utf-8") as f:
        drawn = f.read()
    assert drawn == draw_imports.drawing(graph), "run: python tools/draw_imports.py"
