"""Find references in comments, docstrings and Markdown that point at nothing.

``python tools/check_references.py [PATH ...]`` reads the comments and docstrings of the Python
files (``oocarray``, ``tests``, ``benchmarks``, ``tools`` by default), the comments of the C
files in ``native``, and the Markdown files at the top of the repository, and prints each
reference that does not resolve, as ``file:line: reference (why)``:

- file paths (``native/pager.c``, ``tests/memory/test_spill.py``, ``_manager.py``): a path
  with a folder must exist from the repository root (or from ``oocarray/``, ``native/``, the
  file's own folder); a bare file name must be the name of some file in the repository; the
  workplace's own documents (:data:`OUTSIDE`) are not in it;
- test ids (``tests/x.py::test_y``): the test must be defined in that file;
- dotted names (``oocarray._memory._physical.resident_memory``, ``benchmarks.w11_hard.make_data``,
  ``oc.Manager``, ``_native.take_failure``): the module must import and the rest be found
  as attributes (read from the files, not imported, outside ``oocarray``);
- Sphinx roles in docstrings of the package (:func:`name`, :class:`Manager.stats`,
  :mod:`._closing`): resolved from the module's own namespace, then as a dotted name, then
  in ``oocarray`` and ``numpy``.

It exits 1 when something did not resolve.  Names it cannot judge (a reference to another
library, a file a test creates) are allowed in :data:`ALLOWED`.
"""

from __future__ import annotations

import ast
import builtins
import importlib
import io
import os
import re
import sys
import tokenize
from collections.abc import Iterator

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT = (
    "oocarray",
    "tests",
    "benchmarks",
    "tools",
    "native",
    "docs",
    "README.md",
    "BENCHMARKS.md",
)
SKIP_DIRS = {
    ".git",
    "build",
    "_build",
    "generated",
    "jupyter_execute",
    "benchmark-records",  # docs/benchmark-records: the site build's copies of benchmarks/results
    "__pycache__",
    ".mypy_cache",
    ".ruff_cache",
    ".pytest_cache",
}
EXTENSIONS = ("py", "pyi", "c", "h", "md", "toml", "ipynb", "json", "yml", "yaml", "cfg", "txt")

PATH = re.compile(
    r"(?<![\w./-])((?:[\w.-]+/)*[\w-]+(?:\.[\w-]+)*\.(?:" + "|".join(EXTENSIONS) + r"))"
    r"(?:::(\w+))?(?![\w/])"
)
DOTTED = re.compile(r"(?<![\w.])((?:oocarray|benchmarks|tests|tools|oc|_native)(?:\.\w+)+)")
# ``_physical.check_now``: a module of the package by its own name, then a name in it.
SHORT = re.compile(r"(?<![\w./])(_[a-z]\w*)\.([A-Za-z_]\w*)")
ROLE = re.compile(r":(func|class|meth|attr|mod|data|exc|obj):`~?([^`<>]+?)`")

# References that name things outside this repository or that a test makes on purpose.
ALLOWED = {
    "block.py",  # tests/docs/test_pages.py: each page's block runs as this script
    "sitecustomize.py",  # tools/sanitize.py writes it beside the sanitized build
    "x.py::test_y",  # this module's own example
}
# Documents of the workplace that are not in the repository: a reader of the repository does
# not have them, so a reference to one is reported as such.
OUTSIDE = ("DESIGN.md", "PERFORMANCE.md", "shared/notes/")


def files(paths: tuple[str, ...]) -> Iterator[str]:
    for path in paths:
        full = os.path.join(ROOT, path)
        if os.path.isfile(full):
            yield full
            continue
        for directory, dirs, names in os.walk(full):
            dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS)
            for name in sorted(names):
                if name.endswith((".py", ".c", ".h", ".md")):
                    yield os.path.join(directory, name)


def _all_files() -> tuple[set[str], set[str]]:
    rel, base = set(), set()
    for directory, dirs, names in os.walk(ROOT):
        dirs[:] = [d for d in dirs if d not in SKIP_DIRS]
        for name in names:
            path = os.path.relpath(os.path.join(directory, name), ROOT)
            rel.add(path)
            base.add(name)
        for name in dirs:
            rel.add(os.path.relpath(os.path.join(directory, name), ROOT))
    return rel, base


REPO_FILES, REPO_NAMES = _all_files()
PACKAGE_MODULES: dict[str, list[str]] = {}
for _path in sorted(REPO_FILES):
    if _path.startswith("oocarray" + os.sep) and _path.endswith((".py", ".pyi")):
        _dotted = _path.rsplit(".", 1)[0].replace(os.sep, ".").removesuffix(".__init__")
        PACKAGE_MODULES.setdefault(_dotted.rpartition(".")[2], []).append(_dotted)


def resolve_short(module: str, attr: str) -> bool | None:
    """``_physical.check_now``: None when no module of the package has that name."""
    if module not in PACKAGE_MODULES:
        return None
    return any(resolve_dotted(f"{m}.{attr}") for m in PACKAGE_MODULES[module])


def texts(path: str) -> Iterator[tuple[int, str, bool]]:
    """(line, text, is_docstring) of each comment and docstring; Markdown: each line."""
    with open(path, encoding="utf-8") as f:
        source = f.read()
    if path.endswith(".md"):
        for number, line in enumerate(source.splitlines(), 1):
            yield number, line, False
        return
    if path.endswith((".c", ".h")):
        for match in re.finditer(r"/\*.*?\*/|//[^\n]*", source, re.S):
            yield source.count("\n", 0, match.start()) + 1, match.group(), False
        return
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            yield token.start[0], token.string, False
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                value = body[0].value.value
                if isinstance(value, str):
                    yield body[0].lineno, value, True


def _module_name(path: str) -> str | None:
    rel = os.path.relpath(path, ROOT)
    if not rel.endswith(".py"):
        return None
    return rel[:-3].replace(os.sep, ".").removesuffix(".__init__")


def resolve_dotted(name: str) -> bool:
    name = name.rstrip(".")
    if name.startswith("oc."):
        name = "oocarray." + name[3:]
    elif name.startswith("_native."):
        name = "oocarray." + name
    parts = name.split(".")
    if parts[0] in ("benchmarks", "tests", "tools"):
        return _resolve_statically(parts)
    for cut in range(len(parts), 0, -1):
        try:
            obj: object = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        except Exception:
            return True  # a module that does not import here (an optional dependency)
        for attr in parts[cut:]:
            if not hasattr(obj, attr):
                return _in_annotations(obj, attr)
            obj = getattr(obj, attr)
        return True
    return False


def _resolve_statically(parts: list[str]) -> bool:
    """A name in ``benchmarks``, ``tests`` or ``tools``, found by reading the files (some of
    their modules run when imported): the module's file, then a name it defines at the top."""
    for cut in range(len(parts), 0, -1):
        base = os.path.join(ROOT, *parts[:cut])
        for path in (base + ".py", os.path.join(base, "__init__.py")):
            if os.path.isfile(path):
                rest = parts[cut:]
                if not rest:
                    return True
                with open(path, encoding="utf-8") as f:
                    tree = ast.parse(f.read())
                return rest[0] in _top_level_names(tree) or (
                    os.path.isdir(base) and os.path.isfile(os.path.join(base, rest[0] + ".py"))
                )
    return False


def _top_level_names(tree: ast.Module) -> set[str]:
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(t.id for t in targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return names


def _in_annotations(obj: object, attr: str) -> bool:
    """An attribute a class declares (a dataclass field, a slot, an annotation)."""
    for klass in getattr(obj, "__mro__", ()):
        if attr in getattr(klass, "__annotations__", {}) or attr in getattr(klass, "__slots__", ()):
            return True
    return False


def resolve_role(role: str, target: str, module: str | None) -> bool:
    target = target.strip().removesuffix("()")
    if target.startswith(".") and module:
        package = module.rpartition(".")[0]
        return resolve_dotted(package + target)
    first = target.split(".")[0]
    if hasattr(builtins, first):
        return True
    if module:
        try:
            namespace = importlib.import_module(module)
        except Exception:
            namespace = None
        if namespace is not None:
            obj: object = namespace
            for part in target.split("."):
                if not hasattr(obj, part):
                    if not _in_annotations(obj, part):
                        break
                    return True
                obj = getattr(obj, part)
            else:
                return True
            # A method of the class the docstring belongs to: its name is enough here.
            if any(isinstance(v, type) and hasattr(v, first) for v in vars(namespace).values()):
                return True
    for prefix in ("", "oocarray.", "numpy.", "oocarray.errors."):
        if resolve_dotted(prefix + target):
            return True
    return False


def resolve_path(path: str, test: str | None, source: str) -> str | None:
    """None when the path resolves, else why not."""
    name = path + (f"::{test}" if test else "")
    if any(n in ALLOWED for n in (path, os.path.basename(path), os.path.basename(name))):
        return None
    if path.startswith(".") and not path.startswith(".."):
        return None  # a file the code makes at run time (".oocarray-map-chunks/job.json")
    c_header = source.endswith((".c", ".h")) and "/" not in path and path.endswith(".h")
    if c_header and path not in REPO_NAMES:
        return None  # a system or CPython header
    if any(o in path for o in OUTSIDE):
        return "not in the repository (a workplace document)"
    here = os.path.relpath(os.path.dirname(source), ROOT)
    if "/" in path:
        candidates = [path, os.path.join("oocarray", path), os.path.join("native", path)]
        candidates.append(os.path.normpath(os.path.join(here, path)))
        found = next((c for c in candidates if c in REPO_FILES), None)
        if found is None:
            return "no such file"
    else:
        if path not in REPO_NAMES:
            return "no file of that name"
        found = None
    if test and found:
        with open(os.path.join(ROOT, found), encoding="utf-8") as f:
            pattern = rf"^\s*(?:async\s+)?def {re.escape(test)}\b|^class {re.escape(test)}\b"
            if not re.search(pattern, f.read(), re.M):
                return f"no test {test} in it"
    return None


def check(path: str) -> Iterator[str]:
    module = _module_name(path)
    rel = os.path.relpath(path, ROOT)
    for line, text, docstring in texts(path):
        for offset, row in enumerate(text.splitlines() or [text]):
            number = line + offset if not path.endswith(".md") else line
            for match in PATH.finditer(row):
                name = match.group(1)
                if re.fullmatch(r"[\w-]+\.(txt|json|yml|yaml|cfg)", name):
                    continue  # a file name in an example, not in this repository
                why = resolve_path(name, match.group(2), path)
                if why:
                    yield f"{rel}:{number}: {match.group(0)} ({why})"
            for match in DOTTED.finditer(row):
                name = match.group(1)
                if re.search(r"\.(py|pyi|c|h|md|zarr|npy|h5|json|toml)$", name):
                    continue  # a file name, checked as a path
                if not resolve_dotted(name):
                    yield f"{rel}:{number}: {name} (does not resolve)"
            for match in SHORT.finditer(row):
                if match.group(2) in EXTENSIONS:
                    continue  # a file name, checked as a path
                if resolve_short(match.group(1), match.group(2)) is False:
                    yield f"{rel}:{number}: {match.group(0)} (does not resolve)"
            if docstring and rel.startswith("oocarray"):
                for match in ROLE.finditer(row):
                    if not resolve_role(match.group(1), match.group(2), module):
                        yield f"{rel}:{number}: {match.group(0)} (does not resolve)"


def main(argv: list[str]) -> int:
    sys.path.insert(0, ROOT)
    found = [problem for path in files(tuple(argv) or DEFAULT) for problem in check(path)]
    for problem in found:
        print(problem)
    return 1 if found else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
