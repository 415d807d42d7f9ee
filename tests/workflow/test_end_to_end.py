"""The embedded default, run for real through `snakemake` (tiny Llama, LoRA SFT, 2 CPU cores).

These are the slow tests: one full run shared by the module (a few minutes), then dry runs on the
finished folder for rerun behaviour, and a second full run from scratch for reproducibility.
"""

from __future__ import annotations

import json

import pytest
import yaml
from conftest import DEFAULT_CONFIG, dry_run_counts, run_snakemake, write_config

from snakeskills.training.tiny_bootstrap import BOOTSTRAP_METRICS_FILE

pytestmark = pytest.mark.slow

RESULTS = "results/tiny-arithmetic"


def _summary(workdir):
    return json.loads((workdir / RESULTS / "eval/summary.json").read_text())


def test_tuned_model_beats_base_on_held_out_problems(finished_run):
    summary = _summary(finished_run)
    assert list(summary) == ["base", "sft-round1"]
    base = summary["base"]["arithmetic"]["pass@1[avg-of-4]"]
    tuned = summary["sft-round1"]["arithmetic"]["pass@1[avg-of-4]"]
    assert base["num_entries"] == tuned["num_entries"] == 500
    bootstrap = json.loads((finished_run / RESULTS / "models/base/checkpoint" / BOOTSTRAP_METRICS_FILE).read_text())
    assert bootstrap["reached_target"], bootstrap["validation_history"]
    assert 0 < base["symbolic_correct"] < 65, "the bootstrap should leave the base model with modest skill"
    assert tuned["symbolic_correct"] - base["symbolic_correct"] >= 30
    table = (finished_run / RESULTS / "eval/summary.txt").read_text()
    assert "sft-round1 vs base on arithmetic" in table
    assert "missed its target" not in table
    # the paired interval of the gain, and every problem's flip
    paired = summary["sft-round1"]["arithmetic/paired_gain"]
    assert paired["gain"] == pytest.approx(tuned["symbolic_correct"] - base["symbolic_correct"], abs=1e-6)
    assert 0 < paired["ci_low"] < paired["gain"] < paired["ci_high"] and not paired["includes_zero"]
    assert sum(paired["flips"].values()) == paired["problems"] == 500
    assert f"95% CI [{paired['ci_low']:+.2f}, {paired['ci_high']:+.2f}] (paired bootstrap over 500 problems)" in table
    flips = (finished_run / RESULTS / "eval/flips.tsv").read_text().splitlines()
    assert flips[0].split("\t") == ["model", "base_model", "benchmark", "id", "base_correct", "model_correct", "flip"]
    assert len(flips) == 501 and sum(line.endswith("\ttuned only") for line in flips) == paired["flips"]["tuned only"]


def test_records_use_nemo_skills_fields(finished_run):
    judged = finished_run / RESULTS / "judge/sft-round1/arithmetic/test/output-rs0.jsonl"
    prepared = finished_run / RESULTS / "data/arithmetic/test.jsonl"
    rows = [json.loads(line) for line in judged.read_text().splitlines()]
    prepared_ids = [json.loads(line)["id"] for line in prepared.read_text().splitlines()]
    assert [row["id"] for row in rows] == prepared_ids, "a seed's merged file keeps the prepared order"
    for field in (
        "problem",
        "expected_answer",
        "generation",
        "num_generated_tokens",
        "finish_reason",
        "random_seed",
        "predicted_answer",
        "symbolic_correct",
    ):
        assert field in rows[0]
    metrics = json.loads((finished_run / RESULTS / "metrics/base/arithmetic/test/metrics.json").read_text())
    modes = metrics["arithmetic"]
    for mode in ("pass@1[avg-of-4]", "majority@4", "pass@4", "pass@1", "majority@2"):
        assert {"num_entries", "avg_tokens", "symbolic_correct", "no_answer"} <= set(modes[mode])
    assert modes["pass@4"]["symbolic_correct"] >= modes["pass@1"]["symbolic_correct"]
    # the config's named metric (metrics.reliability: pass^k) beside the modes, and in the comparison table
    reliability = metrics["arithmetic/reliability"]
    assert list(reliability) == ["pass^1", "pass^2", "pass^3", "pass^4"]
    assert reliability["pass^1"] == pytest.approx(modes["pass@1[avg-of-4]"]["symbolic_correct"])
    assert reliability["pass^4"] <= reliability["pass^1"] <= modes["pass@4"]["symbolic_correct"]
    table = (finished_run / RESULTS / "eval/summary.txt").read_text()
    assert "arithmetic/reliability | base" in table and "pass^4" in table
    assert not list((finished_run / RESULTS).rglob("*.progress")), "progress files are removed on completion"
    assert not list((finished_run / RESULTS).rglob("*.tmp")), "no temporary files are left behind"


def test_finished_run_has_nothing_to_do(finished_run):
    process = run_snakemake(finished_run, "--dry-run")
    assert process.returncode == 0
    assert "Nothing to be done" in process.stdout + process.stderr


def test_more_seeds_schedule_only_the_new_seeds(finished_run):
    counts = dry_run_counts(finished_run, "--config", "num_seeds=6")
    new_jobs = 2 * 2 * 2  # base and sft-round1 on test, 2 new seeds, 2 chunks
    assert counts == {
        "generate": new_jobs,
        "judge": new_jobs,
        "merge_judged": 2 * 2,
        "summarize": 2,
        "eval": 1,
        # the plots of eval metrics and generation lengths; the SFT data (train split) is unchanged
        "plot_pass_at_1": 1,
        "plot_gains": 1,
        "plot_pass_at_k": 1,
        "plot_generation_lengths": 1,
        "report_samples": 1,
        "all": 1,
    }


def test_rerun_judge_reruns_judge_and_downstream_only(finished_run):
    counts = dry_run_counts(finished_run, "--forcerun", "judge")
    assert counts["judge"] == 24
    assert "prepare_data" not in counts and "build_tiny_model" not in counts
    # only the tuned model regenerates (its adapter is retrained from re-judged data)
    assert counts["generate"] == 8


@pytest.mark.parametrize(
    ("own", "expected"),
    [
        # a benchmark's own judge regex: its judge jobs and what follows them (sft-round1 is retrained on the verdicts)
        ({"judge": {"regex": "(-?\\d+)"}}, {"judge": 24, "generate": 8, "build_tiny_model": None}),
        # a benchmark's own question: every generation of it, and the tiny model bootstrapped on it is rebuilt to be
        # asked so; its prepared rows stay
        (
            {"prompt": {"user": "Compute {problem}. Put the answer in \\boxed{{}}."}},
            {"judge": 24, "generate": 24, "build_tiny_model": 1},
        ),
    ],
)
def test_a_benchmarks_own_judge_or_prompt_keeps_its_prepared_data(finished_run, tmp_path, own, expected):
    config = yaml.safe_load(DEFAULT_CONFIG.read_text())
    config["benchmarks"]["arithmetic"].update(own)
    counts = dry_run_counts(finished_run, configfile=write_config(tmp_path / "own.yaml", config))
    assert {rule: counts.get(rule) for rule in expected} == expected
    assert "prepare_data" not in counts


def test_a_new_metric_reruns_only_the_summaries(finished_run, tmp_path):
    config = yaml.safe_load(DEFAULT_CONFIG.read_text())
    config["metrics"]["lengths"] = {"function": "tokens_by_verdict"}
    counts = dry_run_counts(finished_run, configfile=write_config(tmp_path / "metric.yaml", config))
    assert counts.pop("summarize") == 3, "base and sft-round1 on the eval split, base on the train split"
    # eval rewrites eval/warnings.json, which the report's samples page shows
    assert set(counts) <= {"eval", "plot_pass_at_1", "plot_gains", "plot_pass_at_k", "report_samples", "all"}, counts


def test_changed_judge_setting_keeps_generations(finished_run):
    counts = dry_run_counts(finished_run, "--config", "judge={extraction: regex, regex: '\\\\d+'}")
    assert counts["judge"] == 24
    assert counts["generate"] == 8  # base generations are reused; sft-round1's adapter changes
