"""Token counts of the openai backend where the server reports no ``usage``: counted with the tokenizer of
``openai.tokenizer_path``, else the job stops naming that key (a count of 0 would spend no token budget and cost
nothing).

The server is a small stdlib HTTP server that speaks the OpenAI API: it stands in for a third-party server that
omits ``usage`` (a real local server, `transformers serve`, reports it). It answers every request with ``ANSWER``,
cut at the request's first stop string and at its ``max_tokens`` characters (one token per character, as the
character tokenizer counts), and records what it was asked."""

from __future__ import annotations

import http.server
import json
import threading

import pytest
from conftest import generation_section, model_tool_settings, openai_backend, resolved_prompt
from servers import JsonHandler

from snakeskills.backends.types import GenerationRequest, SamplingParams
from snakeskills.errors import SnakeskillsError
from snakeskills.settings.tools import Price, Tags, Tools
from snakeskills.tools import model_tool
from snakeskills.tools.loop import ToolLoop, ToolUse
from snakeskills.tools.model_tool import ModelToolSession

ANSWER = "<calc>1+1</calc>"
CALC = Tags("<calc>", "</calc>", "<out>", "</out>")


class OpenAIStub(JsonHandler):
    """/v1/completions and /v1/chat/completions answering ``ANSWER`` (with ``usage`` only where ``usage`` is set:
    the numbers it gives are its own, 111 and 222, so a test can tell them from counted ones)."""

    usage = False
    bodies: list[dict] = []

    def do_POST(self):  # noqa: N802 - http.server's naming
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.bodies.append(body)
        text = ANSWER
        for stop in body.get("stop") or ():
            text = text.split(stop)[0] if stop in text else text
        finish = "stop"
        if len(text) > body["max_tokens"]:
            text, finish = text[: body["max_tokens"]], "length"
        if self.path.endswith("/chat/completions"):
            choice = {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": finish}
            kind = "chat.completion"
        else:
            choice = {"index": 0, "text": text, "finish_reason": finish}
            kind = "text_completion"
        payload = {"id": "x", "object": kind, "created": 0, "model": body["model"], "choices": [choice]}
        if self.usage:
            payload["usage"] = {"prompt_tokens": 111, "completion_tokens": 222, "total_tokens": 333}
        self.send_json(200, payload)


@pytest.fixture()
def stub():
    """The stub server's handler class (its ``bodies``: the requests it got) and its base URL."""
    handler = type("Stub", (OpenAIStub,), {"bodies": []})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield handler, f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def tokenizer_folder(tmp_path_factory):
    """The character tokenizer (one token per character, BOS added to plain text) saved as a tokenizer folder."""
    from snakeskills.models.tiny_model import build_char_tokenizer

    folder = tmp_path_factory.mktemp("char-tokenizer")
    build_char_tokenizer().save_pretrained(folder)
    return folder


def sampling(max_new_tokens: int, stop: tuple[str, ...] = ()) -> SamplingParams:
    return SamplingParams(temperature=0.0, top_p=1.0, top_k=0, max_new_tokens=max_new_tokens, stop=stop)


def chat_prompt_tokens(folder, messages) -> int:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folder)
    rendered = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    return len(tokenizer(rendered, add_special_tokens=False)["input_ids"])


@pytest.mark.parametrize("api", ["completions", "chat"])
def test_a_server_without_usage_has_its_tokens_counted_with_the_tokenizer(stub, tokenizer_folder, api):
    handler, base_url = stub
    backend = openai_backend(base_url=base_url, model="stub", api=api, tokenizer_path=str(tokenizer_folder))
    messages = ({"role": "user", "content": "2+3="},)
    request = (
        GenerationRequest(seed=0, prompt="2+3=") if api == "completions" else GenerationRequest(0, messages=messages)
    )
    whole, cut = backend.generate([request, request], sampling(20))[0], backend.generate([request], sampling(4))[0]
    assert (whole.generation, whole.finish_reason) == (ANSWER, "stop")
    assert whole.num_generated_tokens == len(ANSWER)  # one token per character
    assert (cut.generation, cut.finish_reason, cut.num_generated_tokens) == (ANSWER[:4], "length", 4)
    # the prompt as the server would encode it: plain text with BOS, a chat through the template
    expected = len("2+3=") + 1 if api == "completions" else chat_prompt_tokens(tokenizer_folder, list(messages))
    assert whole.num_prompt_tokens == cut.num_prompt_tokens == expected > 0


def test_a_servers_own_usage_is_kept_where_it_reports_one(stub, tokenizer_folder):
    handler, base_url = stub
    handler.usage = True
    backend = openai_backend(base_url=base_url, model="stub", api="completions", tokenizer_path=str(tokenizer_folder))
    [result] = backend.generate([GenerationRequest(seed=0, prompt="2+3=")], sampling(20))
    assert (result.num_generated_tokens, result.num_prompt_tokens) == (222, 111)


@pytest.mark.parametrize("api", ["completions", "chat"])
def test_a_server_without_usage_and_no_tokenizer_stops_the_job_naming_the_key(stub, api):
    _, base_url = stub
    backend = openai_backend(base_url=base_url, model="stub", api=api)
    requests = [
        GenerationRequest(seed=n, prompt="2+3=", messages=({"role": "user", "content": "2+3="},)) for n in range(3)
    ]
    with pytest.raises(SnakeskillsError, match=r"reports no `usage`.*openai\.tokenizer_path") as error:
        backend.generate(requests, sampling(20))
    assert "tools.models.<name>.generation.openai.tokenizer_path" in str(error.value)


def test_the_tool_loop_spends_its_token_budget_on_a_server_without_usage(stub, tokenizer_folder):
    """max_new_tokens 20, every turn writes ``<calc>1+1`` (9 tokens) and then the call's end: each turn gets what
    the earlier ones left (20, 11, 2), and the row ends at its budget, not at max_calls with every turn given 20."""
    handler, base_url = stub
    backend = openai_backend(base_url=base_url, model="stub", api="completions", tokenizer_path=str(tokenizer_folder))
    use = ToolUse(settings=Tools.filled({"tool": "calculator"}, "tools"), tags=CALC, max_calls=3, workers=1)
    [result] = ToolLoop(backend, use).generate([GenerationRequest(seed=0, prompt="q:")], sampling(20))
    assert [body["max_tokens"] for body in handler.bodies] == [20, 11, 2]
    assert result.num_generated_tokens == 20 and result.finish_reason == "length"
    assert result.tools["code_rounds_executed"] == 2


def test_a_model_tool_behind_a_server_without_usage_is_priced_by_its_tokens(stub, tokenizer_folder):
    handler, base_url = stub
    openai = {"base_url": base_url, "model": "stub", "api": "completions", "tokenizer_path": str(tokenizer_folder)}
    generation = generation_section(backend="openai", openai=openai, sampling={"max_new_tokens": 30})
    prompt = resolved_prompt(user="{problem}=", chat_template=False)
    settings = model_tool_settings("expert", prompt, generation)
    limits = Tools.filled({"tool": "expert", "timeout_seconds": 60}, "tools")
    try:
        result = ModelToolSession(limits, settings, seed=0).call("2+3")
    finally:
        for asked in model_tool._ASKED.values():
            asked.close()
        model_tool._ASKED.clear()
    assert handler.bodies[0]["prompt"] == "2+3="
    assert (result.output, result.error) == (ANSWER, False)
    assert (result.input_tokens, result.output_tokens) == (len("2+3=") + 1, len(ANSWER))
    price = Price.filled({"per_output_token": 0.5, "per_input_token": 0.25})
    assert price.cost(result.input_tokens, result.output_tokens) == pytest.approx(0.25 * 5 + 0.5 * len(ANSWER))
