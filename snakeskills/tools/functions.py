"""The run's tools as the functions a chat template offers (``tools.format: chat_template``): each tool's JSON schema
(OpenAI's function shape, what ``apply_chat_template(tools=...)`` renders) and the one argument a call passes to it.

- ``python``: ``python(code)``; ``calculator``: ``calculator(expression)``;
- a user's ``module:function``: the function's own name and its parameters, described as transformers'
  ``get_json_schema`` reads its signature and docstring (a docstring without an ``Args:`` section gives string
  parameters and the docstring's first line);
- a model as a tool (``tools.models.<name>``): ``ask_<name>(question)``, the orchestrator's expert.

A call's argument is the text the tool runs, as the tag format's call text is; a function of several parameters
runs with the call's arguments as a JSON object (``sandboxed.UserToolSession`` passes them as keywords).
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import re
from dataclasses import dataclass

from snakeskills.errors import SnakeskillsError
from snakeskills.settings.tools import Tools


@dataclass(frozen=True)
class ToolFunction:
    """A tool offered as a function: its name in calls, the tool it runs (the records' and rewards' name), the
    argument that holds the call's text (None: a user's function of several parameters, which takes them all), and
    its JSON schema."""

    name: str
    tool: str
    argument: str | None
    schema: dict

    def call_text(self, arguments: dict) -> tuple[str | None, str | None]:
        """The text a call runs, or what is wrong with its arguments (shown to the model as the call's error)."""
        if self.argument is None:
            return self._keywords_text(arguments)
        unknown = sorted(set(arguments) - {self.argument})
        if unknown:
            return None, f"{self.name} takes one argument, {self.argument!r}; unknown: {', '.join(unknown)}"
        if self.argument not in arguments:
            return None, f"{self.name} needs the argument {self.argument!r}"
        value = arguments[self.argument]
        if isinstance(value, bool) or not isinstance(value, str | int | float):
            return None, f"the argument {self.argument!r} of {self.name} must be a string"
        return str(value), None

    def _keywords_text(self, arguments: dict) -> tuple[str | None, str | None]:
        """A call of several parameters as the JSON object its tool takes, its arguments checked against the
        schema's names (the function's own checks of their values run with it)."""
        parameters = self.schema["function"]["parameters"]
        known, required = parameters.get("properties", {}), parameters.get("required", [])
        unknown = sorted(set(arguments) - set(known))
        if unknown:
            return None, f"{self.name} takes the arguments {', '.join(map(repr, known))}; unknown: {', '.join(unknown)}"
        missing = [name for name in required if name not in arguments]
        if missing:
            return None, f"{self.name} needs the arguments {', '.join(map(repr, missing))}"
        return json.dumps(arguments, ensure_ascii=False), None


def _schema(name: str, description: str, argument: str, argument_description: str, kind: str = "string") -> dict:
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {
                "type": "object",
                "properties": {argument: {"type": kind, "description": argument_description}},
                "required": [argument],
            },
        },
    }


BUILT_IN_FUNCTIONS = {
    "python": lambda: ToolFunction(
        "python",
        "python",
        "code",
        _schema(
            "python",
            "Run Python code in a sandbox without network access and print what it prints (the value of a last bare "
            "expression too). Calls of one answer share their variables.",
            "code",
            "the Python code to run",
        ),
    ),
    "calculator": lambda: ToolFunction(
        "calculator",
        "calculator",
        "expression",
        _schema(
            "calculator",
            "Evaluate one arithmetic expression exactly: integers, decimals, + - * / // % **, parentheses.",
            "expression",
            "the expression, e.g. 37*84 - 5",
        ),
    ),
}


def model_function_name(model: str) -> str:
    """The function that asks the model tool ``model``: ``ask_<model>`` (characters a function name may not hold
    become ``_``)."""
    return "ask_" + re.sub(r"[^A-Za-z0-9_]", "_", model)


def user_function(spec: str, key: str) -> ToolFunction:
    """A user's ``module:function`` as a function: its name, its parameters and its schema (transformers'
    ``get_json_schema`` of its signature and docstring; where that cannot read them, string parameters and the
    docstring's first line). One parameter takes the call's text; several take the call's arguments."""
    from snakeskills.registry import load_user_function
    from snakeskills.tools.sandboxed import parameter_names

    function = load_user_function(spec, key)
    name = function.__name__
    parameters = parameter_names(function)
    if not parameters:
        raise SnakeskillsError(
            f"config key {key}: {spec} takes no parameter; a tool's function takes the call's text, or its arguments"
        )
    try:
        from transformers.utils import get_json_schema

        schema = get_json_schema(function)
        for parameter in parameters:
            schema["function"]["parameters"]["properties"][parameter].setdefault("type", "string")
    except Exception:  # noqa: BLE001 - a docstring get_json_schema cannot read: the first line and strings
        doc = inspect.getdoc(function) or f"the tool {spec}"
        schema = _schema(name, doc.splitlines()[0], parameters[0], "the call's text")
        if len(parameters) > 1:
            properties = {parameter: {"type": "string"} for parameter in parameters}
            schema["function"]["parameters"].update(properties=properties, required=list(parameters))
    return ToolFunction(name, spec, parameters[0] if len(parameters) == 1 else None, schema)


def tool_functions(tools: Tools) -> list[ToolFunction]:
    """Every tool of a ``tools`` section as a function, the program tool first, then the models; two functions of
    one name are refused."""
    functions = []
    if tools.tool in BUILT_IN_FUNCTIONS:
        functions.append(BUILT_IN_FUNCTIONS[tools.tool]())
    elif tools.tool is not None:
        functions.append(user_function(tools.tool, f"{tools.key}.tool"))
    for name, model in tools.models.items():
        description = f"Ask the model {name!r} a question and read its answer."
        if model.price is not None and not model.price.free:
            description += " Each call has a cost."
        function = model_function_name(name)
        schema = _schema(function, description, "question", "the question, with all the model needs to answer it")
        functions.append(ToolFunction(function, name, "question", schema))
    names = [function.name for function in functions]
    for name in names:
        if names.count(name) > 1:
            raise SnakeskillsError(
                f"config key {tools.key}: two tools are offered as the function {name!r}; rename one of them"
            )
    return functions


def prompt_with_functions(prompt: dict, tools: Tools) -> dict:
    """A resolved prompt that, with ``tools.format: chat_template``, offers the tools as functions in the chat
    template (and renders with tools.chat_template where set): what ``prompts.chat_format`` passes to the
    rendering; the prompt as it is with tags."""
    formatting = functions_format(tools)
    return prompt if formatting is None else {**prompt, **formatting}


def functions_format(tools: Tools) -> dict | None:
    """What a prompt renders with beside its chat template where a job's ``tools`` section (the plan's, with
    ``functions`` set) calls through the chat template: the functions' schemas and the template (None: the model's
    own); None with tags."""
    if not tools.functions:
        return None
    return {"functions": [function["schema"] for function in tools.functions], "template": tools.template_text}


def function_settings(tools: Tools) -> list[dict]:
    """The functions as a job's tools section holds them (``Tools.functions``, set by the plan)."""
    return [dataclasses.asdict(function) for function in tool_functions(tools)]
