"""The run's tools as the functions a chat template offers (``tools.functions``): each tool's JSON schema and the
argument its call passes, the models as tools as ``ask_<name>``, and what a call's arguments may be."""

from __future__ import annotations

import copy

import pytest
import yaml
from conftest import REPO, checked_config

from snakeskills.errors import SnakeskillsError
from snakeskills.plan.layout import Layout
from snakeskills.plan.run import Plan
from snakeskills.settings.tools import Tools
from snakeskills.tools.functions import ToolFunction, tool_functions, user_function

ORCHESTRATOR = yaml.safe_load((REPO / "config" / "examples" / "tiny-addition-expert-orchestrator.yaml").read_text())


def test_the_built_in_tools_take_their_one_argument():
    python, calculator = (tool_functions(Tools.filled({"tool": name}, "tools"))[0] for name in ("python", "calculator"))
    assert (python.name, python.tool, python.argument) == ("python", "python", "code")
    assert (calculator.name, calculator.argument) == ("calculator", "expression")
    assert calculator.schema["function"]["parameters"]["required"] == ["expression"]


def test_the_orchestrators_expert_is_offered_as_ask_expert_beside_the_calculator():
    config = copy.deepcopy(ORCHESTRATOR)
    config["tools"]["format"] = "chat_template"
    config["prompt"]["chat_template"] = True
    config["tiny_model"]["tool_share"] = 0.0
    plan = Plan(checked_config(config), Layout.under("results/x"))
    functions = plan.generation_settings("base", "arithmetic", "test")["tools"]["functions"]
    assert [(f["name"], f["tool"], f["argument"]) for f in functions] == [
        ("calculator", "calculator", "expression"),
        ("ask_expert", "expert", "question"),
    ]
    assert "Each call has a cost." in functions[1]["schema"]["function"]["description"]


def test_a_user_function_is_described_by_its_signature_and_docstring(tmp_path, monkeypatch):
    (tmp_path / "described_tools.py").write_text(
        'def factorize(number: str) -> str:\n    """The prime factors of an integer.\n\n    Args:\n'
        '        number: the integer, in decimal\n    """\n    return number\n\n'
        'def plain(text):\n    """Echo the text back."""\n    return text\n'
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    described = user_function("described_tools:factorize", "tools.tool")
    assert (described.name, described.tool, described.argument) == ("factorize", "described_tools:factorize", "number")
    assert described.schema["function"]["description"] == "The prime factors of an integer."
    assert described.schema["function"]["parameters"]["properties"]["number"] == {
        "type": "string",
        "description": "the integer, in decimal",
    }
    plain = user_function("described_tools:plain", "tools.tool")
    assert plain.argument == "text" and plain.schema["function"]["description"] == "Echo the text back."


def test_a_user_function_of_several_parameters_takes_its_calls_arguments_as_a_json_object(tmp_path, monkeypatch):
    (tmp_path / "several_tools.py").write_text(
        'def convert(amount: float, unit: str = "km") -> str:\n    """Convert a distance.\n\n    Args:\n'
        '        amount: how far\n        unit: its unit\n    """\n    return unit\n\n'
        "def nothing():\n    return 1\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    convert = user_function("several_tools:convert", "tools.tool")
    assert convert.argument is None
    assert convert.schema["function"]["parameters"]["required"] == ["amount"]
    assert convert.call_text({"amount": 5, "unit": "mi"}) == ('{"amount": 5, "unit": "mi"}', None)
    assert convert.call_text({"unit": "mi"}) == (None, "convert needs the arguments 'amount'")
    assert convert.call_text({"amount": 1, "speed": 2}) == (
        None,
        "convert takes the arguments 'amount', 'unit'; unknown: speed",
    )
    with pytest.raises(SnakeskillsError, match="config key tools.tool: several_tools:nothing takes no parameter"):
        user_function("several_tools:nothing", "tools.tool")


@pytest.mark.parametrize(
    ("arguments", "text", "problem"),
    [
        ({"expression": "1+2"}, "1+2", None),
        ({"expression": 12}, "12", None),
        ({}, None, "calculator needs the argument 'expression'"),
        ({"expression": "1", "x": 2}, None, "calculator takes one argument, 'expression'; unknown: x"),
        ({"expression": ["1"]}, None, "the argument 'expression' of calculator must be a string"),
        ({"expression": True}, None, "the argument 'expression' of calculator must be a string"),
    ],
)
def test_a_calls_arguments_give_its_text_or_the_error_the_model_reads(arguments, text, problem):
    calculator = ToolFunction("calculator", "calculator", "expression", {})
    assert calculator.call_text(arguments) == (text, problem)


def test_two_tools_offered_under_one_name_are_refused():
    model = ORCHESTRATOR["tools"]["models"]["expert"]
    clash = Tools.filled({"tool": None, "models": {"x.y": model, "x_y": model}}, "tools")
    with pytest.raises(SnakeskillsError, match="two tools are offered as the function 'ask_x_y'"):
        tool_functions(clash)
