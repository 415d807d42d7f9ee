"""Tools called the way instruct models call them (``tools.format: chat_template``), against the real chat templates
TRL ships: Qwen3 and Qwen2.5 (Hermes ``<tool_call>`` JSON, several calls a turn), Llama 3.1 and 3.2 (a JSON turn with
``parameters``, one call a turn) and GLM-4.5 (``<arg_key>``/``<arg_value>`` calls, the model's ``<|observation|>``
ending its turn and opening the tool messages).

Each family's template is put on SmolLM2's BPE tokenizer with that family's control tokens added as special tokens
(its end-of-turn token as EOS), so every rendering is the template's own and every control token one token. The
calls a template writes are read back by the project's parser and by TRL's response schema (transformers'
``parse_response``); the tool messages the loop appends are the template's rendering of the whole conversation
where the template preserves prefixes; and the loop's token ids decode to the transcript, the model mask 0 on
exactly the tool messages."""

from __future__ import annotations

import copy
import json

import pytest
from test_tool_ids import ScriptedSession, TokenScriptedBackend, decoded

from snakeskills.backends.types import GenerationRequest, GenerationResult, SamplingParams
from snakeskills.errors import SnakeskillsError
from snakeskills.settings.tools import FREE, Tools
from snakeskills.tools.chat_turns import ChatTurns, template_text
from snakeskills.tools.function_calls import FunctionCall
from snakeskills.tools.functions import function_settings
from snakeskills.tools.loop import CONVERSATION_FIELD, LoopTool, ToolLoop, tool_use

CALCULATOR = Tools.filled({"tool": "calculator", "sandbox": "none", "format": "chat_template"}, "tools")
SAMPLING = SamplingParams(temperature=0.0, top_p=1.0, top_k=0, max_new_tokens=200)

# each family: its template (TRL's name), the control tokens its tokenizer has, its end-of-turn token
FAMILIES = {
    "qwen3": ("qwen3", [], "<|im_end|>"),
    "qwen2_5": ("qwen2_5", [], "<|im_end|>"),
    "llama3_1": (
        "llama3_1",
        ["<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>", "<|eom_id|>", "<|python_tag|>"],
        "<|eot_id|>",
    ),
    "llama3_2": (
        "llama3_2",
        ["<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>", "<|eom_id|>", "<|python_tag|>"],
        "<|eot_id|>",
    ),
    "glm4moe": (
        "glm4moe",
        ["[gMASK]", "<sop>", "<|system|>", "<|user|>", "<|assistant|>", "<|observation|>"],
        "<|observation|>",
    ),
}
FORMATS = {
    "qwen3": "hermes",
    "qwen2_5": "hermes",
    "llama3_1": "llama3_json",
    "llama3_2": "llama3_json",
    "glm4moe": "glm4",
}


@pytest.fixture(scope="module")
def smollm2_tokenizer(smollm2):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(smollm2)


@pytest.fixture(scope="module")
def family_tokenizers(smollm2_tokenizer) -> dict:
    """SmolLM2's tokenizer as each family's: its control tokens special, its end-of-turn token the EOS."""
    tokenizers = {}
    for family, (_, specials, end) in FAMILIES.items():
        tokenizer = copy.deepcopy(smollm2_tokenizer)
        if specials:
            tokenizer.add_special_tokens({"additional_special_tokens": specials})
        tokenizer.eos_token = end
        tokenizers[family] = tokenizer
    return tokenizers


def calculator_schemas() -> list[dict]:
    return [function["schema"] for function in function_settings(CALCULATOR)]


def turns(tokenizer, family: str, kwargs=None) -> ChatTurns:
    return ChatTurns(
        tokenizer, template_text(FAMILIES[family][0], "tools.chat_template"), calculator_schemas(), kwargs or {}, family
    )


def call(expression: str) -> dict:
    return {"type": "function", "function": {"name": "calculator", "arguments": {"expression": expression}}}


def rendered_turn(chat: ChatTurns, calls: list[dict], content: str = "") -> str:
    """An assistant turn with ``calls`` as the template writes it (its end-of-turn token left out)."""
    user = [{"role": "user", "content": "q"}]
    prompt = chat.render(user, True)
    text = chat.render([*user, {"role": "assistant", "content": content, "tool_calls": calls}], False)[len(prompt) :]
    end = text.rfind(chat.end_text)
    return text[:end] if end >= 0 else text


@pytest.mark.parametrize("family", list(FAMILIES))
def test_each_familys_template_writes_calls_its_parser_reads_back(family_tokenizers, family):
    """The format is found by rendering a probe; the template's one call and (where it allows) two calls in a turn
    read back as they were, and the same as TRL's response schema reads them."""
    from trl.chat_template_utils import add_response_schema

    tokenizer = family_tokenizers[family]
    chat = turns(tokenizer, family)
    assert chat.calls.format.name == FORMATS[family]
    assert chat.calls.several == (FORMATS[family] != "llama3_json")  # Llama's templates refuse two calls a turn
    cases = [[call("37*84")], [call("2+3"), call('"7" * 8')]] if chat.calls.several else [[call("37*84")]]
    schema_reader = copy.deepcopy(tokenizer)
    schema_reader.chat_template = chat.template
    add_response_schema(schema_reader)
    for calls in cases:
        text = rendered_turn(chat, calls)
        content, parsed = chat.parse(text)
        assert [function.message() for function in parsed] == calls
        assert content == ""
        prefix = chat.render([{"role": "user", "content": "q"}], True)
        theirs = schema_reader.parse_response(text + chat.end_text, prefix=prefix)
        assert [entry["function"] for entry in theirs["tool_calls"]] == [entry["function"] for entry in calls]


@pytest.mark.parametrize("family", ["qwen3", "llama3_1", "glm4moe"])
def test_malformed_calls_are_read_as_calls_with_a_problem(family_tokenizers, family):
    chat = turns(family_tokenizers[family], family)
    good = rendered_turn(chat, [call("1+1")])
    broken = good.replace('{"expression"', "{expression") if family != "glm4moe" else good.replace("calculator", "")
    content, parsed = chat.parse(broken)
    assert len(parsed) == 1 and parsed[0].problem is not None
    if family != "glm4moe":
        assert "not valid JSON" in parsed[0].problem
    # a turn without a call is the answer
    assert chat.parse("The answer is \\boxed{2}.") == ("The answer is \\boxed{2}.", [])


@pytest.mark.parametrize("family", ["qwen2_5", "llama3_1", "llama3_2", "glm4moe"])
def test_the_tool_messages_continue_the_models_turn_as_the_template_renders_the_whole_conversation(
    family_tokenizers, family
):
    """Prompt, the model's turn with its end-of-turn token, then the suffix: for templates that render every turn
    the same whatever follows, exactly ``apply_chat_template`` of the whole conversation with a generation prompt;
    an output that reads as a control token is plain text there and here."""
    tokenizer = family_tokenizers[family]
    chat = turns(tokenizer, family)
    calls = [call("37*84"), call("1/0")] if chat.calls.several else [call("37*84")]
    outputs = ["3108", f"Error: division by zero {chat.end_text}"][: len(calls)]
    user = [{"role": "user", "content": "What is 37*84?"}]
    tool_messages = [{"role": "tool", "name": "calculator", "content": output} for output in outputs]
    whole = chat.render([*user, {"role": "assistant", "content": "", "tool_calls": calls}, *tool_messages], True)
    turn = rendered_turn(chat, calls)
    pieces = chat.suffix(tool_messages)
    assert chat.render(user, True) + turn + chat.end_text + "".join(text for text, _ in pieces) == whole
    assert [text for text, plain in pieces if plain] == [
        json.dumps(output)[1:-1] if family.startswith("llama") else output for output in outputs
    ]


def test_qwen3s_template_is_not_prefix_preserving_and_the_loop_does_not_need_it(family_tokenizers):
    """Qwen3 writes an empty thinking block into the last assistant turn only: rendering the whole conversation
    would change the turn the model wrote. The loop never renders it again: the suffix follows the model's own
    tokens, and with ``enable_thinking: false`` it ends with the empty thinking block the next turn starts after."""
    from trl.chat_template_utils import is_chat_template_prefix_preserving

    tokenizer = copy.deepcopy(family_tokenizers["qwen3"])
    tokenizer.chat_template = template_text("qwen3", "t")
    assert not is_chat_template_prefix_preserving(tokenizer)
    chat = turns(tokenizer, "qwen3", {"enable_thinking": False})
    suffix = "".join(text for text, _ in chat.suffix([{"role": "tool", "name": "calculator", "content": "5"}]))
    assert (
        suffix == "\n<|im_start|>user\n<tool_response>\n5\n</tool_response><|im_end|>\n<|im_start|>assistant\n"
        "<think>\n\n</think>\n\n"
    )


@pytest.mark.parametrize("name", ["llama3", "gemma3", "phi3", "deepseekv3"])
def test_a_template_that_cannot_call_tools_is_refused_naming_it(smollm2_tokenizer, name):
    with pytest.raises(SnakeskillsError, match=f"^model-x {name}: the chat template"):
        ChatTurns(smollm2_tokenizer, template_text(name, "k"), calculator_schemas(), {}, f"model-x {name}")


def test_a_template_name_neither_trl_nor_a_file_names_the_key():
    with pytest.raises(SnakeskillsError, match="config key tools.chat_template: 'qwen9' is neither"):
        template_text("qwen9", "tools.chat_template")


# the loop


def chat_loop(backend, tools: Tools = CALCULATOR, template: str = "qwen2_5") -> ToolLoop:
    section = tools.replace(functions=function_settings(tools), template_text=template_text(template, "t"))
    return ToolLoop(backend, tool_use(section))


def tokens(tokenizer, text: str) -> list[int]:
    return tokenizer.encode(text, add_special_tokens=False)


def qwen_call(*expressions: str, before: str = "") -> str:
    blocks = "\n".join(
        f'<tool_call>\n{{"name": "calculator", "arguments": {{"expression": "{e}"}}}}\n</tool_call>'
        for e in expressions
    )
    return before + blocks + "<|im_end|>"


def prompt_ids(tokenizer, loop: ToolLoop, question: str) -> list[int]:
    return tokens(tokenizer, loop.chat.render([{"role": "user", "content": question}], True))


def test_the_loop_runs_a_turns_calls_in_order_and_its_ids_decode_to_the_conversation(smollm2_tokenizer):
    tokenizer = smollm2_tokenizer
    loop_probe = chat_loop(TokenScriptedBackend(tokenizer, {}))
    prompt = prompt_ids(tokenizer, loop_probe, "What is 37*84 + 2+3?")
    first = tokens(tokenizer, qwen_call("37*84", "2+3", before="Let me compute.\n"))
    second = tokens(tokenizer, qwen_call("3108+5"))
    last = tokens(tokenizer, "So \\boxed{3113}.<|im_end|>")
    backend = TokenScriptedBackend(tokenizer, {tuple(prompt[:3]): [first, second, last]})
    [result] = chat_loop(backend).generate([GenerationRequest(seed=0, prompt_token_ids=tuple(prompt))], SAMPLING)

    suffix_one = (
        "\n<|im_start|>user\n<tool_response>\n3108\n</tool_response>\n<tool_response>\n5\n</tool_response><|im_end|>"
        "\n<|im_start|>assistant\n"
    )
    suffix_two = "\n<|im_start|>user\n<tool_response>\n3113\n</tool_response><|im_end|>\n<|im_start|>assistant\n"
    text = decoded(tokenizer, first) + suffix_one + decoded(tokenizer, second) + suffix_two + "So \\boxed{3113}."
    assert result.generation == text and result.finish_reason == "stop"
    assert decoded(tokenizer, result.token_ids) == text + "<|im_end|>"
    # the mask is 0 on exactly the tool messages (and the assistant header after them)
    mask = result.model_token_mask
    assert [decoded(tokenizer, [i for i, m in zip(result.token_ids, mask, strict=True) if not m])] == [
        suffix_one + suffix_two
    ]
    spans = result.tools["tool_output_spans"]
    assert [text[a:b] for a, b in spans] == [suffix_one, suffix_two]
    assert result.tools["code_rounds_executed"] == 3 and result.tools["tool_errors"] == 0
    assert result.num_generated_tokens == len(first) + len(second) + len(last) == sum(mask)
    # each later turn continues the ids so far exactly
    later = backend.requests[1].prompt_token_ids
    assert list(later) == [*prompt, *first, *tokens(tokenizer, suffix_one)]
    assert result.tools[CONVERSATION_FIELD] == [
        {"role": "assistant", "content": "Let me compute.", "tool_calls": [call("37*84"), call("2+3")]},
        {"role": "tool", "name": "calculator", "content": "3108"},
        {"role": "tool", "name": "calculator", "content": "5"},
        {"role": "assistant", "content": "", "tool_calls": [call("3108+5")]},
        {"role": "tool", "name": "calculator", "content": "3113"},
        {"role": "assistant", "content": "So \\boxed{3113}."},
    ]
    assert [entry["tool"] for entry in result.tools["tool_call_log"]] == ["calculator"] * 3


def test_malformed_and_unknown_calls_are_errors_the_model_reads_and_counts(smollm2_tokenizer):
    tokenizer = smollm2_tokenizer
    probe = chat_loop(TokenScriptedBackend(tokenizer, {}))
    prompt = prompt_ids(tokenizer, probe, "q")
    bad = (
        '<tool_call>\n{"name": "calculator", "arguments": {expression: 1}}\n</tool_call>\n'
        '<tool_call>\n{"name": "python", "arguments": {"code": "1"}}\n</tool_call>\n'
        '<tool_call>\n{"name": "calculator", "arguments": {"expr": "1"}}\n</tool_call>\n'
        '<tool_call>\n{"name": "calculator", "arguments": {"expression": "1/0"}}\n</tool_call><|im_end|>'
    )
    backend = TokenScriptedBackend(
        tokenizer, {tuple(prompt[:3]): [tokens(tokenizer, bad), tokens(tokenizer, "ok<|im_end|>")]}
    )
    [result] = chat_loop(backend).generate([GenerationRequest(seed=0, prompt_token_ids=tuple(prompt))], SAMPLING)
    tool_messages = [m["content"] for m in result.tools[CONVERSATION_FIELD] if m["role"] == "tool"]
    assert tool_messages[0].startswith("Error: the arguments of 'calculator' are not valid JSON") or tool_messages[
        0
    ].startswith("Error: the tool call is not valid JSON")
    assert tool_messages[1] == "Error: unknown function 'python'; the functions are: calculator"
    assert tool_messages[2] == "Error: calculator takes one argument, 'expression'; unknown: expr"
    assert tool_messages[3] == "Error: division by zero"
    assert result.tools["tool_errors"] == 4 and result.tools["code_rounds_executed"] == 4
    assert result.generation.endswith("ok")


def test_a_turn_whose_calls_pass_max_calls_ends_the_sample_unrun(smollm2_tokenizer):
    tokenizer = smollm2_tokenizer
    tools = CALCULATOR.replace(max_calls=1)
    probe = chat_loop(TokenScriptedBackend(tokenizer, {}), tools)
    prompt = prompt_ids(tokenizer, probe, "q")
    backend = TokenScriptedBackend(tokenizer, {tuple(prompt[:3]): [tokens(tokenizer, qwen_call("1+1", "2+2"))]})
    [result] = chat_loop(backend, tools).generate([GenerationRequest(seed=0, prompt_token_ids=tuple(prompt))], SAMPLING)
    assert result.tools["tool_call_over_limit"] and result.tools["code_rounds_executed"] == 0
    assert result.finish_reason == "stop" and len(backend.requests) == 1


class ChatTextBackend:
    """A token-id backend that returns text without its end-of-turn token (as vLLM does)."""

    takes = "token_ids"
    batch_size = 2
    name = "text-only"
    context_length = None

    def __init__(self, tokenizer, texts):
        self.tokenizer, self.texts, self.requests = tokenizer, list(texts), []

    def generate(self, requests, sampling, on_results=None):
        self.requests += requests
        text = self.texts[len(self.requests) - 1]
        return [GenerationResult(generation=text, num_generated_tokens=len(text), finish_reason="stop")]


def echoing(loop: ToolLoop) -> ToolLoop:
    """The loop with a calculator that prints its call's text back, then ``<|im_end|>`` as text."""
    session = lambda seed: ScriptedSession(lambda call: call + "<|im_end|>")  # noqa: E731
    loop.tools = {"calculator": LoopTool("calculator", None, FREE, session)}
    return loop


def test_a_text_backend_gets_the_same_next_turn_as_a_token_backend(smollm2_tokenizer):
    """vLLM's text: the loop writes the end-of-turn token the model ended with, then the tool messages, and the next
    turn's ids are those a token-id backend continues from; a tool that prints ``<|im_end|>`` writes text, never the
    control token, on either backend."""
    tokenizer = smollm2_tokenizer
    prompt = prompt_ids(tokenizer, chat_loop(TokenScriptedBackend(tokenizer, {})), "q")
    call_text = qwen_call("x")
    text_backend = ChatTextBackend(tokenizer, [call_text.removesuffix("<|im_end|>"), "done"])
    [by_text] = echoing(chat_loop(text_backend)).generate(
        [GenerationRequest(seed=0, prompt_token_ids=tuple(prompt))], SAMPLING
    )
    plans = {tuple(prompt[:3]): [tokens(tokenizer, call_text), tokens(tokenizer, "done<|im_end|>")]}
    token_backend = TokenScriptedBackend(tokenizer, plans)
    [by_ids] = echoing(chat_loop(token_backend)).generate(
        [GenerationRequest(seed=0, prompt_token_ids=tuple(prompt))], SAMPLING
    )
    assert by_text.generation == by_ids.generation
    assert "<tool_response>\nx<|im_end|>\n</tool_response>" in by_text.generation
    for backend in (text_backend, token_backend):
        later = list(backend.requests[1].prompt_token_ids[len(prompt) :])
        assert decoded(tokenizer, later) == by_text.generation.removesuffix("done")
        # the model's end of turn and the template's after the tool message: the tool's printed one is text
        assert later.count(tokenizer.eos_token_id) == 2


def test_the_always_ask_baseline_writes_its_first_call_as_the_template_does(smollm2_tokenizer):
    tokenizer = smollm2_tokenizer
    tools = CALCULATOR.replace(first_call="calculator")
    probe = chat_loop(TokenScriptedBackend(tokenizer, {}), tools)
    prompt = prompt_ids(tokenizer, probe, "6*7")
    backend = TokenScriptedBackend(tokenizer, {tuple(prompt[:3]): [tokens(tokenizer, "\\boxed{42}<|im_end|>")]})
    [result] = chat_loop(backend, tools).generate(
        [GenerationRequest(seed=0, prompt_token_ids=tuple(prompt), forced_call="6*7")], SAMPLING
    )
    forced = '<tool_call>\n{"name": "calculator", "arguments": {"expression": "6*7"}}\n</tool_call><|im_end|>'
    assert result.generation.startswith(forced + "\n<|im_start|>user\n<tool_response>\n42\n</tool_response>")
    assert result.generation.endswith("<|im_start|>assistant\n\\boxed{42}")
    assert sum(result.model_token_mask) == len(tokens(tokenizer, "\\boxed{42}<|im_end|>"))
    assert FunctionCall("calculator", {"expression": "6*7"}).message() == call("6*7")


def test_a_turn_past_max_calls_ends_with_that_turn_as_the_last_message(smollm2_tokenizer):
    tokenizer = smollm2_tokenizer
    tools = CALCULATOR.replace(max_calls=1)
    prompt = prompt_ids(tokenizer, chat_loop(TokenScriptedBackend(tokenizer, {}), tools), "q")
    first, second = qwen_call("1+1"), qwen_call("2+2", before="Again.\n")
    backend = TokenScriptedBackend(
        tokenizer, {tuple(prompt[:3]): [tokens(tokenizer, first), tokens(tokenizer, second)]}
    )
    [result] = chat_loop(backend, tools).generate([GenerationRequest(seed=0, prompt_token_ids=tuple(prompt))], SAMPLING)
    assert result.tools["tool_call_over_limit"] and result.tools["code_rounds_executed"] == 1
    assert [message["role"] for message in result.tools[CONVERSATION_FIELD]] == ["assistant", "tool", "assistant"]
    assert result.tools[CONVERSATION_FIELD][-1]["content"] == second.removesuffix("<|im_end|>")


class ChatAPIBackend:
    """A chat API as the loop sees it (the openai backend on a server with a tool parser): it takes messages with the
    functions, and answers each turn with its content and the calls its parser read (``answers``, in order)."""

    takes = "messages"
    reads_tool_calls = True
    batch_size = 4
    name = "chat-api"

    def __init__(self, tokenizer, answers):
        self.tokenizer, self.answers, self.requests = tokenizer, list(answers), []

    def generate(self, requests, sampling, on_results=None):
        self.requests += requests
        content, calls = self.answers[len(self.requests) - 1]
        result = GenerationResult(generation=content, num_generated_tokens=7, finish_reason="stop", tool_calls=calls)
        return [result]


def server_call(expression: str) -> dict:
    """A call as a server's tool parser returns it: the arguments as JSON text."""
    return {"name": "calculator", "arguments": json.dumps({"expression": expression})}


def test_a_chat_api_gets_the_functions_and_the_conversation_and_writes_the_transcript_a_token_backend_does(
    smollm2_tokenizer,
):
    """On a chat API the server's parser reads the calls: the loop sends the functions as ``tools`` and, after a call,
    the conversation in OpenAI's shape (ids pairing each call with its tool message, arguments as JSON text); the
    transcript and the conversation are those of a token-id backend whose model wrote the same calls."""
    tokenizer = smollm2_tokenizer
    question = [{"role": "user", "content": "What is 37*84 + 2+3?"}]
    api = ChatAPIBackend(
        tokenizer,
        [("", (server_call("37*84"), server_call("2+3"))), ("", (server_call("3108+5"),)), ("So \\boxed{3113}.", ())],
    )
    [by_api] = chat_loop(api).generate([GenerationRequest(seed=3, messages=tuple(question))], SAMPLING)

    probe = chat_loop(TokenScriptedBackend(tokenizer, {}))
    prompt = prompt_ids(tokenizer, probe, question[0]["content"])
    scripted = [qwen_call("37*84", "2+3"), qwen_call("3108+5"), "So \\boxed{3113}.<|im_end|>"]
    token_backend = TokenScriptedBackend(tokenizer, {tuple(prompt[:3]): [tokens(tokenizer, t) for t in scripted]})
    [by_ids] = chat_loop(token_backend).generate([GenerationRequest(seed=3, prompt_token_ids=tuple(prompt))], SAMPLING)

    assert by_api.generation == by_ids.generation and by_api.finish_reason == "stop"
    assert by_api.tools[CONVERSATION_FIELD] == by_ids.tools[CONVERSATION_FIELD]
    assert by_api.tools["tool_output_spans"] == by_ids.tools["tool_output_spans"]
    assert by_api.tools["code_rounds_executed"] == 3 and by_api.num_generated_tokens == 21
    first, second, third = api.requests
    assert first.messages == tuple(question) and first.seed == 3
    assert [schema["function"]["name"] for schema in first.functions] == ["calculator"]
    assert third.functions == first.functions and third.assistant_prefix is None
    assert list(second.messages) == [
        *question,
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {"id": "call_1", "type": "function", "function": server_call("37*84")},
                {"id": "call_2", "type": "function", "function": server_call("2+3")},
            ],
        },
        {"role": "tool", "name": "calculator", "content": "3108", "tool_call_id": "call_1"},
        {"role": "tool", "name": "calculator", "content": "5", "tool_call_id": "call_2"},
    ]
    assert third.messages[-1] == {"role": "tool", "name": "calculator", "content": "3113", "tool_call_id": "call_3"}
    assert len({first.seed, second.seed, third.seed}) == 3


def test_a_call_a_server_read_with_arguments_that_are_not_json_is_an_error_the_model_reads(smollm2_tokenizer):
    tokenizer = smollm2_tokenizer
    unreadable = {"name": "calculator", "arguments": "{expression: 1}"}
    api = ChatAPIBackend(tokenizer, [("", (unreadable, {"name": "python", "arguments": "{}"})), ("ok", ())])
    [result] = chat_loop(api).generate(
        [GenerationRequest(seed=0, messages=({"role": "user", "content": "q"},))], SAMPLING
    )
    tool_messages = [m["content"] for m in result.tools[CONVERSATION_FIELD] if m["role"] == "tool"]
    assert tool_messages[0].startswith("Error: the arguments of 'calculator' are not valid JSON")
    assert tool_messages[1] == "Error: unknown function 'python'; the functions are: calculator"
    assert result.tools["tool_errors"] == 2 and result.generation.endswith("ok")
    sent = api.requests[1].messages
    # the server gets back each call as it sent it, and each error under the id of the call it answers
    assert [call["function"] for call in sent[1]["tool_calls"]] == [unreadable, {"name": "python", "arguments": "{}"}]
    assert [(m["tool_call_id"], m["content"][:6]) for m in sent[2:]] == [("call_1", "Error:"), ("call_2", "Error:")]


def test_a_chat_api_without_a_tokenizer_is_refused_naming_the_key(smollm2_tokenizer):
    api = ChatAPIBackend(None, [])
    with pytest.raises(SnakeskillsError, match="generation.openai.tokenizer_path"):
        chat_loop(api)


def test_the_always_ask_baseline_on_a_chat_api_sends_its_call_and_the_tool_message(smollm2_tokenizer):
    api = ChatAPIBackend(smollm2_tokenizer, [("\\boxed{42}", ())])
    tools = CALCULATOR.replace(first_call="calculator")
    request = GenerationRequest(seed=0, messages=({"role": "user", "content": "6*7"},), forced_call="6*7")
    [result] = chat_loop(api, tools).generate([request], SAMPLING)
    [sent] = api.requests
    assert sent.messages[1:] == (
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"id": "call_1", "type": "function", "function": server_call("6*7")}],
        },
        {"role": "tool", "name": "calculator", "content": "42", "tool_call_id": "call_1"},
    )
    forced = '<tool_call>\n{"name": "calculator", "arguments": {"expression": "6*7"}}\n</tool_call><|im_end|>'
    assert result.generation.startswith(forced) and result.generation.endswith("assistant\n\\boxed{42}")
