"""Learning from rewards and preferences, unit by unit: the pass-rate filter, DPO's pairs (problems with only one
kind of sample, duplicates, several seeds, cut-off samples), their LLaMA-Factory export, GRPO's problems, and
GRPO's reward, which must equal the judge stage's verdict on the same text (boxed math, no answer, multiple choice
on real SmolLM2 answers, code run in the sandbox)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import rule_judge

from snakeskills.errors import SnakeskillsError
from snakeskills.io import iter_jsonl, read_json, write_jsonl
from snakeskills.judging.judge import judge_records
from snakeskills.plan.config import default_config
from snakeskills.plan.sections import benchmark_judge
from snakeskills.training.grpo import REWARD_TERMS, JudgeRewards
from snakeskills.training.preference_pairs import (
    pair_indices,
    select_pairs,
    write_pairwise_exports,
    write_preference_pairs,
)
from snakeskills.training.rl_problems import write_rl_problems
from snakeskills.training.samples import group_problems, pass_rate_counts
from snakeskills.training.sft_data import select_sft_records
from tests.conftest import resolved_prompt

PROMPT = resolved_prompt(system="Add.", user="{problem}=")
PAIRS = {"max_per_problem": None, "score": "symbolic_correct", "include_truncated": True}
EVERY_PROBLEM = {"min": 0.0, "max": 1.0}
ANSWERS = {"1+1": "2", "2+2": "4", "3+3": "6", "4+4": "8"}


def sample(problem: str, answer: str, *, seed: int = 0, finish: str = "stop") -> dict:
    expected = ANSWERS[problem]
    return {
        "id": f"p{problem[0]}",
        "problem": problem,
        "expected_answer": expected,
        "generation": f"\\boxed{{{answer}}}",
        "predicted_answer": answer,
        "symbolic_correct": answer == expected,
        "finish_reason": finish,
        "num_generated_tokens": 4,
        "random_seed": seed,
    }


@pytest.fixture
def seed_files(tmp_path) -> list[Path]:
    """Two seeds of four problems: 1+1 half right (with a duplicate wrong text), 2+2 always right, 3+3 never
    right, 4+4 right once, wrong once but cut off."""
    seeds = [
        [sample("1+1", "2"), sample("2+2", "4"), sample("3+3", "5"), sample("4+4", "8"), sample("1+1", "3")],
        [
            sample("1+1", "3", seed=1),
            sample("2+2", "4", seed=1),
            sample("3+3", "7", seed=1),
            sample("4+4", "9", seed=1, finish="length"),
            sample("1+1", "11", seed=1),
        ],
    ]
    paths = []
    for index, rows in enumerate(seeds):
        paths.append(tmp_path / f"output-rs{index}.jsonl")
        write_jsonl(paths[-1], rows)
    return paths


def test_pair_indices_use_every_text_before_any_twice():
    assert pair_indices(2, 3, None) == [(0, 0), (1, 1), (0, 2), (1, 0), (0, 1), (1, 2)]
    assert pair_indices(3, 1, None) == [(0, 0), (1, 0), (2, 0)]
    assert len(set(pair_indices(4, 6, None))) == 24, "every combination once"
    assert pair_indices(2, 3, 3) == [(0, 0), (1, 1), (0, 2)]
    assert len(set(pair_indices(2, 4, None))) == 8, "lcm 4 < 8 combinations: the second cycle shifts"
    used = pair_indices(3, 5, 5)
    assert {chosen for chosen, _ in used} == {0, 1, 2} and {rejected for _, rejected in used} == {0, 1, 2, 3, 4}


def test_pairs_from_judged_samples(seed_files):
    records, counts = select_pairs(seed_files, ["add", "add"], [PROMPT] * 2, PAIRS, EVERY_PROBLEM)
    pairs = {(r["id"], r["chosen"][0]["content"], r["rejected"][0]["content"]) for r in records}
    # 1+1: one correct text, two distinct wrong ones (the repeated "3" counted once); 4+4: the cut-off wrong answer
    assert pairs == {
        ("p1", "\\boxed{2}", "\\boxed{3}"),
        ("p1", "\\boxed{2}", "\\boxed{11}"),
        ("p4", "\\boxed{8}", "\\boxed{9}"),
    }
    assert counts["only_correct"] == 1 and counts["only_incorrect"] == 1  # 2+2 and 3+3: no pair
    assert counts["duplicate"] == 2  # 1+1's second "3"; 2+2's second "4"
    assert counts["problems_paired"] == 2 and counts["pairs"] == 3 and counts["judged"] == 10
    record = records[0]
    assert record["prompt"] == [{"role": "system", "content": "Add."}, {"role": "user", "content": "1+1="}]
    assert record["chosen"][0]["role"] == record["rejected"][0]["role"] == "assistant"
    assert record["expected_answer"] == "2" and record["benchmark"] == "add"


def test_pairs_leave_out_cut_off_samples_when_asked(seed_files):
    records, counts = select_pairs(
        seed_files, ["add", "add"], [PROMPT] * 2, {**PAIRS, "include_truncated": False}, EVERY_PROBLEM
    )
    assert {r["id"] for r in records} == {"p1"}
    assert counts["truncated"] == 1 and counts["only_correct"] == 2


def test_pairs_per_problem_cap_and_pass_rate_filter(seed_files):
    records, _ = select_pairs(seed_files, ["add", "add"], [PROMPT] * 2, {**PAIRS, "max_per_problem": 1}, EVERY_PROBLEM)
    assert sorted(r["id"] for r in records) == ["p1", "p4"]
    # 1+1 is solved by 1 of 4 samples, 4+4 by 1 of 2: a minimum pass rate of 0.5 keeps 4+4 (and 2+2, unpaired)
    records, counts = select_pairs(seed_files, ["add", "add"], [PROMPT] * 2, PAIRS, {"min": 0.5, "max": 1.0})
    assert {r["id"] for r in records} == {"p4"}
    assert counts["problems_in_pass_rate"] == 2 and counts["problems_below_pass_rate"] == 2


def test_no_pairs_is_a_clear_error(tmp_path):
    path = tmp_path / "output-rs0.jsonl"
    write_jsonl(path, [sample("2+2", "4"), sample("3+3", "5")])
    with pytest.raises(SnakeskillsError, match="no DPO pairs: no train problem has both"):
        write_preference_pairs([path], ["add"], [PROMPT], PAIRS, EVERY_PROBLEM, tmp_path / "p.jsonl", tmp_path / "s")


def test_pairs_exported_for_llama_factory(seed_files, tmp_path):
    pairs_path, stats_path = tmp_path / "pairs.jsonl", tmp_path / "stats.json"
    write_preference_pairs(seed_files, ["add", "add"], [PROMPT] * 2, PAIRS, EVERY_PROBLEM, pairs_path, stats_path)
    count = write_pairwise_exports(
        pairs_path,
        pairwise_path=tmp_path / "pairwise.json",
        dataset_info_path=tmp_path / "dataset_info.json",
        dataset_name="demo-dpo-round1",
    )
    assert count == 3 == read_json(stats_path)["pairs"]
    example = read_json(tmp_path / "pairwise.json")[0]
    assert example == {
        "instruction": "1+1=",
        "input": "",
        "chosen": "\\boxed{2}",
        "rejected": "\\boxed{3}",
        "system": "Add.",
    }
    info = read_json(tmp_path / "dataset_info.json")["demo-dpo-round1"]
    assert info["ranking"] is True and info["formatting"] == "alpaca"
    assert info["columns"]["chosen"] == "chosen" and info["columns"]["system"] == "system"


def test_pass_rates_and_grpo_problems(seed_files, tmp_path):
    problems = group_problems(seed_files, ["add", "add"], [PROMPT] * 2, "symbolic_correct")
    assert {p.row["id"]: p.pass_rate for p in problems} == {"p1": 0.25, "p2": 1.0, "p3": 0.0, "p4": 0.5}
    counts = pass_rate_counts(problems, {"min": 0.1, "max": 0.9})
    assert counts["problems_in_pass_rate"] == 2
    assert counts["problems_never_solved"] == counts["problems_always_solved"] == 1
    output = tmp_path / "problems.jsonl"
    write_rl_problems(seed_files, ["add", "add"], [PROMPT] * 2, {"min": 0.1, "max": 0.9}, output, tmp_path / "s.json")
    rows = list(iter_jsonl(output))
    assert [row["id"] for row in rows] == ["p1", "p4"]
    assert set(rows[0]) == {"id", "problem", "expected_answer", "benchmark", "prompt"}, "no sample fields"
    with pytest.raises(SnakeskillsError, match="no GRPO problems"):
        write_rl_problems(seed_files, ["add"] * 2, [PROMPT] * 2, {"min": 0.6, "max": 0.9}, output, tmp_path / "s")


def test_sft_pass_rate_filter_counts_what_it_drops(seed_files):
    filters = {"correct_only": True, "score": "symbolic_correct", "max_generation_tokens": None, "dedup": True}
    filters["max_per_problem"] = None
    everything, _ = select_sft_records(seed_files, ["base"] * 2, [PROMPT] * 2, filters)
    assert sorted(r["id"] for r in everything) == ["p1", "p2", "p4"]
    records, counts = select_sft_records(seed_files, ["base"] * 2, [PROMPT] * 2, filters, {"min": 0.0, "max": 0.9})
    assert sorted(r["id"] for r in records) == ["p1", "p4"], "2+2, always solved, is left out"
    assert counts["problems_outside_pass_rate"] == 1 and counts["outside_pass_rate"] == 2


def rewards_of(judge: dict, rows: list[dict], completions: list[str], **weights) -> dict[str, list[float]]:
    """Each reward term GRPO's trainer would compute for these completions of these problems."""
    reward = JudgeRewards({"bench": judge}, {"parse_reasoning": False}, max_new_tokens=64, num_workers=2)
    columns = [json.dumps({**row, "benchmark": "bench"}) for row in rows]
    ids = [[0] * len(text) for text in completions]
    return {
        name: function(prompts=[""] * len(rows), completions=completions, completion_ids=ids, row=columns)
        for name, function in zip(REWARD_TERMS, reward.functions(), strict=True)
    }


def test_reward_is_the_judges_verdict_on_math():
    config = default_config()
    judge = benchmark_judge(config, "arithmetic")
    rows = [{"id": str(i), "problem": "1/2+1/4", "expected_answer": "3/4"} for i in range(4)]
    completions = ["\\boxed{0.75}", "\\boxed{3/4}", "the answer is 3/4", "\\boxed{1}"]
    rewards = rewards_of({**judge, "extraction": "boxed"}, rows, completions)
    verdicts = judge_records(
        [{**row, "generation": text} for row, text in zip(rows, completions, strict=True)],
        rule_judge(judge, extraction="boxed"),
        num_workers=1,
    )
    assert rewards["correct"] == [float(v["symbolic_correct"]) for v in verdicts] == [1.0, 1.0, 0.0, 0.0]
    assert rewards["answer_format"] == [1.0, 1.0, 0.0, 1.0], "no boxed answer: no answer read"
    assert rewards["length"] == [len(text) / 64 for text in completions]


def test_reward_is_the_judges_verdict_on_real_multiple_choice_answers():
    path = Path(__file__).parents[1] / "data" / "smollm2-multiple-choice.jsonl"
    rows = [{"id": str(index), **row} for index, row in enumerate(iter_jsonl(path))]
    judge = {"extraction": "multichoice", "regex": None}
    completions = [row.pop("generation") for row in rows]
    rewards = rewards_of(judge, rows, completions)
    verdicts = judge_records(
        [{**row, "generation": text} for row, text in zip(rows, completions, strict=True)],
        rule_judge(judge),
        num_workers=1,
    )
    assert rewards["correct"] == [float(v["symbolic_correct"]) for v in verdicts]
    assert 0 < sum(rewards["correct"]) < len(rows)
    assert rewards["answer_format"] == [float(v["predicted_answer"] is not None) for v in verdicts]


def test_reward_runs_code_answers_in_the_sandbox(bubblewrap):
    judge = {"extraction": "code", "timeout_seconds": 10, "memory_limit_mb": 1024, "sandbox": "bwrap"}
    row = {"id": "add", "problem": "write add(a, b)", "tests": "assert add(2, 3) == 5\nassert add(-1, 1) == 0"}
    completions = [
        "```python\ndef add(a, b):\n    return a + b\n```",
        "```python\ndef add(a, b):\n    return a - b\n```",
        "```python\nimport sys\nsys.exit(0)\ndef add(a, b):\n    return 0\n```",  # an early exit does not pass
        "I cannot write code.",
    ]
    rewards = rewards_of(judge, [row] * 4, completions)
    assert rewards["correct"] == [1.0, 0.0, 0.0, 0.0]
    assert rewards["answer_format"] == [1.0, 1.0, 1.0, 0.0]


def test_each_batch_is_judged_anew():
    judge = benchmark_judge(default_config(), "arithmetic")
    reward = JudgeRewards({"bench": judge}, {"parse_reasoning": False}, max_new_tokens=8, num_workers=1)
    correct = reward.functions()[0]
    row = [json.dumps({"id": "1", "problem": "1+1", "expected_answer": "2", "benchmark": "bench"})]
    for _ in range(3):  # new lists each time, as the trainer makes them: none is served another's verdicts
        assert correct(prompts=[""], completions=["\\boxed{2}"], completion_ids=[[0]], row=row) == [1.0]
        assert correct(prompts=[""], completions=["\\boxed{3}"], completion_ids=[[0]], row=row) == [0.0]


def test_a_pair_keeps_the_spans_of_each_answers_tool_outputs(tmp_path):
    """An answer that called a tool keeps its tool outputs' spans under its side's key (which the trainer masks out
    of the loss); an answer that called none adds no key, as before tools."""
    called = "<calc>1+1</calc><out>2</out>\\boxed{2}"
    spans = [[called.index("<out>"), called.index("\\boxed")]]
    right = {**sample("1+1", "2"), "generation": called, "tool_output_spans": spans}
    write_jsonl(tmp_path / "output-rs0.jsonl", [right, sample("1+1", "3"), sample("2+2", "4"), sample("2+2", "5")])
    records, _ = select_pairs([tmp_path / "output-rs0.jsonl"], ["add"], [PROMPT], PAIRS, EVERY_PROBLEM)
    with_tool, without = records
    assert with_tool["chosen"][0]["content"] == called and with_tool["chosen_tool_output_spans"] == spans
    assert "rejected_tool_output_spans" not in with_tool
    assert not [key for key in without if key.endswith("tool_output_spans")]
