"""The tool loop's protocol (``snakeskills.tools.loop``) over a scripted text backend: a model stand-in whose turns
are fixed by the transcript so far, so each test knows the exact transcript. The calculator is the real one; the
sandboxed tools' own containment and timeouts are tested in tests/external/test_tool_sandbox.py, and the loop with
a real model in tests/workflow/test_tool_workflow.py."""

from __future__ import annotations

import dataclasses

import pytest

from snakeskills.backends.types import GenerationRequest, SamplingParams, truncate_at_stop
from snakeskills.errors import SnakeskillsError
from snakeskills.generation.model_job import AskedModel, ask_model_per_row
from snakeskills.io import read_jsonl
from snakeskills.settings.tools import Tools
from snakeskills.tools.loop import ToolLoop, ToolUse, turn_seed
from snakeskills.tools.protocol import Tags, answer_text, output_spans, turn_call

TAGS = Tags("<calc>", "</calc>", "<out>", "</out>")
SAMPLING = SamplingParams(temperature=1.0, top_p=1.0, top_k=0, max_new_tokens=200)


class ScriptedBackend:
    """Answers each request with the next turn of its row's script (by how many tool outputs its prompt holds),
    cut at the first stop string as the real backends cut it; one token per character. It records every call's
    requests, to check seeds, budgets and batching."""

    takes = "text"

    def __init__(self, scripts: dict[str, list[str]], batch_size: int = 8, fail_on_call: int | None = None):
        self.scripts, self.batch_size, self.fail_on_call = scripts, batch_size, fail_on_call
        self.calls: list[list[GenerationRequest]] = []

    def generate(self, requests, sampling, on_results=None):
        if self.fail_on_call is not None and len(self.calls) == self.fail_on_call:
            raise RuntimeError("killed")
        self.calls.append(list(requests))
        results = []
        for request in requests:
            question, _, transcript = request.prompt.partition("=")
            turn = transcript.count(TAGS.code_output_end)
            text = self.scripts[question][turn] + f"#{request.seed % 97}"
            text, stopped = truncate_at_stop(text, sampling.stop)
            budget = request.budget(sampling)
            finish = "stop"
            if len(text) > budget:
                text, finish = text[:budget], "length"
            results.append(_result(text, finish))
        return results


def _result(text: str, finish: str):
    from snakeskills.backends.types import GenerationResult

    return GenerationResult(generation=text, num_generated_tokens=len(text), finish_reason=finish)


def loop(backend, max_calls: int = 4, workers: int = 2) -> ToolLoop:
    settings = Tools.filled(
        {"tool": "calculator", "max_output_characters": 20, "timeout_seconds": 5, "memory_limit_mb": None}
        | {"sandbox": "none"},
        "tools",
    )
    return ToolLoop(backend, ToolUse(settings=settings, tags=TAGS, max_calls=max_calls, workers=workers))


def request(question: str, seed: int = 1) -> GenerationRequest:
    return GenerationRequest(seed=seed, prompt=f"{question}=")


SCRIPTS = {
    "two": ["let me <calc>2+3</calc>", "then <calc>5*7</calc>", "\\boxed{35}"],
    "none": ["\\boxed{4}"],
    "error": ["<calc>1/0</calc>", "\\boxed{0}"],
    "forever": ["<calc>1+1</calc>"] * 10,
}


def test_several_calls_make_one_transcript_with_exact_output_spans():
    scripts = {"two": ["let me <calc>2+3</calc>", "then <calc>5*7</calc>", "so \\boxed{35}"]}
    backend = ScriptedBackend(scripts)
    [result] = loop(backend).generate([request("two")], SAMPLING)
    seeds = [turn_seed(1, turn) % 97 for turn in range(3)]
    # each turn is cut at code_end (a stop string); the loop writes code_end back, then the output block
    expected = f"let me <calc>2+3</calc><out>5</out>then <calc>5*7</calc><out>35</out>so \\boxed{{35}}#{seeds[2]}"
    assert result.generation == expected
    assert result.finish_reason == "stop"
    assert result.tools["code_rounds_executed"] == 2
    assert result.tools["tool_output_spans"] == [list(span) for span in output_spans(expected, TAGS)]
    assert [expected[start:end] for start, end in result.tools["tool_output_spans"]] == [
        "<out>5</out>",
        "<out>35</out>",
    ]
    assert answer_text(expected, result.tools["tool_output_spans"]) == f"so \\boxed{{35}}#{seeds[2]}"
    # the tool outputs are not the model's tokens: two cut turns and the last one
    assert result.num_generated_tokens == len("let me <calc>2+3") + len("then <calc>5*7") + len(
        expected
    ) - expected.rindex("so")


def test_turns_after_a_call_get_seeds_of_their_own_and_the_first_turn_keeps_the_rows():
    backend = ScriptedBackend(SCRIPTS)
    loop(backend).generate([request("two", seed=5)], SAMPLING)
    assert [call[0].seed for call in backend.calls] == [5, turn_seed(5, 1), turn_seed(5, 2)]
    assert len({turn_seed(5, turn) for turn in range(5)}) == 5


def test_a_call_beyond_max_calls_is_not_run_and_ends_the_sample():
    [result] = loop(ScriptedBackend(SCRIPTS), max_calls=1).generate([request("two")], SAMPLING)
    assert result.tools["code_rounds_executed"] == 1
    assert result.tools["tool_call_over_limit"] is True
    assert result.generation.count("<out>") == 1
    assert turn_call(result.generation, {"calculator": TAGS}) is not None  # it ends inside the call it was refused


def test_a_tool_error_is_shown_to_the_model_and_counted():
    [result] = loop(ScriptedBackend(SCRIPTS)).generate([request("error")], SAMPLING)
    assert result.tools["tool_errors"] == 1
    start, end = result.tools["tool_output_spans"][0]
    assert "Error" in result.generation[start:end]


def test_the_token_budget_counts_the_model_tokens_of_all_turns():
    budget = 30
    sampling = dataclasses.replace(SAMPLING, max_new_tokens=budget)
    backend = ScriptedBackend(SCRIPTS)
    [result] = loop(backend, max_calls=10).generate([request("forever")], sampling)
    assert result.finish_reason == "length"
    assert result.num_generated_tokens <= budget
    budgets = [call[0].budget(sampling) for call in backend.calls]
    assert budgets[0] == budget and all(later < earlier for earlier, later in zip(budgets, budgets[1:], strict=False))


def test_no_call_answers_in_one_turn_as_without_tools():
    backend = ScriptedBackend(SCRIPTS)
    [result] = loop(backend).generate([request("none")], SAMPLING)
    assert result.generation == f"\\boxed{{4}}#{1 % 97}"
    assert result.tools["code_rounds_executed"] == 0 and result.tools["tool_output_spans"] == []
    assert len(backend.calls) == 1 and backend.calls[0][0] == request("none")


@pytest.mark.parametrize("batch_size", [1, 3])
def test_a_rows_transcript_does_not_depend_on_its_batch(batch_size):
    requests = [request(name, seed) for seed, name in enumerate(["two", "none", "error", "forever", "two"])]
    alone = [loop(ScriptedBackend(SCRIPTS, batch_size=1)).generate([r], SAMPLING)[0] for r in requests]
    together = loop(ScriptedBackend(SCRIPTS, batch_size=batch_size), workers=3).generate(requests, SAMPLING)
    assert [r.generation for r in together] == [r.generation for r in alone]
    assert [untimed(r.tools) for r in together] == [untimed(r.tools) for r in alone]


def untimed(tools: dict) -> dict:
    """The loop's record fields without the wall times (the sample's and each call's)."""
    log = [{key: value for key, value in call.items() if key != "seconds"} for call in tools["tool_call_log"]]
    return {key: value for key, value in tools.items() if key != "code_execution_time"} | {"tool_call_log": log}


def test_rows_waiting_for_a_tool_leave_the_batch_to_rows_that_are_ready():
    backend = ScriptedBackend(SCRIPTS, batch_size=2)
    requests = [request("two", 1), request("two", 2), request("none", 3), request("none", 4)]
    loop(backend).generate(requests, SAMPLING)
    # the first call takes two rows; while their calls run, the next call takes the two rows that are ready
    assert [r.prompt for r in backend.calls[1]] == ["none=", "none="]


def test_a_resumed_job_equals_an_uninterrupted_one(tmp_path):
    rows = [{"id": f"r{index}", "question": name} for index, name in enumerate(["two", "error", "none", "two"])]

    def run(path, backend):
        model = AskedModel(
            backend=loop(backend),
            prompt={},
            sampling=SAMPLING,
            reasoning={"parse_reasoning": False, "end_reasoning_string": "</think>"},
            rows_per_flush=2,
        )
        return ask_model_per_row(
            rows,
            model,
            output_path=path,
            inputs=[],
            settings={},
            key="generation",
            label="test",
            request_for=lambda row: request(row["question"], seed=int(row["id"][1:])),
            output_row=lambda row, fields, result: {**row, **fields, "spans": result.tools["tool_output_spans"]},
        )

    whole = tmp_path / "whole.jsonl"
    run(whole, ScriptedBackend(SCRIPTS, batch_size=8))
    resumed = tmp_path / "resumed.jsonl"
    with pytest.raises(RuntimeError, match="killed"):  # killed during the second batch of rows
        run(resumed, ScriptedBackend(SCRIPTS, batch_size=8, fail_on_call=3))
    counts = run(resumed, ScriptedBackend(SCRIPTS, batch_size=8))
    assert counts["resumed_rows"] == 2
    assert read_jsonl(resumed) == read_jsonl(whole)


class TokenScriptedBackend:
    """A token-id backend (as hf with ``keep_tokens``: GRPO's rollouts) whose first turn opens a call and ends with
    EOS inside it (no ``code_end``), and whose second turn answers."""

    takes = "token_ids"
    batch_size = 4
    keep_tokens = True

    def __init__(self):
        from snakeskills.models.tiny_model import build_char_tokenizer

        self.tokenizer = build_char_tokenizer()
        self.eos_token_ids = {self.tokenizer.eos_token_id}

    def generate(self, requests, sampling, on_results=None):
        results = []
        for request in requests:
            text = "<calc>12*3" if len(request.prompt_token_ids) == 3 else "\\boxed{36}"
            ids = [*self.tokenizer.encode(text, add_special_tokens=False), self.tokenizer.eos_token_id]
            results.append(
                dataclasses.replace(_result(text, "stop"), token_ids=tuple(ids), logprobs=tuple([-0.5] * len(ids)))
            )
        return results


def test_a_turn_ending_with_eos_inside_its_call_leaves_no_eos_in_the_token_ids():
    backend = TokenScriptedBackend()
    [result] = loop(backend).generate([GenerationRequest(seed=0, prompt_token_ids=(1, 5, 6))], SAMPLING)
    assert result.generation == "<calc>12*3</calc><out>36</out>\\boxed{36}"
    tokenizer = backend.tokenizer
    assert tokenizer.decode(result.token_ids, skip_special_tokens=False) == result.generation + tokenizer.eos_token
    # the model wrote neither the closing tag (it ended with EOS) nor the output: both are the loop's, masked
    tool = [token for token, mine in zip(result.token_ids, result.model_token_mask, strict=True) if not mine]
    assert tokenizer.decode(tool) == "</calc><out>36</out>"
    assert all(
        logprob == 0.0 for logprob, mine in zip(result.logprobs, result.model_token_mask, strict=True) if not mine
    )


class FenceBackend:
    """A model that closes its code block with a bare fence and ends (EOS), then answers."""

    takes = "text"
    batch_size = 4

    def generate(self, requests, sampling, on_results=None):
        first = "```output" not in requests[0].prompt
        text = "```python\n6*7\n```" if first else "\\boxed{42}"
        return [_result(text, "stop") for _ in requests]


def test_a_call_closed_without_the_tags_last_newline_runs_without_its_fence():
    """markdown's code_end is a fence and a newline; a model that closes the block and ends (EOS) leaves the fence
    alone, which is not code: the call runs without it and the transcript holds the fence once."""
    markdown = Tags("```python\n", "```\n", "```output\n", "```\n")
    use = dataclasses.replace(loop(FenceBackend()).use, tags=markdown)
    [result] = ToolLoop(FenceBackend(), use).generate([request("fence")], SAMPLING)
    assert result.generation == "```python\n6*7\n```\n```output\n42\n```\n\\boxed{42}", result.generation
    assert result.tools["code_rounds_executed"] == 1 and result.tools["tool_errors"] == 0


class ReasoningBackend(ScriptedBackend):
    """A server whose reasoning parser splits each turn's thinking off its answer (``reasoning_content``)."""

    def __init__(self, scripts, thoughts):
        super().__init__(scripts)
        self.thoughts = thoughts

    def generate(self, requests, sampling, on_results=None):
        results = super().generate(requests, sampling)
        turns = [request.prompt.count(TAGS.code_output_end) for request in requests]
        return [
            dataclasses.replace(result, reasoning_content=self.thoughts[turn])
            for result, turn in zip(results, turns, strict=True)
        ]


def test_the_reasoning_a_server_split_off_is_kept_over_all_turns():
    """Item 6: each turn's ``reasoning_content`` reaches the loop's result, in order (it was None)."""
    backend = ReasoningBackend({"two": SCRIPTS["two"]}, ["think a. ", "think b. ", "think c."])
    [result] = loop(backend).generate([request("two")], SAMPLING)
    assert result.tools["code_rounds_executed"] == 2
    assert result.reasoning_content == "think a. think b. think c."


def test_a_call_written_inside_split_off_reasoning_stops_with_the_reason():
    """Item 6: a call the server split off with the reasoning would never run: the job says why and what to do."""
    backend = ReasoningBackend({"none": ["\\boxed{4}"]}, ["let me <calc>2+2"])
    with pytest.raises(SnakeskillsError, match="reasoning parser"):
        loop(backend).generate([request("none")], SAMPLING)
