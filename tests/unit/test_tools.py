"""The tools a model calls while it generates, without a sandbox: the calculator, the settings read from the config
section ``tools`` (``settings.tools.Tools``), the plan's check of the chosen tool, the cut of a long output, and which
source of a user's tool is copied into the sandbox (tests/external/test_tool_sandbox.py runs the sandboxed tools)."""

from __future__ import annotations

import time

import pytest

from snakeskills.errors import SnakeskillsError
from snakeskills.plan.tools import ToolsPlan, check_tools_plan
from snakeskills.settings.tools import TAG_PRESETS, Tools
from snakeskills.tools.calculator import CalculationError, calculate
from snakeskills.tools.registry import TOOL_DESCRIPTIONS, TOOLS, check_tool, new_session
from snakeskills.tools.sandboxed import module_files
from snakeskills.tools.session import cut_output


def tools(tool: str | None, **settings) -> Tools:
    """The ``tools`` section of ``tool`` with ``settings``, the schema's defaults filling the rest."""
    return Tools.filled({"tool": tool, **settings}, "tools")


# ---------------------------------------------------------------- the calculator


@pytest.mark.parametrize(
    ("expression", "shown"),
    [
        ("37*84", "3108"),
        ("2**100", "1267650600228229401496703205376"),
        ("-(3 - 10) * 2", "14"),
        ("7 // 2", "3"),
        ("-7 % 3", "2"),
        ("2**-2", "0.25"),
        ("10**1000", "1" + "0" * 1000),
    ],
)
def test_calculator_integers_are_exact(expression, shown):
    assert calculate(expression) == shown


@pytest.mark.parametrize(
    ("expression", "shown"),
    [
        ("7/2", "3.5"),
        ("6/3", "2"),  # an integral value shows without ".0"
        ("0.1 + 0.2", "0.3"),  # decimals are read exactly
        ("1/3", "0.333333333333"),  # 12 significant digits
        ("2/3", "0.666666666667"),
        ("1.5e3", "1500"),
        ("2**0.5", "1.41421356237"),  # a fractional power is a float
        ("4**0.5", "2"),
        ("(1/3)**1000", "7.5638913231e-478"),
        ("10**30/3", "3.33333333333e+29"),
        ("  12 * 2\n", "24"),
    ],
)
def test_calculator_decimals(expression, shown):
    assert calculate(expression) == shown


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("1/0", "division by zero"),
        ("5 % 0", "division by zero"),
        ("0**-1", "division by zero"),
        ("(-8)**(1/3)", "result is not a real number"),
        ("", "not an arithmetic expression"),
        ("1 +", "not an arithmetic expression"),
        ("x + 1", "not an arithmetic expression (a name is not allowed)"),
        ("__import__('os')", "not an arithmetic expression (a call is not allowed)"),
        ("abs(-1)", "not an arithmetic expression (a call is not allowed)"),
        ("(1).__class__", "not an arithmetic expression (an attribute is not allowed)"),
        ("[1, 2][0]", "not an arithmetic expression (a subscript is not allowed)"),
        ("'a' * 3", "not an arithmetic expression (str is not a number)"),
        ("True + 1", "not an arithmetic expression (bool is not a number)"),
        ("2 ^ 3", "not an arithmetic expression (the operator BitXor is not allowed)"),
        ("1e400", "number too large"),
        ("2.5**2000", "exponent too large (above 1000)"),
    ],
)
def test_calculator_errors(expression, message):
    with pytest.raises(CalculationError) as raised:
        calculate(expression)
    assert str(raised.value) == message


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("2**10**10", "exponent too large (above 1000)"),
        ("9**999**999", "exponent too large (above 1000)"),
        ("(10**1000)**5", "result too large (more than 4300 digits)"),
        ("9**999 * 9**999 * 9**999 * 9**999 * 9**999", "result too large (more than 4300 digits)"),
        ("1" + "+1" * 6000, "expression too long (over 10000 characters)"),
        ("1" + "+1" * 4900, "expression too deeply nested"),
        ("0." + "1" * 5000, "number too long (more than 4300 digits)"),
    ],
)
def test_calculator_refuses_huge_work_fast(expression, message):
    started = time.monotonic()
    with pytest.raises(CalculationError) as raised:
        calculate(expression)
    assert str(raised.value) == message
    assert time.monotonic() - started < 0.5


def test_calculator_session_marks_errors_and_takes_no_call_once_closed():
    session = new_session(tools("calculator"))
    good, bad = session.call("37*84"), session.call("x")
    assert (good.output, good.error, good.timeout) == ("3108", False, False)
    assert (bad.output, bad.error, bad.timeout) == (
        "Error: not an arithmetic expression (a name is not allowed)",
        True,
        False,
    )
    session.close()
    with pytest.raises(RuntimeError, match="closed"):
        session.call("1+1")


# ---------------------------------------------------------------- a long output


def test_a_long_output_is_cut_with_a_note():
    assert cut_output("short", 10) == "short"
    assert cut_output("x" * 10, 10) == "x" * 10
    assert cut_output("abcdefghij" * 5, 12) == "abcdefghijab\n<output cut: 38 characters left out>\n"
    assert cut_output("line\n" * 4, 5) == "line\n<output cut: 15 characters left out>\n"


def test_a_session_cuts_its_output_at_max_output_characters():
    session = new_session(tools("calculator", max_output_characters=50))
    result = session.call("10**1000")
    assert result.output == "1" + "0" * 49 + "\n<output cut: 951 characters left out>\n"


# ---------------------------------------------------------------- the settings


def test_settings_take_the_section_and_its_defaults():
    settings = tools("python", tags="markdown", max_calls=8)
    assert (settings.tool, settings.tags, settings.max_calls) == ("python", TAG_PRESETS["markdown"], 8)
    assert settings.workers == 4
    limits = (settings.max_output_characters, settings.timeout_seconds, settings.memory_limit_mb, settings.sandbox)
    assert limits == (1000, 10.0, 1024, "bwrap")
    settings = tools("calculator", max_output_characters=20, timeout_seconds=2, memory_limit_mb=None, sandbox="none")
    limits = (settings.max_output_characters, settings.timeout_seconds, settings.memory_limit_mb, settings.sandbox)
    assert limits == (20, 2.0, None, "none")


@pytest.mark.parametrize("section", [{}, {"tool": None}])
def test_a_section_without_a_tool_or_models_names_the_key(section):
    plan = ToolsPlan(Tools.filled(section, "tools"), "base")
    with pytest.raises(SnakeskillsError, match="config key tools.tool: a tool's name"):
        check_tools_plan({}, plan, ["base"])


def test_an_empty_tool_name_names_the_key():
    with pytest.raises(SnakeskillsError, match="config key tools.tool: unknown tool ''"):
        check_tool(tools(""))


@pytest.mark.parametrize(
    ("section", "key"),
    [
        ({"tool": "python", "max_output_characters": 0}, "tools.max_output_characters"),
        ({"tool": "python", "max_output_characters": 1.5}, "tools.max_output_characters"),
        ({"tool": "python", "timeout_seconds": 0}, "tools.timeout_seconds"),
        ({"tool": "python", "timeout_seconds": "10"}, "tools.timeout_seconds"),
        ({"tool": "python", "memory_limit_mb": 0}, "tools.memory_limit_mb"),
        ({"tool": "python", "sandbox": "docker"}, "tools.sandbox"),
    ],
)
def test_settings_name_the_key_at_fault(section, key):
    with pytest.raises(SnakeskillsError, match=f"config key {key}:"):
        Tools.filled(section, "tools")


# ---------------------------------------------------------------- the plan's check of the tool


def test_an_unknown_tool_names_the_key_and_the_known_ones():
    with pytest.raises(SnakeskillsError) as raised:
        check_tool(tools("pyhton"), "generation.tools.tool")
    message = str(raised.value)
    assert message.startswith("config key generation.tools.tool: unknown tool 'pyhton'")
    assert all(name in message for name in TOOLS)
    with pytest.raises(SnakeskillsError, match="config key tools.tool: unknown tool 'pyhton'"):
        new_session(tools("pyhton"))


def test_the_calculator_needs_no_sandbox(monkeypatch):
    monkeypatch.setattr("snakeskills.tools.registry.check_sandbox", lambda *_, **__: pytest.fail("sandbox checked"))
    check_tool(tools("calculator"))


def test_a_user_tool_that_does_not_import_stops_the_plan(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(tmp_path)
    (tmp_path / "broken_tool_module.py").write_text("import a_package_nobody_has\n")
    with pytest.raises(SnakeskillsError, match="config key tools.tool: 'absent_tool_module:run': module .* does not"):
        check_tool(tools("absent_tool_module:run"))
    with pytest.raises(SnakeskillsError, match="config key tools.tool: 'broken_tool_module:run': .*fails while"):
        check_tool(tools("broken_tool_module:run"))


def test_a_user_tool_that_is_not_callable_stops_the_plan(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(tmp_path)
    (tmp_path / "constant_tool_module.py").write_text("run = 42\n")
    with pytest.raises(SnakeskillsError, match="config key tools.tool: .*has no function 'run'"):
        check_tool(tools("constant_tool_module:run"))
    with pytest.raises(SnakeskillsError, match="config key tools.tool: .*has no function 'missing'"):
        check_tool(tools("constant_tool_module:missing"))


def test_every_built_in_tool_is_described():
    assert set(TOOL_DESCRIPTIONS) == set(TOOLS) == {"python", "calculator"}
    assert all(description and "\n" not in description for description in TOOL_DESCRIPTIONS.values())


# ---------------------------------------------------------------- what of a user's tool goes into the sandbox


def test_a_one_file_tool_is_copied_alone(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(tmp_path)
    (tmp_path / "lone_tool_module.py").write_text("def run(text):\n    return text\n")
    (tmp_path / "beside.py").write_text("SECRET = 1\n")
    assert list(module_files("lone_tool_module", "tools.tool")) == ["lone_tool_module.py"]


def test_a_packaged_tool_is_copied_with_its_whole_top_level_package(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(tmp_path)
    package = tmp_path / "packaged_tool" / "inner"
    package.mkdir(parents=True)
    (package.parent / "__init__.py").write_text("")
    (package / "__init__.py").write_text("")
    (package / "tool.py").write_text("def run(text):\n    return text\n")
    (package / "table.json").write_text("{}")
    (package / "__pycache__").mkdir()
    (package / "__pycache__" / "tool.cpython.pyc").write_bytes(b"\0")
    (package.parent / ".hidden").write_text("")
    assert sorted(module_files("packaged_tool.inner.tool", "tools.tool")) == [
        "packaged_tool/__init__.py",
        "packaged_tool/inner/__init__.py",
        "packaged_tool/inner/table.json",
        "packaged_tool/inner/tool.py",
    ]


def test_an_installed_module_is_not_copied():
    assert module_files("json.decoder", "tools.tool") == {}  # the standard library, which the sandbox shows
    with pytest.raises(SnakeskillsError, match="config key tools.tool: module 'no_such_tool_module' is not found"):
        module_files("no_such_tool_module", "tools.tool")
