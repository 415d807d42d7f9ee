"""The openai backend against a real OpenAI-compatible server: `transformers serve` on localhost.

The server serves the untrained tiny Llama checkpoint (tests/conftest.py ``tiny_checkpoint``) and is
started and stopped by the tests. One test uses a stub HTTP server instead: it answers like a vLLM
server whose context is too short, which cannot exist on this CPU-only machine; that test says so.
"""

from __future__ import annotations

import http.server
import logging
import threading

import pytest
from conftest import (
    TOOL_CALLER_LEARNED,
    TOOL_CALLER_TOOLS,
    asked_model,
    hf_backend,
    openai_backend,
    resolved_prompt,
)
from servers import JsonHandler, TransformersServer

from snakeskills.backends import SamplingParams
from snakeskills.data.synthetic import arithmetic_splits
from snakeskills.errors import SnakeskillsError
from snakeskills.generation.generate import generate_chunk
from snakeskills.generation.resumable import progress_path_for
from snakeskills.io import read_jsonl, write_jsonl

PROMPT = resolved_prompt(user="{problem}=")
SAMPLING = SamplingParams(temperature=1.0, top_p=1.0, top_k=0, max_new_tokens=5)


@pytest.fixture(scope="module")
def server(tiny_checkpoint):
    running = TransformersServer(tiny_checkpoint).start()
    yield running
    running.stop()


@pytest.fixture()
def prepared(tmp_path):
    path = tmp_path / "split.jsonl"
    write_jsonl(path, arithmetic_splits(operations=["+"], max_operand=20, split_sizes={"test": 12}, seed=1)["test"])
    return path


def _generate(backend, prepared, output, rows_per_flush=4):
    return generate_chunk(
        asked_model(backend, PROMPT, SAMPLING, rows_per_flush=rows_per_flush),
        prepared_path=prepared,
        output_path=output,
        chunk_index=0,
        num_chunks=1,
        random_seed=0,
    )


@pytest.mark.parametrize("api", ["completions", "chat"])
def test_openai_backend_writes_the_same_fields_as_hf(server, tiny_checkpoint, prepared, tmp_path, api):
    backend = openai_backend(base_url=server.base_url, model=str(tiny_checkpoint), api=api, max_concurrency=4)
    counts = _generate(backend, prepared, tmp_path / "openai.jsonl")
    assert counts == {"rows": 12, "resumed_rows": 0, "generated_rows": 12}
    _generate(hf_backend(str(tiny_checkpoint), batch_size=4), prepared, tmp_path / "hf.jsonl")
    openai_rows, hf_rows = read_jsonl(tmp_path / "openai.jsonl"), read_jsonl(tmp_path / "hf.jsonl")
    assert [list(row) for row in openai_rows] == [list(row) for row in hf_rows]
    assert [row["id"] for row in openai_rows] == [row["id"] for row in hf_rows]
    for row in openai_rows:
        assert isinstance(row["generation"], str)
        assert 1 <= row["num_generated_tokens"] <= 5
        assert row["finish_reason"] in ("stop", "length")


def test_server_stopping_mid_run_fails_cleanly_and_rerun_completes(tiny_checkpoint, prepared, tmp_path):
    stoppable = TransformersServer(tiny_checkpoint).start()
    try:
        backend = openai_backend(
            base_url=stoppable.base_url,
            model=str(tiny_checkpoint),
            api="completions",
            max_retries=2,
            retry_initial_seconds=0.2,
            request_timeout_seconds=20,
        )
        original_generate = backend.generate
        calls = []

        def generate_then_lose_the_server(requests, sampling, **options):
            calls.append(len(requests))
            if len(calls) == 2:
                stoppable.stop()  # the server goes away after the first batch
            return original_generate(requests, sampling, **options)

        backend.generate = generate_then_lose_the_server
        output = tmp_path / "out.jsonl"
        with pytest.raises(SnakeskillsError, match="failed 3 times") as error:
            _generate(backend, prepared, output)
        assert "rerun to resume" in str(error.value)
        assert not output.exists()
        kept = read_jsonl(progress_path_for(output))[1:]  # after the fingerprint line
        assert len(kept) == 4  # the first batch survives the failure

        restarted = TransformersServer(tiny_checkpoint, port=stoppable.port).start()
        stoppable = restarted
        backend.generate = original_generate
        counts = _generate(backend, prepared, output)
        assert counts == {"rows": 12, "resumed_rows": 4, "generated_rows": 8}
        rows = read_jsonl(output)
        assert [row["id"] for row in rows] == [row["id"] for row in read_jsonl(prepared)]  # no duplicates, in order
        assert rows[:4] == kept
    finally:
        stoppable.stop()


class ContextTooShortHandler(JsonHandler):
    """Answers /v1/completions like a vLLM server whose max_model_len is exceeded (HTTP 400)."""

    seen_authorization: list[str] = []

    def do_POST(self):  # noqa: N802 - http.server's naming
        self.seen_authorization.append(self.headers.get("Authorization", ""))
        self.rfile.read(int(self.headers["Content-Length"]))
        body = {
            "object": "error",
            "message": "This model's maximum context length is 32 tokens. However, you requested 900 tokens.",
            "type": "BadRequestError",
            "code": 400,
        }
        self.send_json(400, body)


def test_context_length_error_is_a_soft_failure_and_the_key_stays_secret(prepared, tmp_path, monkeypatch, caplog):
    """A stub stands in for a vLLM server (none can run on this CPU-only machine): it rejects every prompt
    as too long, as vLLM does. The job must finish with empty generations and an `error` field, and the
    API key, read from the environment, must reach the server but never a log or an output file."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), ContextTooShortHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    secret = "sk-test-0123456789abcdef"
    monkeypatch.setenv("SNAKESKILLS_TEST_KEY", secret)
    try:
        with caplog.at_level(logging.DEBUG):
            backend = openai_backend(
                base_url=f"http://127.0.0.1:{server.server_address[1]}/v1",
                model="stub",
                api="completions",
                api_key_env="SNAKESKILLS_TEST_KEY",
            )
            counts = _generate(backend, prepared, tmp_path / "out.jsonl")
    finally:
        server.shutdown()
    assert counts["generated_rows"] == 12
    rows = read_jsonl(tmp_path / "out.jsonl")
    assert all(row["generation"] == "" and row["finish_reason"] == "error" for row in rows)
    assert all("maximum context length" in row["error"] for row in rows)
    assert ContextTooShortHandler.seen_authorization[0] == f"Bearer {secret}"
    assert secret not in caplog.text
    assert secret not in (tmp_path / "out.jsonl").read_text()


def test_missing_api_key_variable_names_it(monkeypatch):
    monkeypatch.delenv("SNAKESKILLS_MISSING_KEY", raising=False)
    with pytest.raises(SnakeskillsError, match="SNAKESKILLS_MISSING_KEY"):
        openai_backend(base_url="http://127.0.0.1:9/v1", model="m", api_key_env="SNAKESKILLS_MISSING_KEY")


def test_llm_judge_through_the_openai_backend(server, tiny_checkpoint, tmp_path):
    from snakeskills.judging.llm_judge import llm_judge_chunk
    from snakeskills.prompts import resolve_prompt

    rows = [
        {
            "id": f"p{i}",
            "problem": f"{i}+1",
            "expected_answer": str(i + 1),
            "generation": "...",
            "predicted_answer": [None, str(i + 1), f"{i}"][i % 3],
            "symbolic_correct": i % 3 == 1,
            "random_seed": 0,
        }
        for i in range(9)
    ]
    judged = tmp_path / "judged.jsonl"
    write_jsonl(judged, rows)
    prompt = resolve_prompt(
        {
            "template": None,
            "system": None,
            "user": "{expected_answer}?{predicted_answer}:",
            "num_few_shot": None,
            "chat_template": False,
            "chat_template_kwargs": {},
        }
    )
    backend = openai_backend(base_url=server.base_url, model=str(tiny_checkpoint), api="chat", max_concurrency=3)
    counts = llm_judge_chunk(
        asked_model(backend, prompt, SAMPLING, rows_per_flush=4),
        judged_path=judged,
        output_path=tmp_path / "out.jsonl",
    )
    assert counts["model_calls"] == 3 and counts["skipped_calls"] == 6
    out = read_jsonl(tmp_path / "out.jsonl")
    assert [row["id"] for row in out] == [row["id"] for row in rows]
    assert all(isinstance(row["judgement"], str) and isinstance(row["judge_correct"], bool) for row in out)


@pytest.mark.parametrize("api", ["completions"])
def test_the_tool_loop_runs_over_an_openai_server(tool_caller, tmp_path, api):
    """The tool-calling tiny model served by `transformers serve`: each later turn goes back to the server as the
    prompt plus the transcript so far, and every call the model writes is answered by the calculator."""
    from snakeskills.backends.types import GenerationRequest
    from snakeskills.settings.tools import Tools
    from snakeskills.tools.loop import ToolLoop, tool_use
    from snakeskills.tools.registry import new_session

    server = TransformersServer(tool_caller).start()
    try:
        backend = openai_backend(base_url=server.base_url, model=str(tool_caller), api=api, max_concurrency=4)
        loop = ToolLoop(backend, tool_use(Tools.filled(TOOL_CALLER_TOOLS, "tools")))
        prompts = list(TOOL_CALLER_LEARNED) * 3
        requests = [GenerationRequest(seed=index, prompt=prompt) for index, prompt in enumerate(prompts)]
        sampling = SamplingParams(temperature=0.3, top_p=1.0, top_k=0, max_new_tokens=48)
        results = loop.generate(requests, sampling)
    finally:
        server.stop()
    calculator = new_session(Tools.filled({"tool": "calculator"}, "tools"))
    calls = 0
    for result in results:
        text = result.generation
        for start, end in result.tools["tool_output_spans"]:
            call = text[text.rindex("<calc>", 0, start) + len("<calc>") : start - len("</calc>")]
            assert text[start:end] == f"<out>{calculator.call(call).output}</out>", text
            calls += 1
        assert result.tools["code_rounds_executed"] == len(result.tools["tool_output_spans"])
    assert calls >= len(prompts), [result.generation for result in results]
    learned = [
        result.generation == TOOL_CALLER_LEARNED[prompt] for prompt, result in zip(prompts, results, strict=True)
    ]
    assert sum(learned) >= 3, [result.generation for result in results]
