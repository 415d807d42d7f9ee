"""Function calls as models write them in their chat templates' formats: one table of the known formats
(``CALL_FORMATS``), each a parser of an assistant turn's text into its content and its calls, and the format of a
chat template, found by rendering a probe call with the template and reading it back (``template_call_format``).

The formats (the families whose real templates TRL ships and the tests render):

- ``hermes``: Qwen2.5, Qwen3, Hermes, SmolLM3: ``<tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>``,
  one block per call, after the turn's text.
- ``llama3_json``: Llama 3.1 / 3.2: the whole turn is ``{"name": ..., "parameters": {...}}`` (after an optional
  ``<|python_tag|>``); several calls are separated by ``;`` (the templates render one call per turn).
- ``glm4``: GLM-4.5 / 4.6: ``<tool_call>name\\n<arg_key>k</arg_key>\\n<arg_value>v</arg_value>\\n</tool_call>``; a
  value is JSON, or the raw text where the function's parameter is a string (the template writes strings raw).

A call that cannot be read (JSON that does not parse, no function name, arguments that are not an object) is a
``FunctionCall`` with its ``problem`` set: the loop answers it with a tool error the model reads, and counts it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field

from snakeskills.errors import SnakeskillsError


@dataclass(frozen=True)
class FunctionCall:
    """One call of an assistant turn: the function's name and its arguments, or what is wrong with it (``problem``:
    the call could not be read; ``name`` may then be None)."""

    name: str | None
    arguments: dict = field(default_factory=dict)
    problem: str | None = None

    def message(self) -> dict:
        """The call as an assistant message's ``tool_calls`` entry (OpenAI's shape, which chat templates read)."""
        return {"type": "function", "function": {"name": self.name or "invalid", "arguments": self.arguments}}


@dataclass(frozen=True)
class CallFormat:
    """How calls sit in an assistant turn's text: ``parse(text, functions)`` gives the turn's content and its calls
    (``functions``: the offered functions' schemas, by name); ``several``: whether one turn may hold several calls."""

    name: str
    parse: Callable[[str, dict], tuple[str, list[FunctionCall]]]
    description: str
    markers: tuple[str, ...] = ()  # the text that marks a call (a backend that drops special tokens must keep it)


def _read_call(value, arguments_key: str) -> FunctionCall:
    """A decoded JSON value as a call: an object with a string ``name`` and an object of arguments (itself JSON text
    is allowed, as OpenAI's API writes it)."""
    if not isinstance(value, dict):
        return FunctionCall(None, problem=f"a tool call must be a JSON object, got {type(value).__name__}")
    name = value.get("name")
    if not isinstance(name, str) or not name:
        return FunctionCall(None, problem='a tool call needs a "name" (a string)')
    arguments = value.get(arguments_key, value.get("arguments", {}))
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except json.JSONDecodeError as error:
            return FunctionCall(name, problem=f"the arguments of {name!r} are not valid JSON: {error}")
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, dict):
        return FunctionCall(name, problem=f'the "{arguments_key}" of {name!r} must be a JSON object')
    return FunctionCall(name, arguments)


def _json_call(body: str, arguments_key: str) -> FunctionCall:
    try:
        value = json.loads(body)
    except json.JSONDecodeError as error:
        return FunctionCall(None, problem=f"the tool call is not valid JSON ({error}): {_short(body)}")
    return _read_call(value, arguments_key)


def server_call(call: dict) -> FunctionCall:
    """A call an OpenAI-compatible server's tool parser read (``{"name": ..., "arguments": <JSON text>}``)."""
    return _read_call(call, "arguments")


def _short(text: str, limit: int = 120) -> str:
    text = text.strip()
    return text if len(text) <= limit else text[:limit] + "..."


def _blocks(text: str, begin: str, end: str) -> tuple[str, list[str]]:
    """The text before the first ``begin`` and each block's body, the last one unclosed where the turn ended in it."""
    start = text.find(begin)
    if start < 0:
        return text, []
    content, bodies, position = text[:start], [], start
    while position >= 0:
        body_start = position + len(begin)
        close = text.find(end, body_start)
        bodies.append(text[body_start : len(text) if close < 0 else close])
        position = -1 if close < 0 else text.find(begin, close + len(end))
    return content, bodies


def parse_hermes(text: str, functions: dict) -> tuple[str, list[FunctionCall]]:
    content, bodies = _blocks(text, "<tool_call>", "</tool_call>")
    return _strip_think(content).strip(), [_json_call(body.strip(), "arguments") for body in bodies]


PYTHON_TAG = "<|python_tag|>"


def parse_llama3_json(text: str, functions: dict) -> tuple[str, list[FunctionCall]]:
    body = text.strip()
    if body.startswith(PYTHON_TAG):
        body = body[len(PYTHON_TAG) :].strip()
    if not body.startswith("{"):
        return text.strip(), []
    decoder, calls, position = json.JSONDecoder(), [], 0
    while position < len(body):
        try:
            value, end = decoder.raw_decode(body, position)
        except json.JSONDecodeError as error:
            calls.append(FunctionCall(None, problem=f"the tool call is not valid JSON ({error}): {_short(body)}"))
            break
        calls.append(_read_call(value, "parameters"))
        position = end
        while position < len(body) and body[position] in " \t\r\n;":
            position += 1
    return "", calls


_GLM_ARGUMENT = re.compile(r"<arg_key>(.*?)</arg_key>\s*<arg_value>(.*?)</arg_value>", re.DOTALL)


def parse_glm4(text: str, functions: dict) -> tuple[str, list[FunctionCall]]:
    content, bodies = _blocks(text, "<tool_call>", "</tool_call>")
    calls = []
    for body in bodies:
        cut = min((index for index in (body.find("\n"), body.find("<arg_key>")) if index >= 0), default=len(body))
        name = body[:cut].strip()
        if not name:
            calls.append(FunctionCall(None, problem=f"the tool call has no function name: {_short(body)}"))
            continue
        properties = functions.get(name, {}).get("parameters", {}).get("properties", {})
        arguments = {}
        for key, raw in _GLM_ARGUMENT.findall(body[cut:]):
            key = key.strip()
            if properties.get(key, {}).get("type") == "string":
                arguments[key] = raw
                continue
            try:
                arguments[key] = json.loads(raw)
            except json.JSONDecodeError:
                arguments[key] = raw
        calls.append(FunctionCall(name, arguments))
    return _strip_think(content).strip(), calls


def _strip_think(text: str) -> str:
    """A turn's content after its thinking (``<think>...</think>``, which Qwen3's and GLM's templates write)."""
    end = text.find("</think>")
    return text[end + len("</think>") :] if end >= 0 else text


CALL_FORMATS = {
    "hermes": CallFormat(
        "hermes",
        parse_hermes,
        'Qwen2.5 / Qwen3 / Hermes: <tool_call>{"name": ..., "arguments": ...}</tool_call>',
        ("<tool_call>", "</tool_call>"),
    ),
    "llama3_json": CallFormat(
        "llama3_json", parse_llama3_json, 'Llama 3.1 / 3.2: the turn is {"name": ..., "parameters": ...}'
    ),
    "glm4": CallFormat(
        "glm4",
        parse_glm4,
        "GLM-4.5: <tool_call>name<arg_key>k</arg_key><arg_value>v</arg_value>",
        ("<tool_call>", "</tool_call>", "<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>"),
    ),
}


# the probe call: two arguments, a string that needs JSON escaping and a number
PROBE_CALLS = (
    FunctionCall("probe_function_one", {"code": 'print("a")\nx = 1', "count": 3}),
    FunctionCall("probe_function_two", {"code": "y"}),
)
PROBE_FUNCTIONS = {
    call.name: {
        "name": call.name,
        "parameters": {
            "type": "object",
            "properties": {"code": {"type": "string"}, "count": {"type": "integer"}},
            "required": ["code"],
        },
    }
    for call in PROBE_CALLS
}


@dataclass(frozen=True)
class TemplateCalls:
    """What a chat template does with calls: their format, and whether one assistant turn may hold several."""

    format: CallFormat
    several: bool


def template_call_format(render: Callable[[list[dict], bool], str], end_text: str, where: str) -> TemplateCalls:
    """The format of the calls a chat template writes: a probe turn with calls (two, then one where the template
    refuses two) is rendered (``render(messages, add_generation_prompt)``), its text read back by each known
    format, and the first that gives the probe's calls back is the template's. ``end_text``: what ends an assistant
    turn (the model's end-of-turn token's text), cut off before reading. ``where`` names the template in errors."""
    user = [{"role": "user", "content": "probe"}]
    prompt = render(user, True)
    for several in (True, False):
        calls = list(PROBE_CALLS if several else PROBE_CALLS[:1])
        assistant = {"role": "assistant", "content": "", "tool_calls": [call.message() for call in calls]}
        try:
            rendered = render([*user, assistant], False)
        except Exception as error:  # noqa: BLE001 - a template that refuses several calls raises what jinja raises
            if several:
                continue
            raise SnakeskillsError(
                f"{where}: the chat template cannot render an assistant turn with a tool call "
                f"({type(error).__name__}: {error})"
            ) from None
        if calls[0].name not in rendered:
            raise SnakeskillsError(
                f"{where}: the chat template leaves an assistant turn's tool calls out of what it renders (it was not "
                "made for tool calling); use one that renders them (tools.chat_template)"
            )
        if not rendered.startswith(prompt):
            raise SnakeskillsError(
                f"{where}: the chat template renders an assistant turn that does not continue its own generation "
                "prompt, so a model's calls cannot be read from what it writes after the prompt"
            )
        turn = rendered[len(prompt) :]
        cut = turn.rfind(end_text) if end_text else -1
        turn = turn[:cut] if cut >= 0 else turn
        for call_format in CALL_FORMATS.values():
            try:
                _, parsed = call_format.parse(turn, PROBE_FUNCTIONS)
            except Exception:  # noqa: BLE001 - a format that does not fit may fail any way: try the next
                continue
            if parsed == calls:
                return TemplateCalls(call_format, several)
        raise SnakeskillsError(
            f"{where}: the chat template writes tool calls in a format snakeskills cannot read back (known: "
            f"{', '.join(f.description for f in CALL_FORMATS.values())}); its rendering of a call: {_short(turn, 300)}"
        )
    raise AssertionError("unreachable")
