"""The leak hint: what still holds an array that outlived its scope.

:func:`who_holds` follows references backwards (:func:`gc.get_referrers`) from an object up to
something a user can act on: a module global, a notebook's output history (IPython's ``Out``
and ``_N`` variables), the last uncaught exception (``sys.last_traceback``), a local variable
of a running function.  Best effort and bounded: a few chains, a few levels, a few heap scans.
"""

from __future__ import annotations

import gc
import inspect
import os
import re
import sys
import time
import types
from collections.abc import Set
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["Holder", "holder_lines", "who_holds"]

_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
_NOTEBOOK_OUTPUT = re.compile(r"_\d+|_{1,3}")
_LAST_ERROR = ("last_traceback", "last_value", "last_exc")
# A leak report hints at holders with a few heap scans only (each costs tens of ms).
_LEAK_SCANS = 4
_KIND_ORDER = {"global": 0, "notebook": 0, "traceback": 0, "local": 1, "object": 2}


@dataclass(frozen=True, slots=True)
class Holder:
    """One chain of references that keeps an object alive.

    Attributes
    ----------
    kind
        Where the chain starts: ``"global"`` (a module variable), ``"notebook"`` (IPython's
        output history), ``"traceback"`` (an exception's traceback keeps a frame alive),
        ``"local"`` (a variable of a running function), or ``"object"`` when the chain ends
        somewhere unnamed (a container or object nothing named holds).
    description
        The chain, from the nearest holder outwards, e.g. ``"item 0 of a list, in global
        'cache' of module 'jobs'"``.
    """

    kind: str
    description: str

    def __str__(self) -> str:
        return self.description


@dataclass
class _Search:
    ignore: set[int]
    modules: dict[int, str]
    # Holders the garbage collector cannot show: running functions' locals, and dicts it does
    # not track (CPython stops tracking a dict that holds only ints, strings and arrays, such
    # as IPython's Out): by id of the held object, (kind, description).
    direct: dict[int, list[tuple[str, str]]]
    out_ids: set[int]
    notebook_ids: set[int]
    scans_left: int


def who_holds(obj: object, *, limit: int = 5, depth: int = 6) -> list[Holder]:
    """Name what still references ``obj`` (best effort, never raises).

    Parameters
    ----------
    obj
        Any object, typically an array that escaped a manager or a workspace cycle.
    limit
        At most this many holders are returned.
    depth
        How many references to follow back from ``obj`` at most.

    Returns
    -------
    list of Holder
        Nearest holders first; empty when nothing traceable holds it (a NumPy view, which
        the garbage collector does not see, for one).

    Examples
    --------
    >>> import numpy as np, oocarray as oc
    >>> def make():
    ...     return [np.zeros(3)]
    >>> cache = make()
    >>> [h.kind for h in oc.who_holds(cache[0])]
    ['local']
    >>> print(oc.who_holds(cache[0])[0])  # doctest: +ELLIPSIS
    item 0 of a list, in variable 'cache' of module code (<doctest ...>:1)
    """
    try:
        search = _start(extra_ignore=set())
        holders = _search(obj, search, limit, depth)
        search.direct.clear()
        return holders
    except Exception:  # a hint must never turn into an error of its own
        return []


def holder_lines(obj: object, ignore: set[int]) -> list[str]:
    """The hook the memory layer calls for leak reports: one line per holder.

    Each search scans the whole heap a few times, which takes seconds in a large process: a
    search comes at most once a second and once per ten times the last one took, so that code
    raising many leak errors (and catching them) spends at most a tenth of its time here."""
    now = time.monotonic()
    if now < _pacing["next"]:
        return []  # (oc.who_holds(array) searches on demand)
    try:
        search = _start(extra_ignore=ignore, scans=_LEAK_SCANS)
        holders = _search(obj, search, 2, 4)
        search.direct.clear()
    except Exception:
        return []
    finally:
        _pacing["next"] = time.monotonic() + max(1.0, 10 * (time.monotonic() - now))
    return [f"{h.description} [{h.kind}]" for h in holders]


# When the next leak report may search for holders (see :func:`holder_lines`).
_pacing = {"next": 0.0}


def _start(extra_ignore: set[int], scans: int = 40) -> _Search:
    modules: dict[int, str] = {}
    for name, module in list(sys.modules.items()):
        namespace = getattr(module, "__dict__", None)
        if isinstance(namespace, dict):
            modules.setdefault(id(namespace), name)
    histories, notebooks = _notebook_namespaces()
    ignore = set(extra_ignore)
    direct = _running_locals(ignore, modules.keys() | {id(n) for n in notebooks})
    for history in histories:
        for key, value in list(history.items()):
            direct.setdefault(id(value), []).append(
                ("notebook", f"the notebook's output history Out[{key!r}]")
            )
    # Untracked dicts are looked for where user code keeps things (a script's or a notebook's
    # globals): scanning every module's would cost more than the rest of the search.
    main = sys.modules.get("__main__")
    scanned = (
        [("__main__", vars(main))] if isinstance(getattr(main, "__dict__", None), dict) else []
    )
    for name, namespace in [*scanned, *(("notebook", n) for n in notebooks)]:
        for key, value in list(namespace.items()):
            if (
                type(value) is dict
                and not gc.is_tracked(value)
                and id(value) not in ignore
                and all(value is not h for h in histories)
            ):
                where = (
                    f"notebook variable {key!r}"
                    if name == "notebook"
                    else f"global {key!r} of module {name!r}"
                )
                for inner, held in list(value.items()):
                    direct.setdefault(id(held), []).append(
                        ("global", f"value {inner!r} of a dict, in {where}")
                    )
    return _Search(
        ignore,
        modules,
        direct,
        {id(h) for h in histories},
        {id(n) for n in notebooks},
        scans_left=scans,
    )


def _notebook_namespaces() -> tuple[list[dict[Any, Any]], list[dict[str, Any]]]:
    """IPython's output history dicts (``Out``), and its user namespaces."""
    namespaces: list[object] = [getattr(sys.modules.get("__main__"), "__dict__", None)]
    ipython = sys.modules.get("IPython")
    shell = None
    if ipython is not None:
        try:
            shell = ipython.get_ipython()
        except Exception:
            shell = None
    if shell is not None:
        namespaces += [getattr(shell, "user_ns", None), getattr(shell, "user_ns_hidden", None)]
    histories: dict[int, dict[Any, Any]] = {}
    for namespace in namespaces:
        if isinstance(namespace, dict):
            for key in ("Out", "_oh"):
                if isinstance(namespace.get(key), dict):
                    histories[id(namespace[key])] = namespace[key]
    history = getattr(getattr(shell, "history_manager", None), "output_hist", None)
    if isinstance(history, dict):
        histories[id(history)] = history
    notebooks = [n for n in namespaces[1:] if isinstance(n, dict)]
    return list(histories.values()), notebooks


def _running_locals(ignore: set[int], namespaces: Set[int]) -> dict[int, list[tuple[str, str]]]:
    """Ids of the values of running functions' locals, with a description of each variable.

    Running frames do not show their locals to the garbage collector, so they are read here
    (the library's own frames skipped).  Before Python 3.13 ``f_locals`` is a snapshot dict
    stored on the frame: it is ignored as a referrer, and the arrays are dropped from it again
    so that reading it does not keep them alive (as ``_memory._escapes`` does).  Code running
    at the top of a module (or of a notebook cell) is left to the module's globals."""
    found: dict[int, list[tuple[str, str]]] = {}
    for frame in sys._current_frames().values():
        f: Any = frame
        while f is not None:
            code = f.f_code
            optimized = code.co_flags & inspect.CO_OPTIMIZED
            in_module = not optimized and id(f.f_globals) in namespaces
            if not code.co_filename.startswith(_PACKAGE_DIR) and not in_module:
                snapshot = f.f_locals
                ignore.add(id(snapshot))
                where = f"{_function(code)} ({_place(f)})"
                for key, value in snapshot.items():
                    found.setdefault(id(value), []).append(
                        (
                            "local",
                            f"local variable {key!r} of {where}, still running"
                            if optimized
                            else f"variable {key!r} of {where}",
                        )
                    )
                if type(snapshot) is dict and optimized:
                    for key in [k for k, v in snapshot.items() if isinstance(v, np.ndarray)]:
                        del snapshot[key]
                del snapshot
            f = f.f_back
        del f, frame
    return found


def _function(code: types.CodeType) -> str:
    name = getattr(code, "co_qualname", code.co_name)
    return "module code" if name == "<module>" else f"{name}()"


def _place(frame: types.FrameType) -> str:
    return f"{os.path.basename(frame.f_code.co_filename)}:{frame.f_lineno}"


def _search(obj: object, search: _Search, limit: int, depth: int) -> list[Holder]:
    holders: list[Holder] = []
    _climb(obj, [], None, {id(obj)}, search, holders, limit, depth)
    # Named holders first (a chain that ends unnamed says less), in the order found.
    unique = list({h.description: h for h in holders}.values())
    unique.sort(key=lambda h: _KIND_ORDER.get(h.kind, len(_KIND_ORDER)))
    return unique[:limit]


def _climb(
    obj: object,
    chain: list[str],
    traced: str | None,
    seen: set[int],
    search: _Search,
    holders: list[Holder],
    limit: int,
    depth: int,
) -> None:
    """Follow references back from ``obj``; ``chain`` describes how ``obj`` holds the target."""
    if len(holders) >= limit:
        return
    direct = search.direct.get(id(obj), [])
    for kind, how in direct[:3]:
        holders.append(_holder(traced or kind, [*chain, how]))
    if len(chain) >= depth or search.scans_left <= 0:
        if chain and not direct:
            holders.append(_holder(traced or "object", chain))
        return
    search.scans_left -= 1
    referrers = gc.get_referrers(obj)
    search.ignore.add(id(referrers))
    went_on = False
    for ref in referrers:
        if len(holders) >= limit:
            break
        if id(ref) in search.ignore or id(ref) in seen or isinstance(ref, type):
            continue
        if isinstance(ref, types.FrameType) and isinstance(obj, types.FrameType):
            continue  # a callee's frame (f_back): not what keeps this one
        link = _link(ref, obj, search)
        if link is None:
            continue
        how, root, kind, up = link
        del link  # a tuple holding ``up``: it would be found as a holder one level up
        went_on = True
        if kind == "traceback":
            traced = "traceback"
        # One traceback entry per frame of the exception: say it once.
        links = chain if chain and chain[-1] == how == "a traceback" else [*chain, how]
        if root:
            holders.append(_holder(traced or kind, links))
        else:
            _climb(up, links, traced, seen | {id(ref)}, search, holders, limit, depth)
    del referrers
    if not went_on and chain and not direct:
        holders.append(_holder(traced or "object", chain))


def _holder(kind: str, chain: list[str]) -> Holder:
    return Holder(kind, ", in ".join(chain))


def _link(ref: object, obj: object, search: _Search) -> tuple[str, bool, str, object] | None:
    """How ``ref`` holds ``obj``: (description, whether it is a named root, kind, the object
    to climb from next), or None to skip it."""
    if isinstance(ref, dict):
        return _dict_link(ref, obj, search)
    if isinstance(ref, list | tuple):
        index = next((i for i, v in enumerate(ref) if v is obj), None)
        where = "an item" if index is None else f"item {index}"
        return f"{where} of a {type(ref).__name__}", False, "object", ref
    if isinstance(ref, set | frozenset):
        return f"an item of a {type(ref).__name__}", False, "object", ref
    if isinstance(ref, types.FrameType):
        if ref.f_code.co_filename.startswith(_PACKAGE_DIR):
            return None
        names = [k for k, v in ref.f_locals.items() if v is obj]
        search.ignore.add(id(ref.f_locals))
        what = f"local variable {names[0]!r}" if names else "a local"
        return f"{what} of {_function(ref.f_code)} ({_place(ref)})", False, "object", ref
    if isinstance(ref, types.TracebackType):
        return "a traceback", False, "traceback", ref
    if isinstance(ref, BaseException):
        return f"a {type(ref).__name__} exception", False, "object", ref
    if isinstance(ref, types.CellType):
        return "a closure variable", False, "object", ref
    if isinstance(ref, types.FunctionType):
        return f"function {ref.__qualname__}", False, "object", ref
    if isinstance(ref, types.GeneratorType | types.CoroutineType):
        return f"a suspended {ref.__qualname__}", False, "object", ref
    if isinstance(ref, types.ModuleType):
        return f"module {ref.__name__!r}", True, "global", ref
    what = f"a {type(ref).__qualname__} object"
    namespace = getattr(ref, "__dict__", None)
    if isinstance(namespace, dict):
        names = [k for k, v in list(namespace.items()) if v is obj]
        if names:
            what = f"attribute {names[0]!r} of {what}"
    if type(ref).__module__.partition(".")[0] in ("IPython", "ipykernel"):
        return f"{what} of IPython (its output history)", True, "notebook", ref
    return what, False, "object", ref


def _dict_link(
    ref: dict[Any, Any], obj: object, search: _Search
) -> tuple[str, bool, str, object] | None:
    keys = [k for k, v in list(ref.items()) if v is obj]
    key = keys[0] if keys else None
    if id(ref) in search.notebook_ids:
        outputs = [k for k in keys if isinstance(k, str) and _NOTEBOOK_OUTPUT.fullmatch(k)]
        if outputs:
            names = ", ".join(outputs)
            return f"the notebook's output variable {names}", True, "notebook", ref
        return f"notebook variable {key!r}", True, "global", ref
    module = search.modules.get(id(ref))
    if module is not None:
        if module == "sys" and key in _LAST_ERROR:
            return f"sys.{key} (the last uncaught exception)", True, "traceback", ref
        if module == "__main__" and isinstance(key, str) and _NOTEBOOK_OUTPUT.fullmatch(key):
            return f"the notebook's output variable {key}", True, "notebook", ref
        return f"global {key!r} of module {module!r}", True, "global", ref
    if id(ref) in search.out_ids:
        return f"the notebook's output history Out[{key!r}]", True, "notebook", ref
    owner = _owner_of_namespace(ref, search)
    if owner is not None:
        return f"attribute {key!r} of a {type(owner).__qualname__} object", False, "object", owner
    return f"value {key!r} of a dict", False, "object", ref


def _owner_of_namespace(namespace: dict[Any, Any], search: _Search) -> object | None:
    """The object whose ``__dict__`` this is, if any."""
    if search.scans_left <= 0:
        return None
    search.scans_left -= 1
    referrers = gc.get_referrers(namespace)
    search.ignore.add(id(referrers))
    for ref in referrers:
        if id(ref) not in search.ignore and getattr(ref, "__dict__", None) is namespace:
            owner: object = ref
            return owner
    return None
