"""The package's layers: imports run downwards only, no two modules import each other, the
drawing in docs/imports.md is the current one, and no layer installs methods on a class."""

from __future__ import annotations

import importlib
import inspect
import types

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


def test_methods_are_defined_in_their_class() -> None:
    """No layer installs methods on another's classes (nor on its own from outside the class
    body): every function of the package found on a class was written in that class."""
    placed_from_outside = []
    for name in sorted(draw_imports.modules()):
        if name in ("oocarray._native", "oocarray.__main__"):
            continue
        module = importlib.import_module(name)
        for cls in vars(module).values():
            if not inspect.isclass(cls) or cls.__module__ != name:
                continue
            for attribute, value in vars(cls).items():
                function = value.fget if isinstance(value, property) else value
                function = getattr(function, "__func__", function)  # class/static methods
                if (
                    isinstance(function, types.FunctionType)
                    and function.__module__.startswith("oocarray")
                    and function.__qualname__ != f"{cls.__qualname__}.{function.__name__}"
                ):
                    placed_from_outside.append(f"{name}.{cls.__qualname__}.{attribute}")
    assert placed_from_outside == []
