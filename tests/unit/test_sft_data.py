"""SFT's data: which judged samples become examples (snakeskills.training.sft_data)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import resolved_prompt

from snakeskills.errors import SnakeskillsError
from snakeskills.io import write_jsonl
from snakeskills.training.sft_data import select_sft_records

PROMPT = resolved_prompt(system="Solve.", user="Q: {problem}")


FILTERS = {
    "correct_only": True,
    "score": "symbolic_correct",
    "max_generation_tokens": 100,
    "dedup": True,
    "max_per_problem": 2,
}


def judged(id_: str, problem: str, generation: str, correct: bool = True, finish: str = "stop", tokens: int = 10):
    return {
        "id": id_,
        "problem": problem,
        "expected_answer": {"1+1": "2", "2+2": "4", "3+3": "6"}[problem],
        "generation": generation,
        "symbolic_correct": correct,
        "finish_reason": finish,
        "num_generated_tokens": tokens,
        "predicted_answer": None,
    }


@pytest.fixture
def judged_files(tmp_path) -> list[Path]:
    seed0 = [
        judged("p1", "1+1", "1+1=\\boxed{2}"),  # kept
        judged("p2", "2+2", "\\boxed{5}", correct=False),  # incorrect
        judged("p3", "3+3", "3+3=\\boxed{6}", finish="length"),  # truncated
        judged("p1", "1+1", "1+1=\\boxed{2}"),  # duplicate of the first
    ]
    seed1 = [
        judged("p1", "1+1", "long " * 50 + "\\boxed{2}", tokens=500),  # too long
        judged("p1", "1+1", "one and one: \\boxed{2}"),  # kept (second for p1)
        judged("p1", "1+1", "two: \\boxed{2}"),  # over the per-problem cap of 2
        judged("p2", "2+2", "2+2=\\boxed{4}"),  # kept
    ]
    write_jsonl(tmp_path / "seed0.jsonl", seed0)
    write_jsonl(tmp_path / "seed1.jsonl", seed1)
    return [tmp_path / "seed0.jsonl", tmp_path / "seed1.jsonl"]


def test_select_sft_records_filters(judged_files):
    records, counts = select_sft_records(judged_files, ["base", "base"], [PROMPT] * 2, FILTERS)
    assert counts == {
        "judged": 8,
        "incorrect": 1,
        "truncated": 1,
        "too_long": 1,
        "duplicate": 1,
        "over_per_problem_cap": 1,
        "kept": 3,
        "problems_covered": 2,
        "kept_by_source": {"base": 3},
    }
    assert [(r["id"], r["messages"][-1]["content"]) for r in records] == [
        ("p1", "1+1=\\boxed{2}"),
        ("p1", "one and one: \\boxed{2}"),
        ("p2", "2+2=\\boxed{4}"),
    ]
    assert records[0] == {
        "id": "p1",
        "problem": "1+1",
        "expected_answer": "2",
        "generated_by": "base",
        "messages": [
            {"role": "system", "content": "Solve."},
            {"role": "user", "content": "Q: 1+1"},
            {"role": "assistant", "content": "1+1=\\boxed{2}"},
        ],
    }
    for record in records:
        assert record["messages"][-1]["role"] == "assistant"
        assert json.dumps(record)  # serialisable as a JSONL row


def test_select_sft_records_relaxed_filters_still_drop_truncated(judged_files):
    relaxed = {
        "correct_only": False,
        "score": "symbolic_correct",
        "max_generation_tokens": None,
        "dedup": False,
        "max_per_problem": None,
    }
    records, counts = select_sft_records(judged_files, ["base", "base"], [PROMPT] * 2, relaxed)
    assert counts["truncated"] == 1
    assert counts["kept"] == 7
    assert counts["incorrect"] == counts["too_long"] == counts["duplicate"] == counts["over_per_problem_cap"] == 0
    assert counts["problems_covered"] == 2  # p3 only had a truncated generation
    assert "p3" not in {record["id"] for record in records}


def test_sft_examples_name_the_model_that_wrote_them_and_dedup_across_models(tmp_path):
    """A teacher's and a student's samples pool into one dataset: each example says who wrote it, and a
    generation both wrote is one example (the first file's)."""
    write_jsonl(tmp_path / "teacher.jsonl", [judged("p1", "1+1", "\\boxed{2}"), judged("p2", "2+2", "\\boxed{4}")])
    write_jsonl(
        tmp_path / "sft-round1.jsonl", [judged("p1", "1+1", "1+1=\\boxed{2}"), judged("p2", "2+2", "\\boxed{4}")]
    )
    paths = [tmp_path / "teacher.jsonl", tmp_path / "sft-round1.jsonl"]
    records, counts = select_sft_records(paths, ["teacher", "sft-round1"], [PROMPT] * 2, FILTERS)
    assert [(r["generated_by"], r["id"], r["messages"][-1]["content"]) for r in records] == [
        ("teacher", "p1", "\\boxed{2}"),
        ("teacher", "p2", "\\boxed{4}"),
        ("sft-round1", "p1", "1+1=\\boxed{2}"),
    ]
    assert counts["kept_by_source"] == {"teacher": 2, "sft-round1": 1} and counts["duplicate"] == 1
    with pytest.raises(SnakeskillsError, match="2 judged files but 1 sources"):
        select_sft_records(paths, ["teacher"], [PROMPT], FILTERS)


def test_select_sft_records_cap_of_one(judged_files):
    records, counts = select_sft_records(
        judged_files, ["base", "base"], [PROMPT] * 2, {**FILTERS, "max_per_problem": 1}
    )
    assert [(r["id"], r["messages"][-1]["content"]) for r in records] == [
        ("p1", "1+1=\\boxed{2}"),
        ("p2", "2+2=\\boxed{4}"),
    ]
    # dedup is checked before the cap: the repeated first generation counts as a duplicate
    assert counts["duplicate"] == 1
    assert counts["over_per_problem_cap"] == 2


@pytest.mark.parametrize(
    ("score", "kept"),
    [("symbolic_correct", ["a", "b"]), ("judge_correct", ["a", "c"]), ("both", ["a"])],
)
def test_select_sft_records_by_the_chosen_verdict(tmp_path, score, kept):
    """sft.filters.score picks which judge's verdict decides what SFT learns from."""
    rows = []
    for generation, symbolic, llm in [("a", True, True), ("b", True, False), ("c", False, True), ("d", False, False)]:
        rows.append({**judged("p1", "1+1", generation, correct=symbolic), "judge_correct": llm, "judgement": "..."})
    write_jsonl(tmp_path / "judged.jsonl", rows)
    records, counts = select_sft_records([tmp_path / "judged.jsonl"], ["base"], [PROMPT], {**FILTERS, "score": score})
    assert [record["messages"][-1]["content"] for record in records] == kept
    assert counts["incorrect"] == 4 - len(kept) and counts["kept"] == len(kept)


def test_select_sft_records_without_the_llm_verdict_names_the_file_and_row(judged_files):
    with pytest.raises(SnakeskillsError, match=r"seed0\.jsonl: row 1: no 'judge_correct' field.*judge\.llm"):
        select_sft_records(judged_files, ["base", "base"], [PROMPT] * 2, {**FILTERS, "score": "both"})


def test_an_example_keeps_the_spans_of_its_tool_outputs(tmp_path):
    """A generation that called a tool keeps its tool outputs' spans (of the assistant's text, which the trainer
    masks out of the loss); one that called none has no such key, as before tools. With parse_reasoning the text
    trained on and its spans are the whole transcript (``_full_generation``)."""
    called = "<calc>1+1</calc><out>2</out>\\boxed{2}"
    spans = [[called.index("<out>"), called.index("\\boxed")]]
    thought = "<think>" + called.replace("1+1", "3+3").replace("2", "6") + "</think>\\boxed{6}"
    thought_spans = [[thought.index("<out>"), thought.index("</out>") + len("</out>")]]
    rows = [
        {**judged("p1", "1+1", called), "tool_output_spans": spans},
        judged("p2", "2+2", "2+2=\\boxed{4}"),
        {**judged("p3", "3+3", "\\boxed{6}"), "_full_generation": thought, "tool_output_spans": thought_spans},
    ]
    write_jsonl(tmp_path / "judged.jsonl", rows)
    records, _ = select_sft_records([tmp_path / "judged.jsonl"], ["base"], [PROMPT], FILTERS)
    assert [(r["messages"][-1]["content"], r.get("tool_output_spans")) for r in records] == [
        (called, spans),
        ("2+2=\\boxed{4}", None),
        (thought, thought_spans),
    ]
    assert "tool_output_spans" not in records[1]
    assert [called[start:end] for start, end in spans] == ["<out>2</out>"]
    assert [thought[start:end] for start, end in thought_spans] == ["<out>6</out>"]

    write_jsonl(tmp_path / "past.jsonl", [{**judged("p1", "1+1", "\\boxed{2}"), "tool_output_spans": [[0, 99]]}])
    with pytest.raises(SnakeskillsError, match=r"past\.jsonl: row 1: tool_output_spans: .* ends past the text"):
        select_sft_records([tmp_path / "past.jsonl"], ["base"], [PROMPT], FILTERS)


def test_no_examples_because_every_kept_one_was_cut_off_says_so(tmp_path):
    from snakeskills.training.sft_data import write_sft_dataset

    write_jsonl(tmp_path / "seed0.jsonl", [judged("p1", "1+1", "1+1=\\boxed{2", finish="length")])
    with pytest.raises(
        SnakeskillsError, match=r"1 generations that the filters would keep were cut off .*max_new_tokens"
    ):
        write_sft_dataset(
            [tmp_path / "seed0.jsonl"], ["base"], [PROMPT], FILTERS, tmp_path / "data.jsonl", tmp_path / "stats.json"
        )
