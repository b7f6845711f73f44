"""Bad input raises a clear exception of the documented type, never a crash.

Every public argument of ``oc.Manager``, its allocation and ownership methods, the module
functions, ``oc.configure`` and the ``OOCARRAY_*`` environment variables gets values of the
wrong type and values out of range.  Where the code promises it, the message names the setting
and the value; after a refusal nothing is counted and nothing is half-changed.
"""

from __future__ import annotations

import functools
import subprocess
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest

import oocarray as oc
from oocarray import _native
from testkit.children import run_python

# ---------------------------------------------------------------- values

# (value, the exception it must raise) for every setting that takes a byte size
BAD_SIZES: list[tuple[object, type[Exception]]] = [
    ("lots", ValueError),
    (-1, ValueError),
    ("-1", ValueError),
    ("-5M", ValueError),
    ("8Gi", ValueError),
    ("8iB", ValueError),
    ("", ValueError),
    ("   ", ValueError),
    ("5 X", ValueError),
    ("GB", ValueError),
    ("1.2.3", ValueError),
    ("0x10", ValueError),
    ("2**10", ValueError),
    ("nan", ValueError),
    ("inf", ValueError),
    (float("nan"), ValueError),
    (float("inf"), ValueError),
    (float("-inf"), ValueError),
    (1.5, ValueError),
    (-1024.0, ValueError),
    (np.float64("nan"), ValueError),
    (np.int64(-1), ValueError),
    (2**62 + 1, ValueError),
    (2**63, ValueError),
    ("9" * 30, ValueError),
    ("9999999T", ValueError),
    (True, TypeError),
    (False, TypeError),
    (np.bool_(True), TypeError),
    ([1], TypeError),
    ((1,), TypeError),
    ({"max": 1}, TypeError),
    (b"8G", TypeError),
    (1 + 0j, TypeError),
    (object(), TypeError),
]
SIZE_IDS = [repr(v)[:20] for v, _ in BAD_SIZES]

NOT_ARRAYS: list[object] = [
    None,
    [1, 2],
    (1, 2),
    3,
    2.5,
    "abc",
    b"abc",
    memoryview(b"abc"),
    np.float64(1.0),
    np.int8(1),
    object(),
]
NOT_ARRAY_IDS = [type(v).__name__ for v in NOT_ARRAYS]

BAD_SHAPE_TYPES: list[object] = [
    "3",
    3.0,
    None,
    True,
    (True,),
    (2, 3.0),
    (2, "3"),
    (2, None),
    ([2], 3),
    {1: 2},
    b"ab",
    object(),
    np.float64(3.0),
]
NEGATIVE_SHAPES: list[object] = [-1, (-1,), (2, -3), (0, -1), np.int64(-5), (np.int32(-1), 2)]
BAD_DTYPES: list[object] = ["nope", "f9", "", 1, object(), [("a", "zz")], "i4,zz"]


def case_id(value: object) -> str:
    """A test's id, the same in every process (a bare object's repr shows its address, and
    parallel runs must collect the same ids)."""
    return "object()" if type(value) is object else repr(value)


def message_names(error: pytest.ExceptionInfo[BaseException], *parts: object) -> None:
    """The message contains each part (a string, or a tuple of acceptable spellings)."""
    text = str(error.value)
    for part in parts:
        spellings = part if isinstance(part, tuple) else (part,)
        assert any(str(p) in text for p in spellings), f"{part!r} not in {text!r}"


def shown(value: object) -> tuple[str, str]:
    """How a message may show a value: its repr, or (NumPy scalars) its str."""
    return (repr(value), str(value))


@pytest.fixture
def manager() -> Iterator[oc.Manager]:
    """An open manager that holds nothing; at the end it must still hold nothing."""
    m = oc.Manager("bad-input")
    yield m
    s = m.stats()
    assert (s.current_bytes, s.current_count) == (0, 0), "a refused call left memory counted"
    m.close()


# ---------------------------------------------------------------- sizes


@pytest.mark.parametrize(("value", "error"), BAD_SIZES, ids=SIZE_IDS)
def test_parse_size_rejects(value: object, error: type[Exception]) -> None:
    with pytest.raises(error) as info:
        oc.parse_size(value, "my_setting")
    message_names(info, "my_setting", shown(value))


@pytest.mark.parametrize(("value", "error"), BAD_SIZES, ids=SIZE_IDS)
def test_manager_max_bytes_rejects(value: object, error: type[Exception]) -> None:
    children_before = oc.system().children
    with pytest.raises(error) as info:
        oc.Manager("sized", max_bytes=value)  # type: ignore[arg-type]
    message_names(info, "max_bytes", shown(value))
    assert oc.system().children == children_before, "a refused manager joined the tree"


@pytest.mark.parametrize(("value", "error"), BAD_SIZES, ids=SIZE_IDS)
def test_sub_max_bytes_rejects(manager: oc.Manager, value: object, error: type[Exception]) -> None:
    with pytest.raises(error) as info:
        manager.sub("sized", max_bytes=value)
    message_names(info, "max_bytes", shown(value))
    assert manager.children == ()


@pytest.mark.parametrize(("value", "error"), BAD_SIZES, ids=SIZE_IDS)
def test_max_bytes_setter_rejects(
    manager: oc.Manager, value: object, error: type[Exception]
) -> None:
    manager.max_bytes = "1M"
    with pytest.raises(error) as info:
        manager.max_bytes = value  # type: ignore[assignment]
    message_names(info, "max_bytes", shown(value))
    assert manager.max_bytes == 1 << 20, "a refused budget was applied"


@pytest.mark.parametrize("setting", ["max_bytes", "max_physical_bytes", "max_spill_bytes"])
@pytest.mark.parametrize(("value", "error"), BAD_SIZES, ids=SIZE_IDS)
def test_configure_size_rejects(setting: str, value: object, error: type[Exception]) -> None:
    before = oc.config()
    with pytest.raises(error) as info:
        oc.configure(**{setting: value})
    message_names(info, setting, shown(value))
    assert oc.config() == before, "a refused setting was applied"


@pytest.mark.parametrize(
    "value", ["512M", "8G", "1.5GiB", "2GB", 1024, 1024.0, np.int64(7), 2**62, "0", 0]
)
def test_good_sizes_are_accepted(value: object) -> None:
    """The other side of the rejections above: the documented forms work."""
    assert isinstance(oc.parse_size(value, "size"), int)
    m = oc.Manager("sized", max_bytes=value)  # type: ignore[arg-type]
    assert m.max_bytes == oc.parse_size(value)
    m.close()


@pytest.mark.parametrize("value", ["1e400", "1e5000K"])
def test_parse_size_overflow_is_a_value_error(value: str) -> None:
    with pytest.raises(ValueError, match="my_setting"):
        oc.parse_size(value, "my_setting")


@pytest.mark.parametrize("value", ["1.5", "0.5", "1E-2"])
def test_parse_size_rejects_fractional_bytes_in_strings(value: str) -> None:
    with pytest.raises(ValueError, match="my_setting"):
        oc.parse_size(value, "my_setting")  # "0.5" silently becomes a budget of 0 bytes


# ---------------------------------------------------------------- Manager(...)


@pytest.mark.parametrize("name", [1, 1.0, b"x", ["a"], object()], ids=case_id)
def test_manager_name_must_be_str(name: object) -> None:
    with pytest.raises(TypeError) as info:
        oc.Manager(name)  # type: ignore[arg-type]
    message_names(info, "name", repr(name))


@pytest.mark.parametrize(
    "parent", ["System", 1, object(), np.zeros(1), oc.Manager, {"name": "x"}], ids=case_id
)
def test_manager_parent_must_be_a_manager(parent: object) -> None:
    with pytest.raises(TypeError) as info:
        oc.Manager("child", parent=parent)  # type: ignore[arg-type]
    message_names(info, "parent")


@pytest.mark.parametrize(
    ("argument", "value"),
    [
        ("location", "disk"),
        ("location", "RAM"),
        ("location", ""),
        ("location", 1),
        ("spill", "swap"),
        ("spill", "MMAP"),
        ("spill", ""),
        ("spill", 1),
        ("spill", True),
        ("on_close", "ignore"),
        ("on_close", "free"),
        ("on_close", ""),
        ("on_close", 1),
        ("on_close", None),
        ("on_close", ["keep"]),
    ],
)
def test_manager_choices_are_checked(argument: str, value: object) -> None:
    """Policies are one of a fixed set of strings; the message lists the choices."""
    with pytest.raises((ValueError, TypeError)) as info:
        oc.Manager("policy", **{argument: value})
    message_names(info, argument, repr(value), "must be one of")


def test_manager_arguments_after_name_are_keyword_only() -> None:
    with pytest.raises(TypeError):
        oc.Manager("a", None)  # type: ignore[misc]


@pytest.mark.parametrize("keyword", ["bogus", "budget", "max_size", "policy"])
def test_manager_unknown_keyword(keyword: str) -> None:
    with pytest.raises(TypeError, match=keyword):
        oc.Manager("a", **{keyword: 1})


def test_manager_under_closed_parent(manager: oc.Manager) -> None:
    parent = manager.sub("closing")
    parent.close()
    with pytest.raises(oc.ClosedError) as info:
        oc.Manager("late", parent=parent)
    message_names(info, "'closing'")
    with pytest.raises(oc.ClosedError, match="'closing'"):
        parent.sub("late")


def test_system_manager_cannot_be_closed() -> None:
    with pytest.raises(ValueError, match="system manager"):
        oc.system().close()
    assert not oc.system().closed


# ---------------------------------------------------------------- sub(...)


@pytest.mark.parametrize(
    ("kwargs", "error", "named"),
    [
        ({"name": 1}, TypeError, "name"),
        ({"bogus": 1}, TypeError, "bogus"),
        ({"parent": None}, TypeError, "parent"),
        ({"max_bytes": "lots"}, ValueError, "max_bytes"),
        ({"max_bytes": [1]}, TypeError, "max_bytes"),
        ({"spill": "swap"}, ValueError, "spill"),
        ({"location": 3}, (TypeError, ValueError), "location"),
        ({"on_close": "drop"}, ValueError, "on_close"),
    ],
)
def test_sub_rejects(
    manager: oc.Manager,
    kwargs: dict[str, Any],
    error: type[Exception] | tuple[type[Exception], ...],
    named: str,
) -> None:
    with pytest.raises(error) as info:
        manager.sub(**kwargs)
    message_names(info, named)
    assert manager.children == ()


# ---------------------------------------------------------------- empty / zeros / full


def _allocators(m: oc.Manager) -> dict[str, Callable[..., np.ndarray]]:
    return {
        "empty": m.empty,
        "zeros": m.zeros,
        "full": lambda shape, *args, **kwargs: m.full(shape, 0, *args, **kwargs),
    }


ALLOCATORS = ["empty", "zeros", "full"]


@pytest.mark.parametrize("kind", ALLOCATORS)
@pytest.mark.parametrize("shape", NEGATIVE_SHAPES, ids=repr)
def test_negative_shape(manager: oc.Manager, kind: str, shape: object) -> None:
    with pytest.raises(ValueError, match="shape entries must not be negative"):
        _allocators(manager)[kind](shape)


@pytest.mark.parametrize("kind", ALLOCATORS)
@pytest.mark.parametrize("shape", BAD_SHAPE_TYPES, ids=lambda v: type(v).__name__)
def test_shape_of_wrong_type(manager: oc.Manager, kind: str, shape: object) -> None:
    with pytest.raises(TypeError) as info:
        _allocators(manager)[kind](shape)
    message_names(info, "shape", repr(shape))


@pytest.mark.parametrize("kind", ALLOCATORS)
@pytest.mark.parametrize(
    ("shape", "dtype"),
    [((2**62,), np.float64), ((2**31, 2**31, 2**31), np.int8), ((2**40, 2**40), np.int16)],
    ids=["2**62 float64", "2**93 int8", "2**80 int16"],
)
def test_shape_too_big_for_numpy(manager: oc.Manager, kind: str, shape: Any, dtype: Any) -> None:
    """More bytes than an address space holds: NumPy's ValueError, before any allocation."""
    with pytest.raises(ValueError, match="too big"):
        _allocators(manager)[kind](shape, dtype)
    assert manager.stats().total_count == 0


@pytest.mark.parametrize("kind", ALLOCATORS)
@pytest.mark.parametrize("shape", [(2**61,), (2**62,), (2**40, 2**20)], ids=repr)
def test_absurd_shape_without_budget(manager: oc.Manager, kind: str, shape: Any) -> None:
    """Exabytes that no machine has: a MemoryError, nothing counted, the manager usable."""
    with pytest.raises(MemoryError):
        _allocators(manager)[kind](shape, np.int8)
    _native.take_failure()
    assert manager.stats().ram_bytes == 0
    assert manager.zeros(3).sum() == 0


@pytest.mark.parametrize("spill", ["fail", "mmap", "evict"])
@pytest.mark.parametrize("kind", ALLOCATORS)
# Above the 128 TiB user address space, so that no policy can touch the disk for them.
@pytest.mark.parametrize("shape", [(2**61,), (2**48,), (2**24, 2**24)], ids=repr)
def test_absurd_shape_with_budget(kind: str, shape: Any, spill: str) -> None:
    """Over a budget, whatever the spill policy: a MemoryBudgetError naming the manager."""
    with oc.Manager("budgeted", max_bytes="1M", spill=spill) as m:  # type: ignore[arg-type]
        with pytest.raises(oc.MemoryBudgetError) as info:
            _allocators(m)[kind](shape, np.int8)
        assert isinstance(info.value, MemoryError)
        message_names(info, "'budgeted'", "budget")
        del info
        s = m.stats()
        assert (s.current_bytes, s.current_count) == (0, 0)
        assert m.zeros(3).sum() == 0


def test_absurd_shape_2_62_with_budget_is_a_budget_error() -> None:
    with oc.Manager("budgeted", max_bytes="1M", spill="fail") as m:
        try:
            with pytest.raises(oc.MemoryBudgetError):
                m.empty((2**62,), np.int8)
        finally:
            _native.take_failure()


def test_absurd_shape_with_mmap_location() -> None:
    """Placed on disk from the start: the failure is still an oocarray MemoryError."""
    with oc.Manager("on-disk", location="mmap") as m:
        with pytest.raises(MemoryError) as info:
            m.empty((2**61,), np.int8)
        assert isinstance(info.value, oc.OOCArrayError)
        message_names(info, "'on-disk'")
        del info
        assert m.stats().current_count == 0


@pytest.mark.parametrize("kind", [*ALLOCATORS, "asarray"])
@pytest.mark.parametrize("dtype", BAD_DTYPES, ids=case_id)
def test_bad_dtype(manager: oc.Manager, kind: str, dtype: object) -> None:
    if kind == "asarray":
        call = functools.partial(manager.asarray, [1, 2, 3], dtype)
    else:
        call = functools.partial(_allocators(manager)[kind], (2, 3), dtype)
    with pytest.raises(TypeError, match=r"data type|dtype"):
        call()


@pytest.mark.parametrize("kind", ALLOCATORS)
@pytest.mark.parametrize(("order", "error"), [("X", ValueError), ("", ValueError), (1, TypeError)])
def test_bad_order(manager: oc.Manager, kind: str, order: object, error: type[Exception]) -> None:
    with pytest.raises(error, match="order"):
        _allocators(manager)[kind]((2, 3), order=order)


@pytest.mark.parametrize(
    ("fill", "error"), [("abc", ValueError), ([1, 2], ValueError), (object(), TypeError)]
)
def test_full_with_bad_fill_value(
    manager: oc.Manager, fill: object, error: type[Exception]
) -> None:
    """NumPy allocates the result before it fails to fill it: that memory is released."""
    with pytest.raises(error):
        manager.full((3,), fill, np.float64)
    assert manager.stats().total_count >= 1


@pytest.mark.parametrize(
    ("obj", "dtype", "error"),
    [
        ([[1], [1, 2]], None, ValueError),
        (["a", "b"], np.float64, ValueError),
        ([1, 2], "nope", TypeError),
        ({1, 2}, np.int64, TypeError),
    ],
    ids=["ragged", "strings as floats", "bad dtype", "set"],
)
def test_asarray_rejects(
    manager: oc.Manager, obj: object, dtype: Any, error: type[Exception]
) -> None:
    with pytest.raises(error):
        manager.asarray(obj, dtype)


# ---------------------------------------------------------------- closed managers


@pytest.mark.parametrize(
    "call",
    [
        lambda m: m.empty(3),
        lambda m: m.zeros(3),
        lambda m: m.full(3, 1.0),
        lambda m: m.asarray([1, 2]),
        lambda m: m.attach(np.zeros(2)),
        lambda m: m.sub("late"),
        lambda m: m.activate().__enter__(),
        lambda m: m.__enter__(),
    ],
    ids=["empty", "zeros", "full", "asarray", "attach", "sub", "activate", "with"],
)
def test_closed_manager_refuses(call: Callable[[oc.Manager], object]) -> None:
    m = oc.Manager("closed-one")
    m.close()
    with pytest.raises(oc.ClosedError) as info:
        call(m)
    assert isinstance(info.value, ValueError)
    message_names(info, "'closed-one'", "closed")
    m.close()  # closing twice does nothing


# ---------------------------------------------------------------- ownership and spill


@pytest.mark.parametrize("value", NOT_ARRAYS, ids=NOT_ARRAY_IDS)
@pytest.mark.parametrize("function", ["owner", "location", "detach", "spill", "unspill"])
def test_module_functions_take_arrays(function: str, value: object) -> None:
    with pytest.raises(TypeError) as info:
        getattr(oc, function)(value)
    message_names(info, f"{function}()", "numpy.ndarray", type(value).__name__)


@pytest.mark.parametrize("value", NOT_ARRAYS, ids=NOT_ARRAY_IDS)
@pytest.mark.parametrize("method", ["attach", "keep"])
def test_manager_methods_take_arrays(manager: oc.Manager, method: str, value: object) -> None:
    with pytest.raises(TypeError) as info:
        getattr(manager, method)(value)
    message_names(info, f"{method}()", "numpy.ndarray", type(value).__name__)


@pytest.mark.parametrize("function", ["spill", "unspill"])
def test_spill_of_unmanaged_array(function: str) -> None:
    with pytest.raises(ValueError, match=rf"{function}\(\) takes arrays whose memory oocarray"):
        getattr(oc, function)(np.zeros(100_000))


def test_unmanaged_arrays_are_reported_not_refused() -> None:
    plain = np.zeros(3)
    assert oc.owner(plain) is None
    assert oc.location(plain) is None
    assert oc.detach(plain) is plain


def test_attach_of_unmanaged_array(manager: oc.Manager) -> None:
    with pytest.raises(ValueError, match=r"m\.asarray\(arr\)"):
        manager.attach(np.zeros(3))


def test_keep_of_array_owned_elsewhere(manager: oc.Manager) -> None:
    with oc.Manager("elsewhere") as other:
        arr = other.zeros(3)
        with pytest.raises(ValueError, match="keep") as info:
            manager.keep(arr)
        message_names(info, "'bad-input'", "'elsewhere'")
        del arr, info
    with pytest.raises(ValueError, match="'no manager'"):
        manager.keep(np.zeros(3))


def test_attach_over_budget(manager: oc.Manager) -> None:
    small = manager.sub("small", max_bytes=100)
    arr = manager.zeros(1000, np.int8)
    with pytest.raises(oc.MemoryBudgetError) as info:
        small.attach(arr)
    message_names(info, "'small'")
    del info
    assert oc.owner(arr) is manager
    assert small.stats().current_count == 0
    del arr
    small.close()


# ---------------------------------------------------------------- configure(...)


@pytest.mark.parametrize(
    ("value", "error"),
    [
        (1, TypeError),
        (b"/tmp", TypeError),
        (["/tmp"], TypeError),
        (True, TypeError),
        ("", ValueError),
    ],
    ids=repr,
)
def test_configure_spill_dir_rejects(value: object, error: type[Exception]) -> None:
    before = oc.config()
    with pytest.raises(error) as info:
        oc.configure(spill_dir=value)
    message_names(info, "spill_dir", repr(value))
    assert oc.config() == before


def test_configure_spill_dir_that_is_a_file(tmp_path: Any) -> None:
    a_file = tmp_path / "not-a-directory"
    a_file.write_text("")
    before = oc.config()
    try:
        with pytest.raises(ValueError, match="spill_dir"):
            oc.configure(spill_dir=str(a_file), trace=True)
    finally:
        changed = oc.config() != before
        oc.configure(spill_dir=before.spill_dir, trace=before.trace)
    assert not changed, "the refused settings were applied anyway"


@pytest.mark.parametrize("value", ["yes", "1", 1, 0, None, [True], np.bool_(True)], ids=repr)
def test_configure_trace_takes_a_bool(value: object) -> None:
    before = oc.config()
    with pytest.raises(TypeError) as info:
        oc.configure(trace=value)
    message_names(info, "trace", repr(value))
    assert oc.config() == before


def test_configure_is_all_or_nothing() -> None:
    """One bad setting: none of the good ones in the same call are applied."""
    before = oc.config()
    with pytest.raises(TypeError, match="trace"):
        oc.configure(max_bytes="1G", max_spill_bytes="2G", trace="yes")
    with pytest.raises(ValueError, match="max_spill_bytes"):
        oc.configure(max_bytes="1G", max_spill_bytes="lots")
    assert oc.config() == before
    assert oc.system().max_bytes == before.max_bytes


@pytest.mark.parametrize("keyword", ["bogus", "max_byte", "spill"])
def test_configure_unknown_setting(keyword: str) -> None:
    with pytest.raises(TypeError, match=keyword):
        oc.configure(**{keyword: 1})


def test_configure_takes_at_most_five_arguments() -> None:
    with pytest.raises(TypeError):
        oc.configure(None, None, None, None, False, 1)  # type: ignore[call-arg]


def test_config_is_frozen() -> None:
    with pytest.raises(AttributeError):
        oc.config().max_bytes = 1  # type: ignore[misc]


# ---------------------------------------------------------------- environment variables

IMPORT = "import oocarray; print('imported')"


def _import_with(variable: str, value: str) -> subprocess.CompletedProcess[str]:
    return run_python(IMPORT, env={variable: value})


BAD_ENVIRONMENT = [
    ("OOCARRAY_MAX_BYTES", "lots"),
    ("OOCARRAY_MAX_BYTES", "-1"),
    ("OOCARRAY_MAX_BYTES", "nan"),
    ("OOCARRAY_MAX_BYTES", "8 GB of RAM"),
    ("OOCARRAY_MAX_PHYSICAL_BYTES", "8Gi"),
    ("OOCARRAY_MAX_PHYSICAL_BYTES", "-5M"),
    ("OOCARRAY_MAX_SPILL_BYTES", "lots"),
    ("OOCARRAY_MAX_SPILL_BYTES", "99999999999P"),
    ("OOCARRAY_TRACE", "maybe"),
    ("OOCARRAY_TRACE", "2"),
]


@pytest.mark.parametrize(("variable", "value"), BAD_ENVIRONMENT)
def test_bad_environment_variable_fails_import(variable: str, value: str) -> None:
    done = _import_with(variable, value)
    assert done.returncode > 0, "the import did not fail (or died of a signal)"
    assert "imported" not in done.stdout
    last_line = done.stderr.strip().splitlines()[-1]
    assert last_line.startswith(("ValueError", "TypeError")), done.stderr
    assert variable in last_line, last_line
    assert repr(value) in last_line, last_line


@pytest.mark.parametrize(
    ("variable", "value"),
    [("OOCARRAY_MAX_BYTES", "512M"), ("OOCARRAY_TRACE", "off"), ("OOCARRAY_MAX_BYTES", "  ")],
)
def test_good_environment_variable_imports(variable: str, value: str) -> None:
    done = _import_with(variable, value)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "imported"


def test_environment_size_overflow_names_the_variable() -> None:
    done = _import_with("OOCARRAY_MAX_BYTES", "1e400")
    assert done.returncode > 0
    assert "OOCARRAY_MAX_BYTES" in done.stderr.strip().splitlines()[-1], done.stderr


def test_environment_spill_dir_that_is_a_file_names_the_variable(tmp_path: Any) -> None:
    a_file = tmp_path / "not-a-directory"
    a_file.write_text("")
    done = _import_with("OOCARRAY_SPILL_DIR", str(a_file))
    assert done.returncode > 0
    assert "OOCARRAY_SPILL_DIR" in done.stderr.strip().splitlines()[-1], done.stderr
