"""Tools through the chat template (``tools.format: chat_template``) in training and in a whole run, on a tiny Llama
that calls a calculator in TRL's Qwen2.5 template (``chat_tool_caller``).

A real GRPO step whose rollouts call the calculator: the ids TRL trains on decode to the conversation, the tool
messages carry mask 0 and hold what the calculator printed for the JSON call before them. A run of the pipeline
(generate, judge, SFT on the judged conversations, generate again) with the caller as the student: the records keep
the messages beside the rendered text, and the round's prompts render with the functions."""

from __future__ import annotations

import json

import pytest
from chat_callers import ANSWERS, build_chat_tool_caller, caller_run_config
from conftest import hf_options, run_snakemake, write_config
from test_grpo_tools import (
    REASONING,
    REWARDS,
    SAMPLING,
    assert_trl_took_the_tool_mask,
    judges,
    recording_rollouts,
    runs,
    tool_round,
)

from snakeskills.io import iter_jsonl
from snakeskills.training import grpo


@pytest.fixture(scope="module")
def chat_tool_caller(tmp_path_factory):
    """The tiny Llama that calls a calculator in TRL's Qwen2.5 template (``chat_callers``): its folder and the tools
    section a job reads."""
    return build_chat_tool_caller(tmp_path_factory.mktemp("chat-tool-caller"))


def test_chat_template_tool_rollouts_train_on_the_rendered_conversation_with_tool_messages_masked(
    chat_tool_caller, tmp_path, monkeypatch
):
    """A real GRPO step whose hf rollouts call the calculator through the chat template: each completion's ids
    decode to the conversation (the model's turns, each ended by its ``<|im_end|>``, and the template's tool
    messages), ``env_mask`` is 0 on exactly the tool messages (with the next assistant header), each holds what the
    calculator returns for the JSON call the model wrote before it, and TRL's batch takes that mask."""
    from transformers import AutoTokenizer

    from snakeskills.settings.tools import Tools
    from snakeskills.tools.function_calls import CALL_FORMATS
    from snakeskills.tools.registry import new_session

    folder, section = chat_tool_caller
    tokenizer = AutoTokenizer.from_pretrained(folder)
    schemas = [function["schema"] for function in section.functions]
    run = tool_round(
        tmp_path, folder, "", max_length=1536, chat_template=True, functions=schemas, template=section.template_text
    )
    recorded = recording_rollouts(monkeypatch)
    metrics = grpo.train(
        run,
        num_generations=4,
        beta=0.04,
        loss="dapo",
        sampling={**SAMPLING, "temperature": 0.5, "max_new_tokens": 200},
        rewards={**REWARDS, "tool_calls": 0.1},
        judges=judges(),
        reasoning=REASONING,
        rollouts="hf",
        tools=section.to_dict(),
    )
    assert metrics["global_step"] == 1
    output = recorded["rollouts"][0]
    assert (recorded["samplers"][0].completions, recorded["samplers"][0].mismatches) == (8, 0)
    calculator = new_session(Tools.filled({"tool": "calculator"}, "tools"))
    calls = output["tool_calls"]
    for row in range(len(output["completion_ids"])):
        ids, mask, logprobs = output["completion_ids"][row], output["env_mask"][row], output["logprobs"][row]
        text, spans = output["transcript"][row], output["tool_output_spans"][row]
        assert tokenizer.decode(ids, skip_special_tokens=False) in (text, text + "<|im_end|>")
        assert calls[row] == len(spans) == len(runs(mask))
        assert all(value == 0.0 for value, bit in zip(logprobs, mask, strict=True) if not bit)
        model_end = 0
        for (start, end), (span_start, span_end) in zip(runs(mask), spans, strict=True):
            block = tokenizer.decode(ids[start:end], skip_special_tokens=False)
            assert block == text[span_start:span_end]
            written = tokenizer.decode(ids[model_end:start], skip_special_tokens=False)
            assert written.endswith("<|im_end|>"), "the model's own end of turn is in the loss"
            _, [function] = CALL_FORMATS["hermes"].parse(written.removesuffix("<|im_end|>"), {})
            opening, closing = (
                "\n<|im_start|>user\n<tool_response>\n",
                "\n</tool_response><|im_end|>\n<|im_start|>assistant\n",
            )
            assert block.startswith(opening) and block.endswith(closing)
            content = block[len(opening) : -len(closing)]
            if function.problem is None and set(function.arguments) == {"expression"}:
                assert content == calculator.call(function.arguments["expression"]).output
            else:  # a call the model wrote wrong: the error it reads
                assert content.startswith("Error: ")
            model_end = end
    assert sum(calls) >= len(calls) and max(calls) >= 2, calls
    assert_trl_took_the_tool_mask(recorded, output)


def test_a_run_with_the_caller_records_the_conversations_and_trains_on_them(chat_tool_caller, tmp_path):
    """The pipeline with the caller as the student, its own chat template offering the calculator: the judged
    records hold the rendered conversation (the tool messages at ``tool_output_spans``, each what the calculator
    printed for the call before it), the messages (``conversation``) and the answer read after the last tool
    message; SFT trains on the judged-correct conversations with the same prompts; the tuned round calls too."""
    from snakeskills.settings.tools import Tools
    from snakeskills.tools.function_calls import CALL_FORMATS
    from snakeskills.tools.registry import new_session

    folder, section = chat_tool_caller
    sampling = {"temperature": 0.3, "top_p": 1.0, "top_k": 0, "max_new_tokens": 200}
    config = caller_run_config("chat-tools", folder, tmp_path / "problems.jsonl", sampling)
    process = run_snakemake(
        tmp_path,
        "--cores",
        "2",
        "results/chat-tools/eval/summary.json",
        configfile=write_config(tmp_path / "c.yaml", config),
    )
    assert process.returncode == 0, process.stdout[-4000:] + process.stderr[-4000:]
    results = tmp_path / "results" / "chat-tools"
    calculator = new_session(Tools.filled({"tool": "calculator"}, "tools"))
    opening, closing = "\n<|im_start|>user\n<tool_response>\n", "\n</tool_response><|im_end|>\n<|im_start|>assistant\n"
    calls = 0
    for model in ("caller", "sft-round1"):
        for record in iter_jsonl(results / "judge" / model / "calc" / "test" / "output-rs0.jsonl"):
            text, spans = record["generation"], record["tool_output_spans"]
            messages = record["conversation"]
            assert record["code_rounds_executed"] == len([m for m in messages if m["role"] == "tool"])
            previous = 0
            for start, end in spans:
                turn = text[previous:start]
                assert turn.endswith("<|im_end|>"), "the model's end of turn is its own, before the tool messages"
                _, functions = CALL_FORMATS["hermes"].parse(turn.removesuffix("<|im_end|>"), {})
                block = text[start:end]
                assert block.startswith(opening) and block.endswith(closing)
                if all(f.problem is None and set(f.arguments) == {"expression"} for f in functions):
                    printed = [calculator.call(f.arguments["expression"]).output for f in functions]
                    assert block == opening + "\n</tool_response>\n<tool_response>\n".join(printed) + closing
                calls += len(functions)
                previous = end
            assert messages[-1] == {"role": "assistant", "content": text[previous:]}
            if record["predicted_answer"] is not None:
                assert record["predicted_answer"] in text[previous:]
    assert calls >= 4
    summary = json.loads((results / "eval" / "summary.json").read_text())
    assert summary["caller"]["calc/tools"]["share_calling"] > 0
    settings = json.loads((results / "settings" / "generate" / "sft-round1" / "calc" / "test.json").read_text())
    assert [function["name"] for function in settings["tools"]["functions"]] == ["calculator"]
    assert "template_text" not in settings["tools"]  # the model's own template
    sft_data = list(iter_jsonl(results / "sft" / "sft-round1" / "data.jsonl"))
    assert sft_data and all(row["tool_output_spans"] for row in sft_data)


def test_the_shared_model_server_runs_the_callers_turns_as_a_direct_load_does(chat_tool_caller, tmp_path):
    """The caller behind the shared model server (generation.share_model): the server renders the prompt with the
    functions, each later turn continues the loop's token ids, and the samples (text, ids, mask, messages) equal a
    direct load's."""
    from snakeskills.backends.hf import HFBackend
    from snakeskills.backends.model_server import SharedModelBackend
    from snakeskills.backends.types import GenerationRequest, SamplingParams
    from snakeskills.prompts import encode_messages
    from snakeskills.tools.loop import CONVERSATION_FIELD, ToolLoop, tool_use

    folder, section = chat_tool_caller
    schemas = [function["schema"] for function in section.functions]
    options = hf_options(folder, dtype="float32", device="cpu", batch_size=4)
    sampling = SamplingParams(temperature=0.3, top_p=1.0, top_k=0, max_new_tokens=200)
    questions = [[{"role": "user", "content": problem}] for problem in ANSWERS]
    server = SharedModelBackend(
        backend="hf",
        options=options,
        chat_template=True,
        chat_template_kwargs={},
        functions=schemas,
        template=section.template_text,
        directory=str(tmp_path / "servers"),
        idle_seconds=3,
        jobs_per_load=64,
    )
    try:
        requests = [GenerationRequest(seed=seed, messages=tuple(q)) for seed in (0, 1) for q in questions]
        served = ToolLoop(server, tool_use(section)).generate(requests, sampling)
    finally:
        server.close()
    direct = HFBackend(**options)
    loaded = []
    for seed in (0, 1):
        for question in questions:
            ids = encode_messages(
                question,
                chat_template=True,
                chat_template_kwargs={},
                tokenizer=direct.tokenizer,
                functions=schemas,
                template=section.template_text,
            )
            loaded.append(GenerationRequest(seed=seed, prompt_token_ids=tuple(ids)))
    by_direct = ToolLoop(direct, tool_use(section)).generate(loaded, sampling)
    for by_server, by_load in zip(served, by_direct, strict=True):
        assert by_server.generation == by_load.generation
        assert by_server.token_ids == by_load.token_ids and by_server.model_token_mask == by_load.model_token_mask
        assert by_server.tools[CONVERSATION_FIELD] == by_load.tools[CONVERSATION_FIELD]
    assert sum(result.tools["code_rounds_executed"] for result in served) >= len(served)
