"""Draw the package's imports by layer, and check that none runs upwards or in a circle.

``python tools/draw_imports.py`` rewrites ``docs/imports.md``: a Mermaid drawing (GitHub renders
it) of every module of ``oocarray`` inside a box for its layer, with an arrow for each import,
counting imports made inside functions.  ``tests/test_layers.py`` checks that the layers only
import downwards, that no modules import each other, and that the drawing is current.

The layers, bottom to top, are the package's subpackages (memory, storage, compute, feed,
diagnostics, then the xarray backend and chunk manager); ``errors`` and the compiled
``_native`` sit under everything, the public
``array_api`` namespace right above compute (over which it is a thin module), the public ``dask``
submodule with the feed layer, the package's ``__init__`` over everything it re-exports, and
the command line (which uses the public API) on top.
"""

from __future__ import annotations

import ast
import os
import sys
from collections.abc import Iterable

PACKAGE = "oocarray"
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DRAWING = os.path.join(ROOT, "docs", "imports.md")

# Bottom to top.  A module may import its own layer and the layers below it.
LAYERS = (
    ("base", ("oocarray.errors", "oocarray._native")),
    ("memory", ("oocarray._memory",)),
    ("storage", ("oocarray._storage",)),
    ("compute", ("oocarray._compute",)),
    ("array_api", ("oocarray.array_api",)),
    ("feed", ("oocarray._feed", "oocarray.dask")),
    ("diagnostics", ("oocarray._diagnostics",)),
    ("xarray", ("oocarray._xarray",)),
    ("api", ("oocarray",)),
    ("cli", ("oocarray._cli", "oocarray.__main__")),
)


def modules(root: str = ROOT) -> dict[str, str]:
    """Every module of the package (a ``.pyi`` stands for a compiled one), by dotted name."""
    found = {}
    for directory, _, files in os.walk(os.path.join(root, PACKAGE)):
        for name in sorted(files):
            if name.endswith((".py", ".pyi")):
                path = os.path.join(directory, name)
                dotted = os.path.relpath(path, root).rsplit(".", 1)[0].replace(os.sep, ".")
                found.setdefault(dotted.removesuffix(".__init__"), path)
    return found


def layer_of(module: str) -> int:
    """The index in :data:`LAYERS` of the most specific prefix naming ``module``."""
    best, best_len = None, -1
    for index, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best_len:
                best, best_len = index, len(prefix)
    if best is None:
        raise ValueError(f"{module} is in no layer: add it to LAYERS in {__file__}")
    return best


def imports(known: dict[str, str]) -> dict[str, set[str]]:
    """The package modules each module imports (at the top or inside functions)."""

    def resolve(name: str) -> str | None:
        while name and name not in known:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {m: set() for m in known}
    for module, path in known.items():
        is_package = path.endswith("__init__.py")
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read(), path)
        for node in ast.walk(tree):
            names: Iterable[str] = ()
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = module.split(".")
                    parts = parts[: len(parts) - node.level + (1 if is_package else 0)]
                    base = ".".join(parts + ([base] if base else []))
                # ``from pkg import mod`` depends on mod; ``from pkg import name`` on pkg
                names = [
                    f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names
                ]
            for name in names:
                target = resolve(name)
                # (a module importing its own subpackage's __init__ is not an edge)
                if (
                    target
                    and target != module
                    and target.startswith(PACKAGE)
                    and not (module.startswith(target + ".") and target != PACKAGE)
                ):
                    graph[module].add(target)
    return graph


def upward(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    """Imports of a module from a higher layer."""
    return sorted(
        (a, b) for a, targets in graph.items() for b in targets if layer_of(b) > layer_of(a)
    )


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Each strongly connected group of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10 * len(graph)))
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return groups


def _node(module: str) -> str:
    return module.replace(".", "_")


def drawing(graph: dict[str, set[str]]) -> str:
    """docs/imports.md: the layers as boxes, top to bottom, and one arrow per import."""
    lines = [
        "# How the package's modules import each other",
        "",
        "Generated by `python tools/draw_imports.py`; `tests/test_layers.py` fails when it is",
        "out of date, when an import runs upwards (a layer importing a higher one, even inside",
        "a function) or when modules import each other.  Layers from the top: "
        + ", ".join(name for name, _ in reversed(LAYERS))
        + ".",
        "",
        f"{sum(len(t) for t in graph.values())} imports among {len(graph)} modules; "
        f"upward imports: {len(upward(graph))}; circles: {len(circles(graph))}.",
        "",
        "## Layers",
        "",
        "An arrow for each pair of layers with imports between them, with their number.",
        "",
        "```mermaid",
        "flowchart TB",
    ]
    between: dict[tuple[int, int], int] = {}
    for a, targets in graph.items():
        for b in targets:
            if layer_of(a) != layer_of(b):
                key = (layer_of(a), layer_of(b))
                between[key] = between.get(key, 0) + 1
    lines += [f"  {name}" for name, _ in reversed(LAYERS)]
    lines += [
        f"  {LAYERS[a][0]} -->|{count}| {LAYERS[b][0]}" for (a, b), count in sorted(between.items())
    ]
    lines += ["```", "", "## Modules", "", "```mermaid", "flowchart TB"]
    for index in reversed(range(len(LAYERS))):
        name = LAYERS[index][0]
        members = sorted(m for m in graph if layer_of(m) == index)
        lines.append(f"  subgraph {name}")
        lines += [f'    {_node(m)}["{m.removeprefix(PACKAGE + ".")}"]' for m in members]
        lines.append("  end")
    for a in sorted(graph):
        for b in sorted(graph[a]):
            lines.append(f"  {_node(a)} --> {_node(b)}")
    lines += ["```", ""]
    return "\n".join(lines)


def main() -> int:
    graph = imports(modules())
    os.makedirs(os.path.dirname(DRAWING), exist_ok=True)
    with open(DRAWING, "w", encoding="utf-8") as f:
        f.write(drawing(graph))
    wrong = upward(graph)
    for a, b in wrong:
        print(f"upward: {a} imports {b}")
    for group in circles(graph):
        print("circle: " + " <-> ".join(group))
    print(f"wrote {os.path.relpath(DRAWING, ROOT)}")
    return 1 if wrong or circles(graph) else 0


if __name__ == "__main__":
    raise SystemExit(main())
