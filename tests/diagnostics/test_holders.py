"""The leak hint: oc.who_holds() and the holders named in leak errors."""

from __future__ import annotations

import sys

import numpy as np
import pytest

import oocarray as oc
from oocarray._diagnostics import _holders

HELD: list[np.ndarray] = []
LAST_ERROR: list[BaseException] = []


@pytest.fixture(autouse=True)
def _forget() -> None:
    HELD.clear()
    LAST_ERROR.clear()
    _holders._pacing["next"] = 0.0  # every test's leak report searches


def test_leak_reports_in_quick_succession_search_once() -> None:
    messages = []
    for _ in range(2):
        with pytest.raises(oc.ScopeLeakError) as raised, oc.Manager("leaky", on_close="raise"):
            HELD.append(np.ones(4))
        HELD.clear()
        messages.append(str(raised.value))
    assert "held by item 0 of a list, in global 'HELD'" in messages[0]
    assert "held by" not in messages[1]
    assert "array shape=(4,)" in messages[1]


def test_a_list_in_a_global() -> None:
    with oc.Manager("scope"):
        HELD.append(np.ones(1000))
    holders = oc.who_holds(HELD[0])
    assert holders[0].kind == "global"
    assert str(holders[0]) == f"item 0 of a list, in global 'HELD' of module {__name__!r}"


def test_a_scope_leak_error_names_the_holder() -> None:
    with pytest.raises(oc.ScopeLeakError) as raised, oc.Manager("leaky", on_close="raise"):
        HELD.append(np.ones(1000))
    message = str(raised.value)
    assert f"held by item 0 of a list, in global 'HELD' of module {__name__!r} [global]" in message


def test_a_workspace_leak_names_the_running_local() -> None:
    ws = oc.Workspace("cycle")

    def step() -> None:
        with ws:
            y = np.ones(1000)
            assert y is not None

    with pytest.raises(oc.WorkspaceLeakError) as raised:
        step()
    ws.close()
    assert "held by local variable 'y' of" in str(raised.value)
    assert "step() (test_holders.py:" in str(raised.value)


def _fails() -> None:
    z = np.ones(1000)
    raise ValueError(f"failed with {z.size}")


def _local_of_the_failed_frame() -> np.ndarray:
    tb = LAST_ERROR[0].__traceback__
    assert tb is not None and tb.tb_next is not None
    z: np.ndarray = tb.tb_next.tb_frame.f_locals["z"]
    return z


def test_a_traceback() -> None:
    try:
        _fails()
    except ValueError as error:
        LAST_ERROR.append(error)
    holders = [str(h) for h in oc.who_holds(_local_of_the_failed_frame()) if h.kind == "traceback"]
    assert holders
    assert holders[0].startswith("local variable 'z' of _fails() (test_holders.py:")
    assert holders[0].endswith(
        "in a traceback, in a ValueError exception, in item 0 of a list, in global "
        f"'LAST_ERROR' of module {__name__!r}"
    )


def test_the_notebook_output_history(monkeypatch: pytest.MonkeyPatch) -> None:
    main = sys.modules["__main__"]
    out = {7: np.ones(10)}
    monkeypatch.setattr(main, "Out", out, raising=False)
    monkeypatch.setattr(main, "_7", out[7], raising=False)
    holders = oc.who_holds(out[7])
    kinds = {h.description: h.kind for h in holders}
    assert kinds["the notebook's output history Out[7]"] == "notebook"
    assert kinds["the notebook's output variable _7"] == "notebook"


def test_a_running_local_and_an_attribute() -> None:
    class Box:
        def __init__(self, value: np.ndarray) -> None:
            self.value = value

    box = Box(np.ones(5))
    described = [str(h) for h in oc.who_holds(box.value)]
    assert any(
        d.startswith("attribute 'value' of a ")
        and "local variable 'box' of test_a_running_local_and_an_attribute()" in d
        for d in described
    )


def test_never_raises() -> None:
    assert isinstance(oc.who_holds(None), list)
    assert isinstance(oc.who_holds(3), list)
    nobody = oc.who_holds(np.ones(3))  # only the call's argument holds it
    assert nobody == []
