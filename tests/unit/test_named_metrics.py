"""Metrics chosen by name (config ``metrics``): the built-in ones against hand-computed values and the summaries of
the same problems, a user's own ``module:function``, plan-time errors naming the key, and where the values land
(metrics.json, metrics.txt, the comparison table, the report's benchmarks)."""

from __future__ import annotations

import json
import math
import random
import sys

import pytest
import yaml
from conftest import DEFAULT_CONFIG, checked_config
from test_metrics import assert_same_metrics, code_row, random_problems, write_seed_files

from snakeskills.errors import SnakeskillsError
from snakeskills.plan.sections import benchmark_metrics
from snakeskills.results.comparison import write_comparison
from snakeskills.results.metrics import headline_modes
from snakeskills.results.named_metrics import (
    by_field,
    check_metric,
    compute_named_metrics,
    pass_hat_k,
    tokens_by_verdict,
)
from snakeskills.results.report import _benchmarks
from snakeskills.results.summarize import summarize_benchmark, write_benchmark_summary


def rows(correct: list[list[bool]], **fields) -> list[list[dict]]:
    """``problems[p][s]`` with the given verdicts, answers equal to the verdict, 10 tokens a sample."""
    return [
        [
            {
                "id": f"p{index}",
                "predicted_answer": str(verdict),
                "symbolic_correct": verdict,
                "num_generated_tokens": 10,
                **{field: values[index] for field, values in fields.items()},
            }
            for verdict in samples
        ]
        for index, samples in enumerate(correct)
    ]


# ---------------------------------------------------------------- the built-in metrics


def test_pass_hat_k_by_hand_and_its_first_value_is_pass_at_1():
    # n=4; c = 4, 2, 0 correct: pass^k = C(c, k) / C(4, k) averaged over problems
    problems = rows([[True] * 4, [True, False, True, False], [False] * 4])
    result = pass_hat_k(problems)
    assert list(result) == ["pass^1", "pass^2", "pass^3", "pass^4"]
    assert result["pass^1"] == pytest.approx(100 * (1 + 2 / 4 + 0) / 3)
    assert result["pass^2"] == pytest.approx(100 * (1 + 1 / 6 + 0) / 3)
    assert result["pass^3"] == pytest.approx(100 / 3)
    assert result["pass^4"] == pytest.approx(100 / 3)


def test_pass_hat_k_equals_pass_at_1_on_random_problems(tmp_path):
    problems = random_problems(random.Random(3), 40, 5, judge=True)
    paths = write_seed_files(tmp_path, problems)
    modes = summarize_benchmark("b", paths)["b"]
    for score in ("symbolic_correct", "judge_correct"):
        result = pass_hat_k(problems, score=score)
        assert result["pass^1"] == pytest.approx(modes["pass@1[avg-of-5]"][score])
        # the chance that all k are right never exceeds the chance that one is, nor grows with k
        values = list(result.values())
        assert values == sorted(values, reverse=True)
        # all 5 right: exactly the problems every seed solved
        all_right = sum(all(row[score] for row in samples) for samples in problems)
        assert result["pass^5"] == pytest.approx(100 * all_right / 40)


def test_by_field_gives_each_groups_headline_modes_as_a_summary_of_that_group_alone(tmp_path):
    """Each level's numbers are those summarize gives when only that level's problems are in the files."""
    rng = random.Random(5)
    problems = random_problems(rng, 60, 4, judge=False)
    for samples in problems:
        level = rng.choice([1, 2, 3, 10])  # numbers sort as numbers: 10 after 3
        for row in samples:
            row["level"] = level
    result = by_field(problems, field="level")
    assert list(result) == ["1", "2", "3", "10"]
    assert sum(group["num_entries"] for group in result.values()) == 60
    for level, group in result.items():
        chosen = [samples for samples in problems if str(samples[0]["level"]) == level]
        alone = summarize_benchmark("b", write_seed_files(tmp_path / level, chosen))["b"]
        modes = headline_modes(alone)
        assert modes == ["pass@1[avg-of-4]", "majority@4", "pass@4"]
        assert group == {"num_entries": len(chosen), **{mode: alone[mode]["symbolic_correct"] for mode in modes}}


def test_by_field_of_code_rows_votes_on_what_the_programs_did(tmp_path):
    """majority@k of a code benchmark's group votes on behaviour, as summarize's does."""
    wrong = "case 2 of 3: wrong output (expected '6', got '5')"
    samples = [
        code_row("p0", "print(int(input()) + 1)", "passed"),
        code_row("p0", "print(5)", "failed", wrong),
        code_row("p0", "x = 5\nprint(x)", "failed", wrong),
    ]
    problems = [[{**row, "difficulty": "easy"} for row in samples]]
    alone = summarize_benchmark("b", write_seed_files(tmp_path, problems))["b"]
    group = by_field(problems, field="difficulty")["easy"]
    assert group["majority@3"] == alone["majority@3"]["symbolic_correct"] == 0.0


def test_tokens_by_verdict():
    problems = rows([[True, False], [False, False]])
    for index, samples in enumerate(problems):
        for seed, row in enumerate(samples):
            row["num_generated_tokens"] = 10 * (1 + index) + seed  # p0: 10, 11; p1: 20, 21
    assert tokens_by_verdict(problems) == {
        "correct_tokens": 10.0,
        "correct_samples": 1,
        "incorrect_tokens": (11 + 20 + 21) / 3,
        "incorrect_samples": 3,
    }
    none_right = tokens_by_verdict(rows([[False]]))
    assert none_right["correct_tokens"] is None and none_right["correct_samples"] == 0


def test_a_missing_field_or_score_is_named():
    problems = rows([[True]], level=[1])
    with pytest.raises(SnakeskillsError, match=r"problem 'p0' has no field 'subject'; its fields: .*level"):
        by_field(problems, field="subject")
    with pytest.raises(SnakeskillsError, match=r"no score column 'judge_correct'; they have symbolic_correct"):
        pass_hat_k(problems, score="judge_correct")


# ---------------------------------------------------------------- the config: names, options, a user's own

MY_METRICS = '''
def hardest(problems, *, top=2):
    """The ids of the problems with the fewest correct samples."""
    solved = sorted(problems, key=lambda samples: sum(row["symbolic_correct"] for row in samples))
    return {"ids": [samples[0]["id"] for samples in solved[:top]], "problems": len(problems)}


def not_a_dict(problems):
    return [1, 2]


def not_json(problems):
    return {"value": float("nan")}
'''


@pytest.fixture
def my_metrics(tmp_path, monkeypatch):
    (tmp_path / "my_metrics.py").write_text(MY_METRICS)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "my_metrics"
    sys.modules.pop("my_metrics", None)


def config_with(metrics: dict, own: dict | None = None) -> dict:
    config = yaml.safe_load(DEFAULT_CONFIG.read_text())
    config["metrics"] = metrics
    if own is not None:
        config["benchmarks"]["arithmetic"]["metrics"] = own
    return config


def test_a_benchmarks_own_metrics_add_to_replace_or_drop_the_top_level_ones(my_metrics):
    config = checked_config(
        config_with(
            {"reliable": {"function": "pass_hat_k"}, "lengths": {"function": "tokens_by_verdict"}},
            own={"lengths": None, "hard": {"function": "my_metrics:hardest", "top": 3}},
        )
    )
    assert benchmark_metrics(config, "arithmetic") == {
        "reliable": {"function": "pass_hat_k", "options": {}, "key": "metrics.reliable"},
        "hard": {
            "function": "my_metrics:hardest",
            "options": {"top": 3},
            "key": "benchmarks.arithmetic.metrics.hard",
        },
    }


@pytest.mark.parametrize(
    ("metrics", "message"),
    [
        (
            {"levels": {"function": "by_field"}},
            r"config key metrics\.levels: metric 'by_field' needs option 'field' \(it takes: field, score\)",
        ),
        (
            {"levels": {"function": "by_field", "feild": "level"}},
            r"config key metrics\.levels\.feild: metric 'by_field' has no option 'feild'; did you mean 'field'\? "
            "it takes: field, score",
        ),
        (
            {"x": {"function": "pass_hat"}},
            r"config key metrics\.x\.function: 'pass_hat' is not one of by_field, "
            "pass_hat_k, tokens_by_verdict, or your own function as module:function",
        ),
        ({"x": {"score": "judge_correct"}}, r"config key metrics\.x lacks required key\(s\): function"),
        (
            {"x": {"function": "my_metrics:hardest", "bottom": 1}},
            r"metrics\.x\.bottom: metric 'my_metrics:hardest' has no option 'bottom'; it takes: top",
        ),
        (
            {"x": {"function": "my_metrics:easiest"}},
            r"metrics\.x\.function: 'my_metrics:easiest': module "
            "'my_metrics' has no function 'easiest'",
        ),
        (
            {"x": {"function": "nowhere:easiest"}},
            r"metrics\.x\.function: 'nowhere:easiest': module 'nowhere' does "
            "not import",
        ),
        ({"a/b": {"function": "pass_hat_k"}}, r"config key metrics: 'a/b': does not match"),  # '/' is the separator
    ],
)
def test_metric_mistakes_stop_the_plan_naming_the_key(my_metrics, metrics, message):
    with pytest.raises(SnakeskillsError, match=message):
        checked_config(config_with(metrics))


def test_a_users_metric_gets_the_judged_rows_and_its_options(my_metrics, tmp_path):
    problems = rows([[True, True], [False, False], [True, False]])
    paths = write_seed_files(tmp_path, problems)
    specs = {"hard": {"function": "my_metrics:hardest", "options": {"top": 2}, "key": "metrics.hard"}}
    check_metric(specs["hard"])
    assert compute_named_metrics("b", specs, paths) == {"b/hard": {"ids": ["p1", "p2"], "problems": 3}}


@pytest.mark.parametrize(
    ("function", "message"),
    [
        ("my_metrics:not_a_dict", r"config key metrics\.m: metric 'my_metrics:not_a_dict' returned list, not a dict"),
        ("my_metrics:not_json", r"config key metrics\.m: metric 'my_metrics:not_json' returned what JSON cannot hold"),
        ("by_field", r"config key metrics\.m: by_field: judged row of problem 'p0' has no field 'level'"),
    ],
)
def test_a_metric_that_fails_or_returns_what_json_cannot_hold_names_its_key(my_metrics, tmp_path, function, message):
    paths = write_seed_files(tmp_path, rows([[True]]))
    options = {"field": "level"} if function == "by_field" else {}
    with pytest.raises(SnakeskillsError, match=message):
        compute_named_metrics("b", {"m": {"function": function, "options": options, "key": "metrics.m"}}, paths)


# ---------------------------------------------------------------- where the values land


def test_named_metrics_in_metrics_json_the_tables_and_not_among_the_reports_benchmarks(tmp_path):
    specs = {
        "reliable": {"function": "pass_hat_k", "options": {}, "key": "metrics.reliable"},
        "by_level": {"function": "by_field", "options": {"field": "level"}, "key": "metrics.by_level"},
    }
    runs, metrics_paths = [], []
    for model, correct in (("base", [[False, True], [False, False]]), ("sft-round1", [[True, True], [True, False]])):
        paths = write_seed_files(tmp_path / model, rows(correct, level=[1, 2]))
        metrics_path = tmp_path / model / "metrics.json"
        table = write_benchmark_summary(
            "math",
            paths,
            specs,
            metrics_path=metrics_path,
            table_path=tmp_path / model / "metrics.txt",
            problems_path=tmp_path / model / "problems.jsonl",
        )
        metrics = json.loads(metrics_path.read_text())
        assert list(metrics) == ["math", "math/reliable", "math/by_level"]
        assert_same_metrics(metrics["math"], summarize_benchmark("math", paths)["math"])
        assert "math/reliable:\n  pass^1 | " in table and "  1 / pass@1[avg-of-2] | " in table
        runs.append((model, "math"))
        metrics_paths.append(metrics_path)
    comparison = write_comparison(
        runs=runs,
        metrics_paths=metrics_paths,
        problem_paths=[tmp_path / model / "problems.jsonl" for model, _ in runs],
        base_model="base",
        teacher=None,
        summary_path=tmp_path / "summary.json",
        table_path=tmp_path / "summary.txt",
        flips_path=tmp_path / "flips.tsv",
    )
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert list(summary["sft-round1"]) == ["math", "math/reliable", "math/by_level", "math/paired_gain"]
    assert _benchmarks(summary) == ["math"], "the report plots benchmarks only"
    assert "sft-round1 vs base on math: pass@1[avg-of-2] symbolic_correct +50.00 points" in comparison
    lines = comparison.splitlines()
    assert "math/reliable | base  | sft-round1" in lines
    assert "pass^2        | 0.00  | 50.00" in lines
    assert "2 / pass@1[avg-of-2] | 0.00   | 50.00" in lines
    assert math.isclose(summary["sft-round1"]["math/by_level"]["1"]["pass@2"], 100.0)
