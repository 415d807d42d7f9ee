"""LLM-as-a-judge through the real hf backend (an untrained tiny Llama as the judge model)."""

from __future__ import annotations

import pytest
from conftest import asked_model, hf_backend
from interruptions import run_killed_after_batches

from snakeskills.backends import SamplingParams
from snakeskills.errors import SnakeskillsError
from snakeskills.generation.resumable import progress_path_for
from snakeskills.io import read_jsonl, write_jsonl
from snakeskills.judging.llm_judge import (
    EXACT_MATCH_JUDGEMENT,
    NO_ANSWER_JUDGEMENT,
    certain_judgement,
    llm_judge_chunk,
    parse_judgement,
)
from snakeskills.prompts import resolve_prompt

# a short prompt inside the tiny model's character set; real runs use the shipped judge-math template
PROMPT = resolve_prompt(
    {
        "template": None,
        "system": None,
        "user": "{expected_answer}?{predicted_answer}:",
        "num_few_shot": None,
        "chat_template": False,
        "chat_template_kwargs": {},
    }
)
SAMPLING = SamplingParams(temperature=1.0, top_p=1.0, top_k=0, max_new_tokens=8)


@pytest.mark.parametrize(
    ("text", "verdict"),
    [
        ("Reasoning: same.\nJudgement: Yes", True),
        ("Judgement: No", False),
        ("judgement: yes", True),
        ("**Judgement**: Yes", False),  # not the expected format
        ("Judgement: **Yes**", True),
        ("Judgement: Yes\nWait, actually... Judgement: No", False),  # the last verdict counts
        ("Judgement: Yesterday", False),
        ("I think yes.", False),  # no judgement line: No
        ("", False),
    ],
)
def test_parse_judgement(text, verdict):
    assert parse_judgement(text) is verdict


def test_certain_judgements_skip_the_model():
    assert certain_judgement({"predicted_answer": None, "expected_answer": "5"}) == NO_ANSWER_JUDGEMENT
    assert certain_judgement({"predicted_answer": "1 / 2", "expected_answer": "1/2"}) == EXACT_MATCH_JUDGEMENT
    assert certain_judgement({"predicted_answer": "0.5", "expected_answer": "1/2"}) is None
    assert parse_judgement(NO_ANSWER_JUDGEMENT) is False
    assert parse_judgement(EXACT_MATCH_JUDGEMENT) is True


@pytest.fixture(scope="module")
def backend(tiny_checkpoint):

    return hf_backend(str(tiny_checkpoint), batch_size=8, threads=1)


@pytest.fixture()
def judged_chunk(tmp_path):
    rows = []
    for index in range(30):
        predicted = [None, str(index), f"{index}.0"][index % 3]  # no answer, exact match, needs the model
        rows.append(
            {
                "id": f"p{index}",
                "problem": f"{index}+0",
                "expected_answer": str(index),
                "generation": "...",
                "predicted_answer": predicted,
                "symbolic_correct": predicted is not None,
                "random_seed": 1,
            }
        )
    path = tmp_path / "judged.jsonl"
    write_jsonl(path, rows)
    return path


def _judge(backend, judged_chunk, output):
    return llm_judge_chunk(
        asked_model(backend, PROMPT, SAMPLING, rows_per_flush=6),
        judged_path=judged_chunk,
        output_path=output,
    )


def test_model_is_called_only_where_the_verdict_is_uncertain(backend, judged_chunk, tmp_path):
    output = tmp_path / "out.jsonl"
    counts = _judge(backend, judged_chunk, output)
    assert counts == {"rows": 30, "resumed_rows": 0, "processed_rows": 30, "model_calls": 10, "skipped_calls": 20}
    rows = read_jsonl(output)
    inputs = read_jsonl(judged_chunk)
    for row, source in zip(rows, inputs, strict=True):
        assert {key: row[key] for key in source} == source  # input fields kept
        assert isinstance(row["judgement"], str) and isinstance(row["judge_correct"], bool)
        assert row["judge_correct"] is parse_judgement(row["judgement"])
    assert [row["judgement"] for row in rows[0::3]] == [NO_ANSWER_JUDGEMENT] * 10
    assert [row["judge_correct"] for row in rows[1::3]] == [True] * 10
    model_judgements = [row["judgement"] for row in rows[2::3]]
    assert NO_ANSWER_JUDGEMENT not in model_judgements and EXACT_MATCH_JUDGEMENT not in model_judgements


def test_resumed_judging_equals_uninterrupted(backend, judged_chunk, tmp_path, monkeypatch):
    reference = tmp_path / "reference.jsonl"
    _judge(backend, judged_chunk, reference)
    resumed = tmp_path / "resumed.jsonl"
    run_killed_after_batches(backend, monkeypatch, lambda: _judge(backend, judged_chunk, resumed), batches=2)
    assert len(read_jsonl(progress_path_for(resumed))) == 1 + 12  # the fingerprint line, two flushes of rows
    counts = _judge(backend, judged_chunk, resumed)
    assert counts["resumed_rows"] == 12 and counts["processed_rows"] == 18 and counts["model_calls"] == 6
    assert resumed.read_bytes() == reference.read_bytes()
    assert not progress_path_for(resumed).exists()


def test_rows_missing_fields_name_the_file_and_line(backend, tmp_path):
    path = tmp_path / "judged.jsonl"
    write_jsonl(
        path,
        [
            {"id": "a", "problem": "1", "expected_answer": "1", "predicted_answer": "1", "random_seed": 0},
            {"id": "b", "problem": "1", "expected_answer": "1", "random_seed": 0},
        ],
    )
    with pytest.raises(SnakeskillsError, match=rf"{path}:2: .*'predicted_answer'"):
        _judge(backend, path, tmp_path / "out.jsonl")
    assert not (tmp_path / "out.jsonl").exists()
