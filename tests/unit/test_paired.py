"""Paired comparison of two models over the same problems: the bootstrap interval of the gain and the flips."""

from __future__ import annotations

import json

import numpy as np
import pytest

from snakeskills.errors import SnakeskillsError
from snakeskills.io import write_jsonl
from snakeskills.results.metrics import compute_metrics
from snakeskills.results.paired_bootstrap import (
    ProblemScores,
    compare,
    describe,
    flip_rows,
    paired_bootstrap,
    read_problem_scores,
)
from snakeskills.results.summarize import load_judged_seeds, write_benchmark_summary


def scores(correct, samples=4) -> ProblemScores:
    correct = np.asarray(correct, dtype=np.int64)
    return ProblemScores([f"p{i}" for i in range(len(correct))], np.full(len(correct), samples), correct)


def test_the_gain_is_the_difference_of_pass_at_1_and_its_interval_holds_it():
    generator = np.random.default_rng(1)
    base = scores(generator.integers(0, 5, 200))
    tuned = scores(np.minimum(4, base.correct + generator.integers(0, 3, 200)))
    result = paired_bootstrap(base, tuned)
    expected = 100 * (tuned.correct.mean() - base.correct.mean()) / 4
    assert result["gain"] == pytest.approx(expected)
    assert result["ci_low"] < result["gain"] < result["ci_high"]
    assert result["ci_low"] > 0 and not result["includes_zero"]
    assert result["problems"] == 200 and result["resamples"] == 10_000


def test_pairing_narrows_the_interval_where_the_models_agree_problem_by_problem():
    """Two models that differ on 10 of 400 problems and agree on the rest: the paired interval is the spread of
    those 10 differences, far narrower than the spread of two independent accuracies near 50 %."""
    base = np.array([4] * 200 + [0] * 200)
    tuned = base.copy()
    tuned[200:210] = 4  # ten problems newly solved
    result = paired_bootstrap(scores(base), scores(tuned))
    assert result["gain"] == pytest.approx(2.5)
    assert result["ci_low"] > 0.5 and result["ci_high"] < 4.5, result
    independent_half_width = 1.96 * 100 * np.sqrt(2 * 0.25 / 400)  # about 6.9 points
    assert result["ci_high"] - result["ci_low"] < independent_half_width


def test_no_change_and_a_mixed_change_include_zero_and_say_so():
    same = paired_bootstrap(scores([1, 2, 3, 4]), scores([1, 2, 3, 4]))
    assert (same["gain"], same["ci_low"], same["ci_high"], same["includes_zero"]) == (0, 0, 0, True)
    mixed = paired_bootstrap(scores([4, 0] * 20), scores([0, 4] * 20))
    assert mixed["gain"] == 0 and mixed["includes_zero"] and mixed["ci_low"] < 0 < mixed["ci_high"]


def test_the_interval_is_the_same_on_every_run_and_with_different_seed_counts():
    """Fixed draws, integer sums: identical figures on every machine; models sampled a different number of times
    (4 and 8 seeds) are compared by shares."""
    base = ProblemScores(["a", "b", "c", "d"], np.array([4, 4, 4, 4]), np.array([0, 1, 2, 4]))
    tuned = ProblemScores(["a", "b", "c", "d"], np.array([8, 8, 8, 8]), np.array([8, 2, 4, 8]))
    first, second = paired_bootstrap(base, tuned), paired_bootstrap(base, tuned)
    assert first == second
    assert first["gain"] == pytest.approx(100 * ((1 - 0) + (0.25 - 0.25) + (0.5 - 0.5) + 0) / 4)


def test_problems_that_differ_stop_with_both_files_named(tmp_path):
    write_jsonl(tmp_path / "base.jsonl", [{"id": "a", "samples": 1, "symbolic_correct": 1}])
    write_jsonl(tmp_path / "tuned.jsonl", [{"id": "b", "samples": 1, "symbolic_correct": 1}])
    with pytest.raises(SnakeskillsError, match=r"tuned\.jsonl against .*base\.jsonl: .*problem ids differ"):
        compare("sft-round1", "base", "math", tmp_path / "base.jsonl", tmp_path / "tuned.jsonl")
    write_jsonl(tmp_path / "bad.jsonl", [{"id": "a", "samples": 1}])
    with pytest.raises(SnakeskillsError, match=r"bad\.jsonl:1: problem score row lacks \['symbolic_correct'\]"):
        read_problem_scores(tmp_path / "bad.jsonl")


def test_flips_put_each_problem_in_one_group_by_half_of_its_samples():
    base, tuned = scores([4, 2, 1, 0, 3]), scores([4, 1, 2, 0, 0])
    rows = flip_rows("sft-round1", "base", "math", base, tuned)
    assert [row[-1] for row in rows] == ["both", "base only", "tuned only", "neither", "base only"]
    assert rows[1] == ["sft-round1", "base", "math", "p1", "2/4", "1/4", "base only"]


def test_summarize_writes_each_problems_correct_samples_and_the_comparison_reads_them(tmp_path):
    """From judged seed files through problems.jsonl to the paired entry: its gain equals the difference of the
    two models' pass@1[avg-of-2] in metrics.json."""
    correct = {
        "base": [[True, False, False], [False, False, True]],
        "sft-round1": [[True, True, False], [True, True, True]],
    }
    paths = {}
    for model, seeds in correct.items():
        seed_paths = []
        for seed, row_scores in enumerate(seeds):
            path = tmp_path / model / f"output-rs{seed}.jsonl"
            rows = [
                {"id": f"q{i}", "predicted_answer": "1", "symbolic_correct": ok, "num_generated_tokens": 3}
                for i, ok in enumerate(row_scores)
            ]
            write_jsonl(path, rows)
            seed_paths.append(path)
        write_benchmark_summary(
            "math",
            seed_paths,
            {},
            metrics_path=tmp_path / model / "metrics.json",
            table_path=tmp_path / model / "metrics.txt",
            problems_path=tmp_path / model / "problems.jsonl",
        )
        paths[model] = tmp_path / model
        frame = load_judged_seeds(seed_paths)
        assert compute_metrics(frame, ["symbolic_correct"])["pass@1[avg-of-2]"]["num_entries"] == 3
    problems = [json.loads(line) for line in (paths["sft-round1"] / "problems.jsonl").read_text().splitlines()]
    assert problems == [
        {"id": "q0", "samples": 2, "symbolic_correct": 2},
        {"id": "q1", "samples": 2, "symbolic_correct": 2},
        {"id": "q2", "samples": 2, "symbolic_correct": 1},
    ]
    entry, _ = compare(
        "sft-round1", "base", "math", paths["base"] / "problems.jsonl", paths["sft-round1"] / "problems.jsonl"
    )
    headline = {
        model: json.loads((paths[model] / "metrics.json").read_text())["math"]["pass@1[avg-of-2]"]["symbolic_correct"]
        for model in paths
    }
    assert entry["gain"] == pytest.approx(headline["sft-round1"] - headline["base"])
    assert entry["flips"] == {"tuned only": 1, "base only": 0, "both": 2, "neither": 0}
    text = describe("sft-round1", entry)
    assert text.startswith("95% CI [") and "(paired bootstrap over 3 problems)" in text
    assert "solved by sft-round1 only 1, by base only 0, by both 2, by neither 0" in text


def test_a_metric_may_not_take_the_paired_comparisons_name():
    from snakeskills.results.named_metrics import check_metric

    spec = {"function": "pass_hat_k", "options": {}, "key": "metrics.paired_gain"}
    with pytest.raises(SnakeskillsError, match="config key metrics.paired_gain: 'paired_gain' names the eval's"):
        check_metric(spec)
