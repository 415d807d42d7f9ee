"""compute_metrics and summarize_benchmark against hand-computed values and the plain per-problem
reference in ``snakeskills.results.metrics_reference`` (NeMo-Skills' BaseMetrics)."""

from __future__ import annotations

import json
import math
import random
import statistics
from collections import Counter
from pathlib import Path

import polars as pl
import pytest

from snakeskills.errors import SnakeskillsError
from snakeskills.results import summarize
from snakeskills.results.metrics import compute_metrics, format_table, headline_modes, max_k, pass_at_k_table
from snakeskills.results.metrics_reference import reference_metrics, reference_summarize
from snakeskills.results.summarize import load_judged_seeds, summarize_benchmark


def make_frame(
    answers: list[list[str | None]],
    correct: list[list[bool]],
    tokens: list[list[int]] | None = None,
    judge: list[list[bool]] | None = None,
) -> pl.DataFrame:
    """One row per (problem, sample); ``answers[p][s]`` is the predicted answer of sample s of problem p."""
    rows = {"problem_index": [], "sample_index": [], "predicted_answer": [], "num_generated_tokens": []}
    rows["symbolic_correct"] = []
    if judge is not None:
        rows["judge_correct"] = []
    for problem, problem_answers in enumerate(answers):
        for sample, answer in enumerate(problem_answers):
            rows["problem_index"].append(problem)
            rows["sample_index"].append(sample)
            rows["predicted_answer"].append(answer)
            rows["num_generated_tokens"].append(tokens[problem][sample] if tokens else 10)
            rows["symbolic_correct"].append(correct[problem][sample])
            if judge is not None:
                rows["judge_correct"].append(judge[problem][sample])
    return pl.DataFrame(
        rows,
        schema_overrides={
            "problem_index": pl.Int64,
            "sample_index": pl.Int64,
            "predicted_answer": pl.String,
            "num_generated_tokens": pl.Int64,
        },
    )


# ---------------------------------------------------------------- pass@k estimator


def test_pass_at_k_table_is_the_unbiased_estimator():
    # n=4, k=2: 1 - C(4-c, 2) / C(4, 2) = 1 - C(4-c, 2) / 6
    # c=0: 1-6/6=0, c=1: 1-3/6=0.5, c=2: 1-1/6=5/6, c=3: 1-0=1 (C(1,2)=0), c=4: 1
    assert pass_at_k_table(4, 2) == pytest.approx([0.0, 0.5, 5 / 6, 1.0, 1.0])
    # k=1 is the plain share c/n
    assert pass_at_k_table(5, 1) == pytest.approx([0.0, 0.2, 0.4, 0.6, 0.8, 1.0])
    # k=n: any correct sample passes
    assert pass_at_k_table(3, 3) == pytest.approx([0.0, 1.0, 1.0, 1.0])


def test_pass_at_k_with_k_below_n_one_correct_of_four():
    # one problem, n=4, c=1 (only the last sample is correct)
    frame = make_frame([["1", "2", "3", "4"]], [[False, False, False, True]])
    metrics = compute_metrics(frame, ["symbolic_correct"])
    # pass@1 = 1 - C(3,1)/C(4,1) = 1 - 3/4 = 25%
    assert metrics["pass@1"]["symbolic_correct"] == pytest.approx(25.0)
    # pass@2 = 1 - C(3,2)/C(4,2) = 1 - 3/6 = 50%
    assert metrics["pass@2"]["symbolic_correct"] == pytest.approx(50.0)
    # pass@3 = 1 - C(3,3)/C(4,3) = 1 - 1/4 = 75%
    assert metrics["pass@3"]["symbolic_correct"] == pytest.approx(75.0)
    assert metrics["pass@4"]["symbolic_correct"] == pytest.approx(100.0)
    # avg-of-k only looks at the first k samples: the correct one is the 4th
    assert metrics["pass@1[avg-of-1]"]["symbolic_correct"] == pytest.approx(0.0)
    assert metrics["pass@1[avg-of-3]"]["symbolic_correct"] == pytest.approx(0.0)
    assert metrics["pass@1[avg-of-4]"]["symbolic_correct"] == pytest.approx(25.0)
    # four distinct answers tie at every k; only the 4th ("4") is correct
    assert metrics["majority@2"]["symbolic_correct"] == pytest.approx(0.0)
    assert metrics["majority@4"]["symbolic_correct"] == pytest.approx(25.0)


def test_pass_at_k_uses_all_samples_regardless_of_order():
    late = compute_metrics(make_frame([["1", "2", "3", "4"]], [[False, False, False, True]]), ["symbolic_correct"])
    early = compute_metrics(make_frame([["4", "2", "3", "1"]], [[True, False, False, False]]), ["symbolic_correct"])
    for k in range(1, 5):
        assert early[f"pass@{k}"]["symbolic_correct"] == pytest.approx(late[f"pass@{k}"]["symbolic_correct"])
    # ... whereas avg-of-1 depends on which sample comes first
    assert early["pass@1[avg-of-1]"]["symbolic_correct"] == pytest.approx(100.0)
    assert late["pass@1[avg-of-1]"]["symbolic_correct"] == pytest.approx(0.0)


# ---------------------------------------------------------------- majority voting


def test_majority_tie_scores_mean_of_tied_groups():
    # answers 1,2,1,2; the "1"s are correct, the "2"s are not
    frame = make_frame([["1", "2", "1", "2"]], [[True, False, True, False]])
    metrics = compute_metrics(frame, ["symbolic_correct"])
    # majority@2: ("1",T) x1 vs ("2",F) x1 -> tie -> (1+0)/2 = 50%
    assert metrics["majority@2"]["symbolic_correct"] == pytest.approx(50.0)
    # majority@3: "1" x2 beats "2" x1 -> correct -> 100%
    assert metrics["majority@3"]["symbolic_correct"] == pytest.approx(100.0)
    # majority@4: ("1",T) x2 vs ("2",F) x2 -> tie -> 50%
    assert metrics["majority@4"]["symbolic_correct"] == pytest.approx(50.0)
    # n=4, c=2: pass@1 = 1 - C(2,1)/4 = 50%, pass@2 = 1 - C(2,2)/C(4,2) = 1 - 1/6 = 83.33%, pass@3 = 100%
    assert metrics["pass@1"]["symbolic_correct"] == pytest.approx(50.0)
    assert metrics["pass@2"]["symbolic_correct"] == pytest.approx(100.0 * 5 / 6)
    assert metrics["pass@3"]["symbolic_correct"] == pytest.approx(100.0)
    # avg-of-k: first k of [1,0,1,0] -> 1, 1/2, 2/3, 1/2
    assert metrics["pass@1[avg-of-1]"]["symbolic_correct"] == pytest.approx(100.0)
    assert metrics["pass@1[avg-of-2]"]["symbolic_correct"] == pytest.approx(50.0)
    assert metrics["pass@1[avg-of-3]"]["symbolic_correct"] == pytest.approx(200.0 / 3)
    assert metrics["pass@1[avg-of-4]"]["symbolic_correct"] == pytest.approx(50.0)
    for mode in metrics:
        assert metrics[mode]["no_answer"] == 0.0


def test_majority_groups_by_answer_and_correctness():
    # the same answer "7" judged once correct, once not: NeMo-Skills counts (answer, correctness) pairs,
    # so ("7",T) x1, ("7",F) x1, ("8",T) x1 tie three ways -> (1+0+1)/3
    frame = make_frame([["7", "7", "8"]], [[True, False, True]])
    metrics = compute_metrics(frame, ["symbolic_correct"])
    assert metrics["majority@3"]["symbolic_correct"] == pytest.approx(200.0 / 3)
    # majority@2: ("7",T) and ("7",F) tie -> 50%
    assert metrics["majority@2"]["symbolic_correct"] == pytest.approx(50.0)


def test_majority_ignores_missing_answers():
    # two missing answers do not outvote one real answer
    frame = make_frame([[None, None, "5"]], [[False, False, True]])
    metrics = compute_metrics(frame, ["symbolic_correct"])
    assert metrics["majority@2"]["symbolic_correct"] == pytest.approx(0.0)  # no valid answer among first 2 -> 0
    assert metrics["majority@2"]["no_answer"] == pytest.approx(100.0)
    assert metrics["majority@3"]["symbolic_correct"] == pytest.approx(100.0)  # only "5" counts
    assert metrics["majority@3"]["no_answer"] == pytest.approx(0.0)


def test_no_answers_at_all():
    frame = make_frame([[None, None, None], [None, None, None]], [[False] * 3, [False] * 3])
    metrics = compute_metrics(frame, ["symbolic_correct"])
    assert set(metrics) == {
        "pass@1",
        "pass@2",
        "pass@3",
        "pass@1[avg-of-1]",
        "pass@1[avg-of-2]",
        "pass@1[avg-of-3]",
        "majority@2",
        "majority@3",
    }
    for mode, mode_metrics in metrics.items():
        assert mode_metrics["symbolic_correct"] == pytest.approx(0.0), mode
        assert mode_metrics["no_answer"] == pytest.approx(100.0), mode
        assert mode_metrics["num_entries"] == 2


def test_no_answer_per_mode():
    # problem 0: no answer at all; problem 1: first sample unanswered, then "5" twice (correct)
    frame = make_frame([[None, None, None], [None, "5", "5"]], [[False, False, False], [False, True, True]])
    metrics = compute_metrics(frame, ["symbolic_correct"])
    # pass@k: share of problems whose first k are all missing
    assert metrics["pass@1"]["no_answer"] == pytest.approx(100.0)  # both first samples missing
    assert metrics["pass@2"]["no_answer"] == pytest.approx(50.0)  # problem 1 has "5" among first 2
    assert metrics["pass@3"]["no_answer"] == pytest.approx(50.0)
    # avg-of-k: mean share missing among first k
    assert metrics["pass@1[avg-of-1]"]["no_answer"] == pytest.approx(100.0)
    assert metrics["pass@1[avg-of-2]"]["no_answer"] == pytest.approx(75.0)  # (1 + 1/2) / 2
    assert metrics["pass@1[avg-of-3]"]["no_answer"] == pytest.approx(100.0 * (1 + 1 / 3) / 2)
    # majority@k: all first k missing
    assert metrics["majority@2"]["no_answer"] == pytest.approx(50.0)
    assert metrics["majority@3"]["no_answer"] == pytest.approx(50.0)
    # scores: problem 0 never correct; problem 1 n=3, c=2
    # pass@1 = (0 + 2/3)/2 = 33.33%; pass@2 = (0 + 1 - C(1,2)/C(3,2))/2 = (0+1)/2 = 50%
    assert metrics["pass@1"]["symbolic_correct"] == pytest.approx(100.0 / 3)
    assert metrics["pass@2"]["symbolic_correct"] == pytest.approx(50.0)
    # avg-of-2: (0 + 1/2)/2 = 25%; majority@2: problem 0 has no answer -> 0, problem 1 -> "5" correct -> 50%
    assert metrics["pass@1[avg-of-2]"]["symbolic_correct"] == pytest.approx(25.0)
    assert metrics["majority@2"]["symbolic_correct"] == pytest.approx(50.0)


# ---------------------------------------------------------------- several problems, tokens, statistics

MIXED_ANSWERS = [["3", "3", "4"], ["1", "2", "2"], ["9", "8", "7"]]
MIXED_CORRECT = [[True, True, False], [True, False, False], [False, False, True]]
# per-problem mean tokens: 20, 5, 4/3 -> mean over problems (75 + 4) / 9 = 8.78 -> int() = 8 (not rounded to 9)
MIXED_TOKENS = [[10, 20, 30], [5, 5, 5], [1, 1, 2]]


def test_mixed_correctness_over_several_problems():
    metrics = compute_metrics(make_frame(MIXED_ANSWERS, MIXED_CORRECT, MIXED_TOKENS), ["symbolic_correct"])
    for mode_metrics in metrics.values():
        assert mode_metrics["num_entries"] == 3
        assert mode_metrics["avg_tokens"] == 8
        assert isinstance(mode_metrics["avg_tokens"], int)
    # pass@1: P0 c=2 -> 2/3, P1 c=1 -> 1/3, P2 c=1 -> 1/3 -> 4/9
    assert metrics["pass@1"]["symbolic_correct"] == pytest.approx(400.0 / 9)
    # pass@2: P0 1 - C(1,2)/3 = 1, P1 1 - C(2,2)/3 = 2/3, P2 2/3 -> 7/9
    assert metrics["pass@2"]["symbolic_correct"] == pytest.approx(700.0 / 9)
    assert metrics["pass@3"]["symbolic_correct"] == pytest.approx(100.0)
    # avg-of-1: first samples T,T,F -> 2/3; avg-of-2: 1, 1/2, 0 -> 1/2; avg-of-3 = 4/9
    assert metrics["pass@1[avg-of-1]"]["symbolic_correct"] == pytest.approx(200.0 / 3)
    assert metrics["pass@1[avg-of-2]"]["symbolic_correct"] == pytest.approx(50.0)
    assert metrics["pass@1[avg-of-3]"]["symbolic_correct"] == pytest.approx(400.0 / 9)
    # majority@2: P0 "3" -> 1; P1 ("1",T)/("2",F) tie -> 1/2; P2 ("9",F)/("8",F) tie -> 0 -> 1.5/3
    assert metrics["majority@2"]["symbolic_correct"] == pytest.approx(50.0)
    # majority@3: P0 "3" x2 -> 1; P1 "2" x2 -> 0; P2 three-way tie F,F,T -> 1/3 -> (4/3)/3
    assert metrics["majority@3"]["symbolic_correct"] == pytest.approx(400.0 / 9)
    # pass@1[avg-of-1] has no statistics, k >= 2 do
    assert "symbolic_correct_statistics" not in metrics["pass@1[avg-of-1]"]
    assert "symbolic_correct_statistics" not in metrics["pass@3"]
    assert "symbolic_correct_statistics" not in metrics["majority@3"]


def test_statistics_on_mixed_frame():
    metrics = compute_metrics(make_frame(MIXED_ANSWERS, MIXED_CORRECT, MIXED_TOKENS), ["symbolic_correct"])
    two = metrics["pass@1[avg-of-2]"]["symbolic_correct_statistics"]
    # runs: run0 = [1,1,0] -> 2/3, run1 = [1,0,0] -> 1/3; stdev = (1/3)/sqrt(2)
    assert two["avg"] == pytest.approx(0.5)
    assert two["std_dev_across_runs"] == pytest.approx(1 / 3 / math.sqrt(2))
    assert two["std_err_across_runs"] == pytest.approx(1 / 6)  # (1/3)/sqrt(2)/sqrt(2)
    # per problem stdev of first 2: [1,1] -> 0, [1,0] -> sqrt(1/2), [0,0] -> 0
    assert two["avg_sample_std_dev"] == pytest.approx(math.sqrt(0.5) / 3)
    three = metrics["pass@1[avg-of-3]"]["symbolic_correct_statistics"]
    # runs 2/3, 1/3, 1/3: mean 4/9, deviations 2/9, -1/9, -1/9 -> var (6/81)/2 = 1/27
    assert three["avg"] == pytest.approx(4 / 9)
    assert three["std_dev_across_runs"] == pytest.approx(math.sqrt(1 / 27))
    assert three["std_err_across_runs"] == pytest.approx(math.sqrt(1 / 27) / math.sqrt(3))
    # every problem has one odd one out of three: stdev = sqrt(1/3)
    assert three["avg_sample_std_dev"] == pytest.approx(math.sqrt(1 / 3))


def test_statistics_nemo_skills_docstring_example():
    # NeMo-Skills BaseMetrics._add_std_metrics docstring: 3 samples x 4 attempts
    scores = [[1, 0, 1, 0], [1, 1, 0, 0], [0, 1, 1, 1]]
    frame = make_frame([["x"] * 4] * 3, [[bool(s) for s in row] for row in scores])
    stats = compute_metrics(frame, ["symbolic_correct"])["pass@1[avg-of-4]"]["symbolic_correct_statistics"]
    # run i = attempt i of every sample: [1,1,0], [0,1,1], [1,0,1], [0,0,1] -> 2/3, 2/3, 2/3, 1/3.
    # stdev([2/3, 2/3, 2/3, 1/3]) = sqrt((3 * (1/12)^2 + (3/12)^2) / 3) = 1/6 ~ 0.1667.
    # (The docstring prints ~0.1925, an arithmetic slip: that is stdev([2/3, 2/3, 1/3, 1/3]); NeMo-Skills'
    # code, np.std(run_averages, ddof=1), gives 1/6 for this data.)
    assert stats["std_dev_across_runs"] == pytest.approx(statistics.stdev([2 / 3, 2 / 3, 2 / 3, 1 / 3]))
    assert stats["std_dev_across_runs"] == pytest.approx(1 / 6)
    assert stats["std_err_across_runs"] == pytest.approx(1 / 12)  # (1/6) / sqrt(4)
    # per sample: stdev([1,0,1,0]) = stdev([1,1,0,0]) = sqrt(1/3) ~ 0.5774, stdev([0,1,1,1]) = 0.5 -> mean ~ 0.5515
    assert stats["avg_sample_std_dev"] == pytest.approx((2 * math.sqrt(1 / 3) + 0.5) / 3)
    assert stats["avg_sample_std_dev"] == pytest.approx(0.5515, abs=1e-4)
    assert stats["avg"] == pytest.approx(7 / 12)
    # statistics are fractions, the score itself a percentage
    assert compute_metrics(frame, ["symbolic_correct"])["pass@1[avg-of-4]"]["symbolic_correct"] == pytest.approx(
        100 * 7 / 12
    )


def test_second_score_column_judge_correct():
    # symbolic: "7" right, "8" wrong; judge disagrees on the second "7" and on "8"
    frame = make_frame([["7", "7", "8"]], [[True, True, False]], judge=[[True, False, True]])
    metrics = compute_metrics(frame, ["symbolic_correct", "judge_correct"])
    for mode_metrics in metrics.values():
        assert "symbolic_correct" in mode_metrics
        assert "judge_correct" in mode_metrics
    # majority@3: symbolic ("7",T) x2 wins -> 100; judge ("7",T),("7",F),("8",T) tie -> 2/3
    assert metrics["majority@3"]["symbolic_correct"] == pytest.approx(100.0)
    assert metrics["majority@3"]["judge_correct"] == pytest.approx(200.0 / 3)
    # avg-of-2: symbolic [1,1] -> 100, judge [1,0] -> 50
    assert metrics["pass@1[avg-of-2]"]["symbolic_correct"] == pytest.approx(100.0)
    assert metrics["pass@1[avg-of-2]"]["judge_correct"] == pytest.approx(50.0)
    # both have c=2 of n=3: pass@1 = 2/3, pass@2 = 1
    assert metrics["pass@1"]["judge_correct"] == pytest.approx(200.0 / 3)
    assert metrics["pass@2"]["judge_correct"] == pytest.approx(100.0)
    symbolic_stats = metrics["pass@1[avg-of-2]"]["symbolic_correct_statistics"]
    judge_stats = metrics["pass@1[avg-of-2]"]["judge_correct_statistics"]
    assert symbolic_stats["std_dev_across_runs"] == pytest.approx(0.0)
    # one problem: run means 1 and 0 -> stdev sqrt(1/2); per-sample stdev([1,0]) likewise
    assert judge_stats["std_dev_across_runs"] == pytest.approx(math.sqrt(0.5))
    assert judge_stats["avg_sample_std_dev"] == pytest.approx(math.sqrt(0.5))
    assert judge_stats["avg"] == pytest.approx(0.5)
    # no_answer does not depend on the score column
    assert metrics["majority@3"]["no_answer"] == 0.0


def test_result_does_not_depend_on_row_order():
    frame = make_frame(MIXED_ANSWERS, MIXED_CORRECT, MIXED_TOKENS)
    shuffled = frame.sample(fraction=1.0, shuffle=True, seed=7)
    assert shuffled["problem_index"].to_list() != frame["problem_index"].to_list()
    assert_nested_close(compute_metrics(shuffled, ["symbolic_correct"]), compute_metrics(frame, ["symbolic_correct"]))


def assert_nested_close(actual, expected, where: str = "", tolerance: float = 1e-9) -> None:
    if isinstance(expected, dict):
        assert isinstance(actual, dict) and set(actual) == set(expected), where
        for key in expected:
            assert_nested_close(actual[key], expected[key], f"{where}/{key}", tolerance)
    else:
        assert actual == pytest.approx(expected, abs=tolerance), where


# ---------------------------------------------------------------- input errors


def test_unequal_samples_per_problem_raises():
    frame = make_frame([["1", "2"], ["1"]], [[True, False], [True]])
    with pytest.raises(SnakeskillsError, match="different numbers of samples"):
        compute_metrics(frame, ["symbolic_correct"])


def test_missing_score_column_raises():
    frame = make_frame([["1", "2"]], [[True, False]])
    with pytest.raises(SnakeskillsError, match="judge_correct"):
        compute_metrics(frame, ["symbolic_correct", "judge_correct"])


# ---------------------------------------------------------------- table


def test_format_table_shows_headline_modes_of_largest_k():
    metrics = compute_metrics(make_frame(MIXED_ANSWERS, MIXED_CORRECT, MIXED_TOKENS), ["symbolic_correct"])
    assert max_k(metrics) == 3
    assert headline_modes(metrics) == ["pass@1[avg-of-3]", "majority@3", "pass@3"]
    table = format_table("arith", metrics)
    lines = table.splitlines()
    assert "arith" in lines[0] and lines[0].startswith("-")
    assert lines[1].split(" | ")[0].strip() == "evaluation_mode"
    assert "symbolic_correct" in lines[1] and "no_answer" in lines[1]
    assert "_statistics" not in table
    rows = {line.split(" | ")[0].strip(): line for line in lines[2:]}
    assert list(rows) == ["pass@1[avg-of-3]", "majority@3", "pass@3"]
    # avg-of-3: 44.44% ± 100 * sqrt(1/27) = 19.25%
    assert "44.44% ± 19.25%" in rows["pass@1[avg-of-3]"]
    assert "± " not in rows["majority@3"] and "± " not in rows["pass@3"]
    assert "44.44%" in rows["majority@3"]
    assert "100.00%" in rows["pass@3"]
    for row in rows.values():
        cells = [cell.strip() for cell in row.split(" | ")]
        assert cells[1:3] == ["3", "8"]  # num_entries, avg_tokens
    assert "pass@2" not in table and "majority@2" not in table
    assert table.endswith("\n")


def test_format_table_single_sample_has_no_majority_or_spread():
    metrics = compute_metrics(make_frame([["1"], ["2"]], [[True], [False]]), ["symbolic_correct"])
    assert set(metrics) == {"pass@1", "pass@1[avg-of-1]"}
    table = format_table("one", metrics)
    assert "majority" not in table
    assert "±" not in table
    assert "pass@1[avg-of-1]" in table and "50.00%" in table


# ---------------------------------------------------------------- reference implementation on random data


def random_problems(rng: random.Random, num_problems: int, num_samples: int, judge: bool) -> list[list[dict]]:
    """``problems[p][s]``: judged rows with few distinct answers (ties), missing answers, both scores."""
    problems = []
    for index in range(num_problems):
        expected = str(rng.randint(0, 3))
        # some problems never get an answer, some always do
        missing_rate = rng.choice([0.0, 0.2, 0.5, 1.0])
        samples = []
        for seed in range(num_samples):
            answer = None if rng.random() < missing_rate else str(rng.randint(0, 3))
            row = {
                "id": f"problem-{index}",
                "problem": f"What is {index} + {seed}? " * rng.randint(1, 5),
                "expected_answer": expected,
                "generation": "Let me think. " * rng.randint(0, 20) + (f"\\boxed{{{answer}}}" if answer else "no idea"),
                "num_generated_tokens": rng.randint(1, 500),
                "predicted_answer": answer,
                # mostly right when the answer matches; the same answer is sometimes judged either way
                "symbolic_correct": answer == expected if rng.random() < 0.9 else answer != expected,
            }
            if judge:
                row["judge_correct"] = rng.random() < 0.5
            samples.append(row)
        problems.append(samples)
    return problems


def write_seed_files(directory: Path, problems: list[list[dict]]) -> list[Path]:
    """One JSONL file per seed, every file listing the problems in the same order."""
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for seed in range(len(problems[0])):
        path = directory / f"output-rs{seed}.jsonl"
        path.write_text("".join(json.dumps(samples[seed]) + "\n" for samples in problems), encoding="utf-8")
        paths.append(path)
    return paths


def has_tie(samples: list[dict], k: int, column: str = "symbolic_correct") -> bool:
    counts = Counter((s["predicted_answer"], s[column]) for s in samples[:k] if s["predicted_answer"] is not None)
    return len(counts) > 1 and list(counts.values()).count(max(counts.values())) > 1


def assert_same_metrics(actual: dict, expected: dict, tolerance: float = 1e-9) -> None:
    """Same modes and metrics in the same order, values within ``tolerance``."""

    def keys(nested):
        return [(key, keys(value)) if isinstance(value, dict) else key for key, value in nested.items()]

    assert keys(actual) == keys(expected)
    assert_nested_close(actual, expected, tolerance=tolerance)


def test_matches_reference_on_random_frame():
    rng = random.Random(1234)
    num_problems, num_samples = 50, 5
    problems = random_problems(rng, num_problems, num_samples, judge=True)
    rows = [(p, s, sample) for p, samples in enumerate(problems) for s, sample in enumerate(samples)]
    frame = pl.DataFrame(
        {
            "problem_index": [p for p, _, _ in rows],
            "sample_index": [s for _, s, _ in rows],
            "predicted_answer": [sample["predicted_answer"] for _, _, sample in rows],
            "num_generated_tokens": [sample["num_generated_tokens"] for _, _, sample in rows],
            "symbolic_correct": [sample["symbolic_correct"] for _, _, sample in rows],
            "judge_correct": [sample["judge_correct"] for _, _, sample in rows],
        },
        schema_overrides={"predicted_answer": pl.String},
    ).sample(fraction=1.0, shuffle=True, seed=5)
    columns = ["symbolic_correct", "judge_correct"]
    expected = reference_metrics(problems, columns)
    actual = compute_metrics(frame, columns)
    assert len(actual) == 3 * num_samples - 1  # pass@k, avg-of-k for k=1..5, majority@k for k=2..5
    assert_same_metrics(actual, expected)
    # the random data really exercises tied majorities and problems without any answer
    assert actual["majority@2"]["no_answer"] > 0
    assert sum(has_tie(samples, 4) for samples in problems) >= 5


@pytest.mark.parametrize(
    ("seed", "num_problems", "num_samples", "judge"),
    [(1, 40, 6, True), (2, 30, 9, False), (3, 1, 2, True), (4, 25, 1, False), (5, 80, 16, True)],
)
def test_summarize_benchmark_matches_reference_on_random_files(tmp_path, seed, num_problems, num_samples, judge):
    problems = random_problems(random.Random(seed), num_problems, num_samples, judge)
    paths = write_seed_files(tmp_path / "judged", problems)
    assert all(summarize._read_seed_fast(path) is not None for path in paths)  # polars, not the per-row reader
    expected = reference_summarize("bench", paths)
    actual = summarize_benchmark("bench", paths)
    assert_same_metrics(actual, expected)
    assert ("judge_correct" in actual["bench"]["pass@1"]) is judge
    # the frame route and the per-row reader give the same numbers
    columns = ["symbolic_correct", "judge_correct"] if judge else ["symbolic_correct"]
    assert_same_metrics({"bench": compute_metrics(load_judged_seeds(paths), columns)}, expected)
    if num_samples >= 6:
        assert sum(has_tie(samples, num_samples) for samples in problems) >= 1


def test_per_row_reader_gives_the_same_metrics(tmp_path, monkeypatch):
    problems = random_problems(random.Random(9), 30, 5, judge=True)
    paths = write_seed_files(tmp_path, problems)
    fast = summarize_benchmark("bench", paths)
    monkeypatch.setattr(summarize, "_read_seed_fast", lambda path: None)
    assert_same_metrics(summarize_benchmark("bench", paths), fast, tolerance=0.0)
    assert load_judged_seeds(paths).columns == [
        "problem_index",
        "sample_index",
        "predicted_answer",
        "num_generated_tokens",
        "symbolic_correct",
        "judge_correct",
    ]


def test_rows_polars_does_not_take_are_read_as_python_reads_them(tmp_path):
    # 0/1 scores, a null id and float token counts: valid for the per-row reader, not for the typed fast path
    problems = random_problems(random.Random(3), 10, 3, judge=False)
    for samples in problems:
        for sample in samples:
            sample["symbolic_correct"] = int(sample["symbolic_correct"])
            sample["num_generated_tokens"] = float(sample["num_generated_tokens"])
    for sample in problems[0]:
        sample["id"] = None
    paths = write_seed_files(tmp_path, problems)
    assert_same_metrics(summarize_benchmark("bench", paths), reference_summarize("bench", paths))


def test_paths_with_glob_characters(tmp_path):
    problems = random_problems(random.Random(4), 10, 3, judge=False)
    paths = write_seed_files(tmp_path / "run[1]", problems)
    # a decoy that polars would read for "run[1]" if it expanded the pattern
    write_seed_files(tmp_path / "run1", random_problems(random.Random(5), 10, 3, judge=False))
    assert_same_metrics(summarize_benchmark("bench", paths), reference_summarize("bench", paths))


# ---------------------------------------------------------------- judged files with errors


@pytest.fixture
def seed_files(tmp_path) -> list[Path]:
    return write_seed_files(tmp_path, random_problems(random.Random(11), 6, 3, judge=True))


def rewrite_line(path: Path, line_number: int, edit) -> None:
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    lines[line_number - 1] = edit(lines[line_number - 1])
    path.write_text("".join(lines), encoding="utf-8")


def drop_field(field: str):
    def edit(line: str) -> str:
        row = json.loads(line)
        del row[field]
        return json.dumps(row) + "\n"

    return edit


def test_malformed_line_names_file_and_line(seed_files):
    rewrite_line(seed_files[1], 4, lambda line: line[:-5] + "\n")
    with pytest.raises(SnakeskillsError, match=r"output-rs1\.jsonl:4: malformed JSON line"):
        summarize_benchmark("bench", seed_files)


@pytest.mark.parametrize(
    "field", ["id", "predicted_answer", "symbolic_correct", "num_generated_tokens", "judge_correct"]
)
def test_missing_field_names_file_and_line(seed_files, field):
    # null answers elsewhere in the file must not hide a row that lacks the key
    rewrite_line(seed_files[2], 1, lambda line: json.dumps({**json.loads(line), "predicted_answer": None}) + "\n")
    rewrite_line(seed_files[2], 5, drop_field(field))
    with pytest.raises(SnakeskillsError, match=rf"output-rs2\.jsonl:5: judged row lacks field '{field}'"):
        summarize_benchmark("bench", seed_files)


def test_ids_differing_between_seed_files(seed_files):
    rewrite_line(seed_files[2], 3, lambda line: json.dumps({**json.loads(line), "id": "other"}) + "\n")
    with pytest.raises(SnakeskillsError, match=r"output-rs2\.jsonl: problem ids differ from .*output-rs0\.jsonl"):
        summarize_benchmark("bench", seed_files)


def test_unequal_row_counts_between_seed_files(seed_files):
    rewrite_line(seed_files[1], 6, lambda line: "")
    with pytest.raises(SnakeskillsError, match=r"output-rs1\.jsonl: problem ids differ"):
        summarize_benchmark("bench", seed_files)


@pytest.mark.parametrize("content", ["", "\n\n"])
def test_empty_seed_file(seed_files, content):
    seed_files[1].write_text(content)
    with pytest.raises(SnakeskillsError, match=r"output-rs1\.jsonl: judged file is empty"):
        summarize_benchmark("bench", seed_files)


def test_missing_seed_file(seed_files):
    seed_files[0].unlink()
    with pytest.raises(SnakeskillsError, match=r"output-rs0\.jsonl: file does not exist"):
        summarize_benchmark("bench", seed_files)


def test_seed_files_judged_differently(seed_files):
    for line_number in range(1, 7):
        rewrite_line(seed_files[1], line_number, drop_field("judge_correct"))
    with pytest.raises(SnakeskillsError, match=r"output-rs1\.jsonl: has score fields \['symbolic_correct'\]"):
        summarize_benchmark("bench", seed_files)


def test_non_binary_or_null_scores_raise():
    frame = make_frame([["1", "2"]], [[True, False]]).with_columns(pl.Series("symbolic_correct", [0.5, 1.0]))
    with pytest.raises(SnakeskillsError, match="must be boolean"):
        compute_metrics(frame, ["symbolic_correct"])
    frame = make_frame([["1", "2"]], [[True, False]]).with_columns(pl.Series("symbolic_correct", [None, True]))
    with pytest.raises(SnakeskillsError, match="null values"):
        compute_metrics(frame, ["symbolic_correct"])


# ---------------------------------------------------------------- finish reasons: truncated and errored rows


def with_finish_reasons(problems: list[list[dict]], rng: random.Random) -> list[list[dict]]:
    for samples in problems:
        for sample in samples:
            sample["finish_reason"] = rng.choices(["stop", "length", "error"], weights=[6, 3, 1])[0]
    return problems


def test_truncated_and_errored_shares_of_the_first_k_samples(tmp_path):
    problems = [
        [{"finish_reason": "stop"}, {"finish_reason": "length"}, {"finish_reason": "error"}],
        [{"finish_reason": "length"}, {"finish_reason": "length"}, {"finish_reason": "stop"}],
    ]
    for index, samples in enumerate(problems):
        for sample in samples:
            sample.update(id=f"p{index}", predicted_answer="1", num_generated_tokens=3, symbolic_correct=True)
    metrics = summarize_benchmark("bench", write_seed_files(tmp_path, problems))["bench"]
    assert metrics["pass@1"]["truncated"] == 50.0 and metrics["pass@1"]["errors"] == 0.0  # seed 0: 1 of 2
    assert metrics["pass@1[avg-of-2]"]["truncated"] == 75.0  # 3 of the first 2 x 2
    assert metrics["majority@3"]["truncated"] == metrics["pass@3"]["truncated"] == pytest.approx(100 * 3 / 6)
    assert metrics["pass@3"]["errors"] == pytest.approx(100 / 6)
    table = format_table("bench", metrics)
    assert "truncated" in table.splitlines()[1] and "50.00%" in table


@pytest.mark.parametrize("per_row", [False, True])
def test_finish_reason_shares_match_the_reference(tmp_path, monkeypatch, per_row):
    rng = random.Random(21)
    paths = write_seed_files(tmp_path, with_finish_reasons(random_problems(rng, 40, 5, judge=True), rng))
    if per_row:
        monkeypatch.setattr(summarize, "_read_seed_fast", lambda path: None)
    else:
        assert all(summarize._read_seed_fast(path) is not None for path in paths)
    actual = summarize_benchmark("bench", paths)
    assert_same_metrics(actual, reference_summarize("bench", paths))
    assert {"truncated", "errors"} <= set(actual["bench"]["majority@4"])


def test_a_seed_file_without_finish_reason_is_named(tmp_path):
    rng = random.Random(5)
    paths = write_seed_files(tmp_path, with_finish_reasons(random_problems(rng, 6, 2, judge=False), rng))
    rows = [json.loads(line) for line in paths[1].read_text().splitlines()]
    paths[1].write_text(
        "".join(json.dumps({k: v for k, v in row.items() if k != "finish_reason"}) + "\n" for row in rows)
    )
    with pytest.raises(SnakeskillsError, match="lacks finish_reason"):
        summarize_benchmark("bench", paths)


# ---------------------------------------------------------------- code rows: majority@k votes on behaviour


def code_row(problem: str, program: str | None, status: str, error: str | None = None) -> dict:
    return {
        "id": problem,
        "predicted_answer": program,
        "symbolic_correct": status == "passed",
        "num_generated_tokens": 20,
        "execution_status": status,
        "execution_error": error,
    }


WRONG_FIVE = "case 2 of 3: wrong output (expected '6', got '5')"


@pytest.mark.parametrize("per_row", [False, True])
def test_programs_vote_on_what_they_did_not_on_their_text(tmp_path, monkeypatch, per_row):
    """Programs all different as text: as text each is its own answer, and a three-way tie scores the mean (1/3
    for p0, 2/3 for p1). By behaviour, p0's two programs printing the same wrong output outvote the passing one,
    and p1's two passing programs outvote the crash; a sample without code does not vote."""
    problems = {
        "p0": [
            code_row("p0", "print(int(input()) + 1)", "passed"),
            code_row("p0", "print(5)", "failed", WRONG_FIVE),
            code_row("p0", "x = 5\nprint(x)", "failed", WRONG_FIVE),
            code_row("p0", None, "no code"),
        ],
        "p1": [
            code_row("p1", "print(sum(map(int, input().split())))", "passed"),
            code_row("p1", "print(int(input()))", "failed", "case 1 of 2: ValueError: invalid literal for int()"),
            code_row("p1", "a, b = map(int, input().split())\nprint(a + b)", "passed"),
            code_row("p1", None, "no code"),
        ],
    }
    if per_row:
        monkeypatch.setattr(summarize, "_read_seed_fast", lambda path: None)
    majority = {}
    for name, samples in problems.items():
        paths = write_seed_files(tmp_path / name, [samples])
        assert per_row or all(summarize._read_seed_fast(path) is not None for path in paths)
        metrics = summarize_benchmark("bench", paths)["bench"]
        assert metrics["majority@4"] == metrics["majority@3"]  # no code casts no vote
        majority[name] = metrics["majority@3"]["symbolic_correct"]
        assert_same_metrics(summarize_benchmark("bench", paths), reference_summarize("bench", paths))
    assert majority == {"p0": 0.0, "p1": 100.0}


def test_code_rows_match_the_reference_and_a_seed_without_execution_fields_is_named(tmp_path):
    rng = random.Random(8)
    errors = [None, WRONG_FIVE, "case 1 of 3: ran past 1 s", "AssertionError"]
    problems = random_problems(rng, 30, 4, judge=False)
    for samples in problems:
        for sample in samples:
            status = rng.choice(["passed", "failed", "timed out"]) if sample["predicted_answer"] else "no code"
            sample.update(
                execution_status=status,
                execution_error=None if status in ("passed", "no code") else rng.choice(errors[1:]),
                symbolic_correct=status == "passed",
            )
    paths = write_seed_files(tmp_path / "all", problems)
    assert_same_metrics(summarize_benchmark("bench", paths), reference_summarize("bench", paths))
    rows = [json.loads(line) for line in paths[2].read_text().splitlines()]
    paths[2].write_text(
        "".join(json.dumps({k: v for k, v in row.items() if not k.startswith("execution_")}) + "\n" for row in rows)
    )
    with pytest.raises(SnakeskillsError, match="output-rs2.jsonl: lacks execution_status but .* has it"):
        summarize_benchmark("bench", paths)
