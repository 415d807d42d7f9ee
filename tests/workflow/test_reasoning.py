"""Reasoning models (generation.parse_reasoning): the answer is read after the thinking, SFT trains on the whole text.

Fast tests: the fields a text becomes (NeMo-Skills' parse_reasoning), what the job log says, the SFT text, a
judge's verdict read after its thinking, the reasoning an OpenAI-compatible server returns apart (on the openai
package's own message type). Slow test: the tiny default bootstrapped to think before it answers
(``<think>46</think>\\boxed{46}``) through the whole loop, generation to the tuned model.
"""

from __future__ import annotations

import http.server
import json
import logging

import pytest
from conftest import asked_model, resolved_prompt, run_snakemake, shrunk_default_config, write_config
from servers import JsonHandler

from snakeskills.generation.model_job import ReasoningReport, text_fields
from snakeskills.io import read_jsonl, write_jsonl
from snakeskills.judging.extractors import extract_boxed
from snakeskills.judging.llm_judge import parse_judgement
from snakeskills.training.sft_data import select_sft_records

PARSE = {"parse_reasoning": True, "end_reasoning_string": "</think>"}
KEEP = {"parse_reasoning": False, "end_reasoning_string": "</think>"}


@pytest.mark.parametrize(
    ("text", "answer", "finished"),
    [
        ("<think>2+2 is 4</think>\n\nThe answer is \\boxed{4}.", "The answer is \\boxed{4}.", True),
        ("Okay, 2+2... </think>\\boxed{4}", "\\boxed{4}", True),  # an R1-style template opened the thinking
        ("<think>maybe \\boxed{5}?</think> wait </think> \\boxed{4} ", "\\boxed{4}", True),  # after the last end
        ("<think>2+2 is \\boxed{5}, let me check", "", False),  # cut by max_new_tokens: no answer
        ("", "", False),  # a soft failure
    ],
)
def test_text_fields_split_the_answer_from_the_thinking(text, answer, finished):
    assert text_fields(text, "generation", PARSE) == {
        "generation": answer,
        "_full_generation": text,
        "_generation_finished_thinking": finished,
    }
    assert text_fields(text, "generation", KEEP) == {"generation": text}
    custom = {"parse_reasoning": True, "end_reasoning_string": "<|end_of_thought|>"}
    assert text_fields("a<|end_of_thought|> b", "judgement", custom)["judgement"] == "b"


def test_a_judge_that_never_ends_its_thinking_gives_no_verdict():
    """A verdict the judge only considered while thinking is not its verdict."""
    text = "<think>The answers differ... Judgement: Yes? No, let me recompute"
    assert parse_judgement(text) is True
    assert parse_judgement(text_fields(text, "judgement", PARSE)["judgement"]) is False
    done = text + " 1/2 = 0.5.</think>Judgement: Yes"
    assert parse_judgement(text_fields(done, "judgement", PARSE)["judgement"]) is True


def test_the_log_counts_finished_thinking_and_warns_where_parsing_is_off(caplog):
    caplog.set_level(logging.INFO, logger="snakeskills.generation.model_job")
    report = ReasoningReport("generation", PARSE, "generate chunk0-of-1.jsonl")
    report.add([text_fields(text, "generation", PARSE) for text in ("<think>a</think>1", "<think>b", "</think>2")])
    report.log()
    assert "generate chunk0-of-1.jsonl: 2 of 3 texts ended their thinking with '</think>'; the other 1" in caplog.text
    caplog.clear()
    report = ReasoningReport("generation", PARSE, "job")
    report.add([text_fields("no thinking here", "generation", PARSE)])
    report.log()
    (record,) = caplog.records
    assert record.levelname == "WARNING" and "is end_reasoning_string right" in record.message
    caplog.clear()
    report = ReasoningReport("generation", KEEP, "job")
    report.add([{"generation": "plain"}])
    assert not caplog.records
    report.add([{"generation": "<think>x</think>1"}, {"generation": "<think>y</think>2"}])
    report.log()
    (record,) = caplog.records  # once per job
    assert record.levelname == "WARNING" and "set parse_reasoning: true" in record.message


def test_sft_trains_on_the_whole_text_of_a_reasoning_model(tmp_path):
    judged = tmp_path / "judged.jsonl"
    rows = [
        {"id": "p0", "problem": "1+1", "expected_answer": "2", "symbolic_correct": True, "finish_reason": "stop"},
        {"id": "p1", "problem": "1+2", "expected_answer": "3", "symbolic_correct": True, "finish_reason": "stop"},
    ]
    rows[0].update(text_fields("<think>1+1</think>\\boxed{2}", "generation", PARSE), num_generated_tokens=9)
    rows[1].update(generation="\\boxed{3}", num_generated_tokens=4)  # a model that does not think
    write_jsonl(judged, rows)
    prompt = resolved_prompt(user="{problem}=")
    filters = {"correct_only": True, "score": "symbolic_correct", "max_generation_tokens": None}
    filters.update(dedup=True, max_per_problem=None)
    records, counts = select_sft_records([judged], ["base"], [prompt], filters)
    assert [record["messages"][-1]["content"] for record in records] == ["<think>1+1</think>\\boxed{2}", "\\boxed{3}"]
    assert counts["kept"] == 2 and counts["unfinished_thinking"] == 0


def test_no_sft_data_from_a_model_that_never_ends_its_thinking_says_why(tmp_path):
    from snakeskills.errors import SnakeskillsError
    from snakeskills.training.sft_data import write_sft_dataset

    row = {"id": "p0", "problem": "1+1", "expected_answer": "2", "symbolic_correct": False, "finish_reason": "stop"}
    row.update(text_fields("2", "generation", PARSE), num_generated_tokens=1)  # SmolLM2 answers without thinking
    write_jsonl(tmp_path / "judged.jsonl", [row])
    prompt = resolved_prompt(user="{problem}=")
    filters = {"correct_only": True, "score": "symbolic_correct", "max_generation_tokens": None}
    filters.update(dedup=True, max_per_problem=None)
    with pytest.raises(SnakeskillsError, match="none of the 1 generations ended its thinking"):
        write_sft_dataset(
            [tmp_path / "judged.jsonl"], ["base"], [prompt], filters, tmp_path / "d.jsonl", tmp_path / "s"
        )


def test_reasoning_a_server_returns_apart_is_kept():
    """vLLM with --reasoning-parser (and DeepSeek's API) return ``reasoning_content`` beside ``content``."""
    from openai.types.chat import ChatCompletionMessage

    from snakeskills.backends.openai import split_off_reasoning

    split = ChatCompletionMessage.model_validate(
        {"role": "assistant", "content": "\\boxed{4}", "reasoning_content": "2+2 is 4"}
    )
    assert split_off_reasoning(split) == "2+2 is 4"
    newer = ChatCompletionMessage.model_validate({"role": "assistant", "content": "4", "reasoning": "so 4"})
    assert split_off_reasoning(newer) == "so 4"
    whole = ChatCompletionMessage.model_validate({"role": "assistant", "content": "<think>x</think>4"})
    assert split_off_reasoning(whole) is None


# An R1-style chat template (DeepSeek-R1's distilled models behave so): the generation prompt opens the thinking, and
# an assistant turn rendered by the template loses what comes before "</think>".
R1_STYLE_TEMPLATE = (
    "{% for message in messages %}"
    "{% if message['role'] == 'user' %}<|im_start|>User: {{ message['content'] }}<|im_end|>\n"
    "{% else %}<|im_start|>Assistant: {{ message['content'].split('</think>')[-1] }}<|im_end|>\n{% endif %}"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>Assistant: <think>\n{% endif %}"
)


def test_sft_teaches_the_thinking_a_template_would_drop(smollm2, tmp_path):
    """On SmolLM2's real BPE tokenizer: the SFT example is the generation prompt's ids, exactly as generation built
    them (the thinking opened by the template), then the whole generated text and EOS. Rendering the conversation
    with the template instead would train on the answer alone."""
    from snakeskills.models.loading import load_tokenizer
    from snakeskills.prompts import model_input_ids
    from snakeskills.training.sft import to_prompt_completion, tokenize_prompt_completion

    tokenizer = load_tokenizer(smollm2, trust_remote_code=False)
    tokenizer.chat_template = R1_STYLE_TEMPLATE
    prompt = resolved_prompt(template="generic-math", chat_template=True)
    record = {"id": "p0", "problem": "What is 17+25?", "expected_answer": "42"}
    prompt_ids = model_input_ids(prompt, record, tokenizer)
    assert tokenizer.decode(prompt_ids).endswith("Assistant: <think>\n")
    text = "17+25: 7+5=12, carry 1; 1+2+1=4. So 42.\n</think>\n\nThe answer is $\\boxed{42}$."
    row = {**record, **text_fields(text, "generation", PARSE), "symbolic_correct": True, "finish_reason": "stop"}
    assert row["generation"] == "The answer is $\\boxed{42}$."
    filters = {"correct_only": True, "score": "symbolic_correct", "max_generation_tokens": None}
    filters.update(dedup=True, max_per_problem=None)
    write_jsonl(tmp_path / "judged.jsonl", [{**row, "num_generated_tokens": 30}])
    records, _ = select_sft_records([tmp_path / "judged.jsonl"], ["r1"], [prompt], filters)
    example = to_prompt_completion(records[0], chat_template=True, chat_template_kwargs={}, tokenizer=tokenizer)
    assert example == {"prompt_ids": prompt_ids, "completion": text}
    (tokenized,) = tokenize_prompt_completion(tokenizer, [example], max_length=512)
    trained = tokenized["input_ids"]
    assert trained[: len(prompt_ids)] == prompt_ids
    assert tokenizer.decode(trained[len(prompt_ids) :]) == text + tokenizer.eos_token
    assert sum(tokenized["completion_mask"]) == len(trained) - len(prompt_ids)
    rendered = tokenizer.apply_chat_template(records[0]["messages"], tokenize=False)
    assert "7+5=12" not in rendered  # what a template-rendered example would have lost


# ---------------------------------------------------------------- a tiny model that thinks, through the whole loop


@pytest.fixture(scope="module")
def thinking_run(tmp_path_factory):
    """The tiny default bootstrapped on ``<think>{answer}</think>\\boxed{answer}``: it thinks (finds the sum)
    before it answers (restates it), as a reasoning model does; generated with parse_reasoning, tuned one round."""
    workdir = tmp_path_factory.mktemp("thinking")
    config = shrunk_default_config({"bootstrap": 4800, "validation": 200, "train": 1000, "test": 200})
    config["experiment"] = "thinking"
    config["tiny_model"]["completion"] = "<think>{expected_answer}</think>\\boxed{{{expected_answer}}}"
    config["tiny_model"]["training"]["max_length"] = 48
    config["generation"]["parse_reasoning"] = True
    config["generation"]["sampling"]["max_new_tokens"] = 32
    configfile = write_config(workdir / "thinking.yaml", config)
    process = run_snakemake(workdir, "--cores", "2", configfile=configfile)
    assert process.returncode == 0, process.stdout[-5000:] + process.stderr[-5000:]
    return workdir / "results" / "thinking"


def test_a_thinking_model_is_judged_on_its_answer_and_learns_from_its_whole_text(thinking_run):
    generated = read_jsonl(thinking_run / "judge/base/arithmetic/test/output-rs0.jsonl")
    finished = [row for row in generated if row["_generation_finished_thinking"]]
    assert len(finished) > 0.8 * len(generated)
    for row in generated:
        thinking, end, answer = row["_full_generation"].rpartition("</think>")
        assert row["generation"] == (answer.strip() if end else "")
        assert "</think>" not in row["generation"]
        if not end:
            assert row["predicted_answer"] is None and not row["symbolic_correct"]
    # sampled at temperature 1, the character-level model now and then garbles a letter of its opening tag
    opened = sum(row["_full_generation"].startswith("<think>") for row in finished)
    assert opened >= 0.95 * len(finished), (opened, len(finished))
    sft = [record["messages"][-1]["content"] for record in read_jsonl(thinking_run / "sft/sft-round1/data.jsonl")]
    whole_texts = {
        row["_full_generation"]
        for path in (thinking_run / "judge/base/arithmetic/train").glob("output-rs*.jsonl")
        for row in read_jsonl(path)
    }
    assert sft and all(text in whole_texts and "</think>\\boxed{" in text for text in sft), "the whole text"
    assert sum(text.startswith("<think>") for text in sft) >= 0.95 * len(sft)
    tuned = read_jsonl(thinking_run / "judge/sft-round1/arithmetic/test/output-rs0.jsonl")
    assert sum(row["_generation_finished_thinking"] for row in tuned) > 0.9 * len(tuned)  # it still thinks
    summary = json.loads((thinking_run / "eval/summary.json").read_text())
    pass_at_1 = {model: summary[model]["arithmetic"]["pass@1[avg-of-2]"]["symbolic_correct"] for model in summary}
    assert pass_at_1["sft-round1"] > pass_at_1["base"] + 5, pass_at_1  # measured: 42.00 -> 54.25
    logs = [path.read_text() for path in (thinking_run / "logs").rglob("*.log")]
    assert any("texts ended their thinking with '</think>'" in log for log in logs)


class ReasoningParserHandler(JsonHandler):
    """Answers /v1/chat/completions as vLLM with ``--reasoning-parser deepseek_r1`` does: the thinking in
    ``reasoning_content``, the answer (after ``</think>``) in ``content``; a request for 3 tokens is cut off while
    thinking (content null, finish_reason length)."""

    def do_POST(self):  # noqa: N802 - http.server's naming
        request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        problem = request["messages"][-1]["content"]
        a, b = (int(part) for part in problem.rstrip("=").split("+"))
        cut = request["max_tokens"] == 3
        message = {"role": "assistant", "content": None if cut else f"\n\n\\boxed{{{a + b}}}"}
        message["reasoning_content"] = (
            f"{a} plus {b}" if cut else f"{a} plus {b} is {a + b}, so \\boxed{{{a}}} is wrong.\n"
        )
        body = {
            "id": "x",
            "object": "chat.completion",
            "created": 0,
            "model": request["model"],
            "choices": [{"index": 0, "message": message, "finish_reason": "length" if cut else "stop"}],
            "usage": {"prompt_tokens": 5, "completion_tokens": 3 if cut else 12, "total_tokens": 17},
        }
        self.send_json(200, body)


@pytest.mark.parametrize("max_new_tokens", [16, 3], ids=["answered", "cut-off-while-thinking"])
def test_parse_reasoning_with_a_server_that_splits_the_thinking_off(tmp_path, max_new_tokens):
    """A stub stands in for vLLM's reasoning parser (vLLM cannot run on this CPU-only machine). The answer comes
    without the end string: with parse_reasoning it is the generation as it is, not an empty one, and the thinking
    is kept as reasoning_content; a text cut off while thinking answers nothing and did not finish its thinking."""
    import threading

    from conftest import openai_backend

    from snakeskills.backends import SamplingParams
    from snakeskills.generation.generate import generate_chunk

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), ReasoningParserHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    write_jsonl(tmp_path / "split.jsonl", [{"id": f"p{a}", "problem": f"{a}+{a + 1}="} for a in range(3)])
    try:
        backend = openai_backend(
            base_url=f"http://127.0.0.1:{server.server_address[1]}/v1", model="r1", api="chat", max_concurrency=2
        )
        generate_chunk(
            asked_model(
                backend,
                resolved_prompt(user="{problem}", chat_template=True),
                SamplingParams(temperature=0.6, top_p=0.95, top_k=0, max_new_tokens=max_new_tokens),
                rows_per_flush=3,
                reasoning=PARSE,
            ),
            prepared_path=tmp_path / "split.jsonl",
            output_path=tmp_path / "out.jsonl",
            chunk_index=0,
            num_chunks=1,
            random_seed=0,
        )
    finally:
        server.shutdown()
    rows = read_jsonl(tmp_path / "out.jsonl")
    if max_new_tokens == 3:
        assert [row["generation"] for row in rows] == ["", "", ""]
        assert not any(row["_generation_finished_thinking"] for row in rows)
        return
    assert [row["generation"] for row in rows] == ["\\boxed{1}", "\\boxed{3}", "\\boxed{5}"]
    assert all(row["_generation_finished_thinking"] for row in rows)
    assert rows[1]["reasoning_content"] == "1 plus 2 is 3, so \\boxed{1} is wrong.\n"
    assert rows[1]["_full_generation"] == "\n\n\\boxed{3}"
    assert [extract_boxed(row["generation"]) for row in rows] == ["1", "3", "5"]
