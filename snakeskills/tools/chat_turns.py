"""A chat template as the tool loop speaks it (``tools.format: chat_template``): the prompt rendered with the run's
functions (``apply_chat_template(messages, tools=...)``), a turn's calls read in the template's own format
(``function_calls``), and the template's rendering of the tool messages that answer them (``suffix``).

A conversation's token ids are built by concatenation, never by rendering the whole conversation again: the
prompt's ids, the model's own ids of each turn (its end-of-turn token included), and after each turn with calls the
template's rendering of the tool messages and of the next assistant header (TRL's GRPO does the same). The model
thus reads exactly what it wrote, and the ids decode to the transcript the judge reads. Where the template would
render an earlier turn differently when rendering the whole conversation (Qwen3 drops earlier thinking, templates
re-serialize a call's JSON), the concatenation differs from that rendering and keeps the model's own text: that is
the one cost, and it is the text the model trained on.

The suffix is found by rendering a short conversation (a user turn and an assistant turn with a call) without and
with the tool messages; the model's end-of-turn token is either the last thing the template writes in the assistant
turn (ChatML's ``<|im_end|>``, Llama's ``<|eot_id|>``: the suffix follows it) or the first thing of the tool
messages (GLM's ``<|observation|>``: the model's token stands for it). The tool outputs' own text is located in the
suffix by rendering each with marker text in place of the others, so that an output is encoded as plain text (a
tool that prints ``<|im_end|>`` writes text, never a control token) and the template's parts as its tokens.
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

from snakeskills.errors import SnakeskillsError
from snakeskills.tools.function_calls import FunctionCall, TemplateCalls, template_call_format

MARKER = "SnakeskillsToolOutput{}Marker"
USER_TURN = "SnakeskillsUserTurn"
MARKER_PATTERN = re.compile(r"SnakeskillsToolOutput(\d+)Marker")


# TRL's templates whose calls and tool messages the tests render and read back (tests/components/test_chat_tools.py)
TESTED_TEMPLATES = ("qwen2_5", "qwen3", "llama3_1", "llama3_2", "glm4moe")


def trl_templates_folder() -> Path | None:
    """TRL's shipped chat templates (``trl/chat_templates``), found without importing TRL; None without TRL."""
    spec = importlib.util.find_spec("trl")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0]) / "chat_templates"


def trl_template_names() -> list[str]:
    folder = trl_templates_folder()
    if folder is None:
        return []
    return sorted(path.stem for path in folder.glob("*.jinja") if not path.stem.endswith("_training"))


def template_text(value: str, key: str) -> str:
    """The chat template ``value`` names (config ``key``): one TRL ships (``qwen2_5``, ``qwen3``, ``llama3_1``,
    ``glm4moe``, ...), or a ``.jinja`` file."""
    names = trl_template_names()
    if value in names:
        return (trl_templates_folder() / f"{value}.jinja").read_text(encoding="utf-8")
    path = Path(value)
    if path.suffix == ".jinja" and path.is_file():
        return path.read_text(encoding="utf-8")
    shipped = f"those tested with tools: {', '.join(TESTED_TEMPLATES)}; all {len(names)}: trl/chat_templates"
    raise SnakeskillsError(
        f"config key {key}: {value!r} is neither a chat template TRL ships "
        f"({shipped if names else 'TRL is not installed'}) nor an existing .jinja file"
    )


class ChatTurns:
    """A tokenizer's chat template (or ``template``, which replaces it) with the functions offered (``functions``:
    their JSON schemas) and the template's variables (``kwargs``: the prompt's ``chat_template_kwargs``). Building
    one checks the template: it must render a conversation with calls and tool messages, and its calls must read
    back; ``where`` names the model and key in errors."""

    def __init__(self, tokenizer, template: str | None, functions: list[dict], kwargs: dict, where: str):
        self.tokenizer = tokenizer
        self.template = template if template is not None else getattr(tokenizer, "chat_template", None)
        if not self.template:
            raise SnakeskillsError(
                f"{where}: the model's tokenizer has no chat template; name one in tools.chat_template"
            )
        self.functions = functions
        self.by_name = {schema["function"]["name"]: schema["function"] for schema in functions}
        self.kwargs = kwargs
        self.where = where
        self.end_text = tokenizer.eos_token or ""
        self.calls: TemplateCalls = template_call_format(self.render, self.end_text, where)
        self._check_tool_messages()

    def render(self, messages: list[dict], add_generation_prompt: bool) -> str:
        return self.tokenizer.apply_chat_template(
            messages,
            tools=self.functions or None,
            chat_template=self.template,
            tokenize=False,
            add_generation_prompt=add_generation_prompt,
            **self.kwargs,
        )

    def parse(self, text: str) -> tuple[str, list[FunctionCall]]:
        """An assistant turn's text (its end-of-turn token left out) as its content and its calls."""
        return self.calls.format.parse(text, self.by_name)

    def call_turn(self, call: FunctionCall) -> str:
        """An assistant turn that makes ``call`` as the template writes it, its end-of-turn token left out (the
        always-ask baseline's first turn, which the loop writes)."""
        return self.assistant_turn("", [call])

    def assistant_turn(self, content: str, calls: list[FunctionCall]) -> str:
        """An assistant turn of ``content`` making ``calls`` as the template writes it, its end-of-turn token left
        out: the transcript of a turn whose calls a server's tool parser read (only the messages came back)."""
        user = [{"role": "user", "content": USER_TURN}]
        prompt = self.render(user, True)
        message = {"role": "assistant", "content": content, "tool_calls": [call.message() for call in calls]}
        rendered = self.render([*user, message], False)
        turn = rendered[len(prompt) :]
        end = turn.rfind(self.end_text) if self.end_text else -1
        return turn[:end] if end >= 0 else turn.rstrip()

    def _check_tool_messages(self) -> None:
        """The template renders a tool message, after the model's end-of-turn token (``suffix`` says where not)."""
        self.suffix([{"role": "tool", "name": "f", "content": "result"}])

    def suffix(self, tool_messages: list[dict], end_text: str | None = None) -> list[tuple[str, bool]]:
        """What follows an assistant turn with calls (``end_text``: the text of the token that ended the turn, the
        tokenizer's EOS by default): the template's rendering of ``tool_messages`` and the next assistant header, as
        pieces ``(text, plain)``: the outputs' text plain, the rest the template's (special tokens allowed)."""
        end_text = self.end_text if end_text is None else end_text
        call = {"type": "function", "function": {"name": tool_messages[0].get("name") or "f", "arguments": {}}}
        short = [{"role": "user", "content": USER_TURN}, {"role": "assistant", "content": "", "tool_calls": [call]}]
        markers = [MARKER.format(index) for index in range(len(tool_messages))]

        def render(contents: list[str]) -> str:
            pairs = zip(tool_messages, contents, strict=True)
            answered = [{**message, "content": content} for message, content in pairs]
            return self.render(short + answered, True)

        skeleton = render(markers)
        first_output = skeleton.find(markers[0])
        if first_output < 0:
            raise SnakeskillsError(
                f"{self.where}: the chat template does not render tool messages (a tool's output would never reach "
                "the model); use a template that does (tools.chat_template)"
            )
        start = self._suffix_start(skeleton, first_output, end_text)
        pieces: list[tuple[str, bool]] = []
        position = start
        for match in MARKER_PATTERN.finditer(skeleton, start):
            index = int(match.group(1))
            pieces.append((skeleton[position : match.start()], False))
            contents = [*markers]
            contents[index] = str(tool_messages[index]["content"])
            one = render(contents)
            rendered = one[match.start() : len(one) - (len(skeleton) - match.end())]
            pieces.append((rendered, True))
            position = match.end()
        pieces.append((skeleton[position:], False))
        return [(text, plain) for text, plain in pieces if text]

    def _suffix_start(self, skeleton: str, first_output: int, end_text: str) -> int:
        """Where the suffix begins in ``skeleton`` (the short conversation with tool messages): after the last
        end-of-turn text before the first output, which either closes the assistant turn or opens the tool messages
        (the model wrote it in both cases). The rest of the assistant turn need not render as it does at the end of
        a conversation (Qwen3 writes an empty thinking block only in a last turn): it is never rendered again."""
        assistant = skeleton.find(USER_TURN)
        end = skeleton.rfind(end_text, assistant, first_output) if end_text and first_output >= 0 else -1
        if end < 0:
            raise SnakeskillsError(
                f"{self.where}: the model ends its turns with {end_text!r}, which the chat template writes neither at "
                "the end of an assistant turn nor before the tool messages, so the template's turns cannot continue "
                "the model's tokens; use a template made for this tokenizer (tools.chat_template)"
            )
        return end + len(end_text)
