"""Learning curves in the DAG (``<method>.training.eval_every_steps``, ``validation_split``, ``<method>.select``).

Fast: the plan (the checkpoints of each round, the segment each resumes, what the selection reads, the targets, the
test split evaluated for the rounds only) and the DAG of a dry run. Slow: the tiny methods example with sft and grpo
evaluated every few steps, continued from the default run up to grpo's first checkpoint evaluated, then killed
(SIGKILL of the whole process group) while a later segment trains, then rerun: the rerun evaluates no finished
checkpoint again (counted from Snakemake's own logs); each method has its curve in eval/summary.txt, summary.json and
the report's figure, the step chosen on validation is printed, and the test split is evaluated for the rounds' output
models only. Then ``-R sft`` trains sft's segments again to the same weights, and their evaluations are reused.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
import yaml
from conftest import REPO, checked_plan, dry_run_counts, run_snakemake, write_config

from snakeskills.errors import SnakeskillsError
from snakeskills.io import read_json
from snakeskills.job import snakemake_command

EXAMPLE = REPO / "config" / "examples" / "tiny-arithmetic-sft-dpo-kto-grpo.yaml"


def curves_config(**top) -> dict:
    """The shipped methods example with sft and grpo only, each evaluated on the validation split every few steps
    and its output model chosen there."""
    config = yaml.safe_load(EXAMPLE.read_text())
    del config["dpo"], config["kto"]
    config.update(methods=["sft", "grpo"], validation_split="validation")
    config["sft"]["training"].update(max_steps=40, eval_every_steps=20)
    config["grpo"]["training"].update(max_steps=24, eval_every_steps=8)
    config["sft"]["select"] = config["grpo"]["select"] = "best_validation"
    config.update(top)
    return config


def test_each_round_is_trained_in_segments_evaluated_on_validation():
    plan = checked_plan(curves_config(rounds=2))
    assert plan.curves.round_checkpoints("grpo-round2") == [
        "grpo-round2-step8",
        "grpo-round2-step16",
        "grpo-round2-step24",
    ]
    assert plan.curves.validated_rounds() == plan.tuned_models
    results = "results/tiny-arithmetic-methods"
    # a segment resumes the previous one's trainer state; round 2's first starts from round 1's output model
    assert plan.curves.segment_resume("grpo-round2-step8") == []
    assert plan.curves.segment_resume("grpo-round2-step16") == [f"{results}/models/grpo-round2-step8/trainer-state"]
    assert plan.training_data("sft-round2-step20") == f"{results}/sft/sft-round2/data.jsonl"
    assert plan.generation_adapter_path("sft-round1-step20") == f"{results}/models/sft-round1-step20/adapter"
    assert plan.curves.selection_inputs("sft-round1") == {
        "checkpoints": [f"{results}/models/sft-round1-step20/adapter", f"{results}/models/sft-round1-step40/adapter"],
        "validation": [
            f"{results}/metrics/sft-round1-step20/arithmetic/validation/problems.jsonl",
            f"{results}/metrics/sft-round1-step40/arithmetic/validation/problems.jsonl",
        ],
    }
    # the test split: the base model and each round's output model, never a checkpoint
    assert plan.eval_models == ["base", "sft-round1", "sft-round2", "grpo-round1", "grpo-round2"]
    targets = plan.targets()
    assert f"{results}/metrics/grpo-round2-step16/arithmetic/validation/problems.jsonl" in targets
    assert f"{results}/models/sft-round2/selection.json" in targets
    assert f"{results}/report/validation_curves.png" in targets
    assert not any("/test/" in target and "-step" in target for target in targets)
    # select last waits for no validation
    config = curves_config()
    config["sft"]["select"] = "last"
    assert set(checked_plan(config).curves.selection_inputs("sft-round1")) == {"checkpoints"}


def test_without_eval_every_steps_the_plan_is_as_before():
    config = curves_config()
    for method in ("sft", "grpo"):
        del config[method]["training"]["eval_every_steps"]
        config[method]["select"] = "last"
    plan = checked_plan(config)
    assert (
        plan.curves.validated_rounds() == []
        and plan.curves.checkpoint_models() == []
        and plan.curves.selection_files() == []
    )
    assert "validation_curves" not in plan.report_plots
    settings = plan.training_for("sft-round1").training_config(gpus_available=False)
    assert "eval_every_steps" not in settings["training"], "a rule's params hold no key that decides no weights"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"validation_split": "test"}, "validation_split is 'test', the test split"),
        ({"validation_split": "holdout"}, "holdout"),
    ],
)
def test_validation_mistakes_stop_the_plan(change, message):
    with pytest.raises(SnakeskillsError, match=message):
        checked_plan(curves_config(**change))


def test_dry_run_plans_a_job_per_segment_and_one_selection_per_round(tmp_path):
    config = write_config(tmp_path / "curves.yaml", curves_config())
    counts = dry_run_counts(tmp_path, configfile=config)
    assert counts["sft"] == 2 and counts["grpo"] == 3
    assert counts["select_sft"] == counts["select_grpo"] == 1
    # base on train, test and validation (each curve's step 0); sft-round1 and grpo-round1 on test; 5 checkpoints
    # on validation
    assert counts["summarize"] == 3 + 2 + 5
    assert counts["plot_validation_curves"] == 1 and counts["eval"] == 1


# ---------------------------------------------------------------- for real, killed and rerun

RESULTS = "results/tiny-arithmetic"


def evaluated_jobs(log_text: str) -> list[tuple[str, str]]:
    """(rule, model) of every generate, judge and summarize job on the validation split a Snakemake log lists."""
    jobs = []
    for block in re.split(r"\n(?=(?:local)?rule \S+:\n)", log_text):
        header = re.match(r"(?:local)?rule (generate|judge|summarize|merge_judged):\n", block)
        wildcards = re.search(r"^\s+wildcards: (.*)$", block, flags=re.MULTILINE)
        if header and wildcards:
            values = dict(item.split("=", 1) for item in wildcards.group(1).split(", "))
            if values.get("split") == "validation":
                jobs.append((header.group(1), values["model"]))
    return jobs


def run_log(workdir: Path, before: set[Path]) -> str:
    """The text of the Snakemake log the last run wrote (.snakemake/log/)."""
    logs = set((workdir / ".snakemake" / "log").glob("*.snakemake.log")) - before
    assert len(logs) == 1, logs
    return logs.pop().read_text()


@pytest.fixture(scope="module")
def curves_run(finished_run, tmp_path_factory) -> dict:
    """The curves config continued from the default run's results: first to grpo's first checkpoint evaluated
    (``--notemp``: its trainer state stays for the next segment), then the whole run, killed with SIGKILL while a later
    segment trains, then rerun to the end."""
    workdir = tmp_path_factory.mktemp("curves-run")
    shutil.copytree(finished_run / "results", workdir / "results", symlinks=True)
    # 2 seeds a problem (the default run's first two on the test split are reused): half the validation jobs
    config = curves_config(experiment="tiny-arithmetic", num_seeds=2)
    config["grpo"]["training"]["max_steps"] = 16  # two segments of grpo: one to finish first, one to kill
    configfile = write_config(workdir / "curves.yaml", config)
    results = workdir / RESULTS
    logs = workdir / ".snakemake" / "log"
    first = f"{RESULTS}/metrics/grpo-round1-step8/arithmetic/validation/problems.jsonl"
    started = run_snakemake(workdir, "--cores", "2", "--notemp", first, configfile=configfile)
    assert started.returncode == 0, started.stdout[-5000:] + started.stderr[-5000:]
    command = snakemake_command(REPO / "Snakefile", workdir, configfile, "--cores", "2")
    process = subprocess.Popen(
        command, cwd=workdir, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )

    def segment_training() -> bool:  # a segment job that started (its log) and has not finished
        return any(
            "job finished" not in log.read_text(errors="replace")
            for log in (*results.glob("logs/sft/*-step*.log"), *results.glob("logs/grpo/*-step*.log"))
        )

    deadline = time.monotonic() + 900
    killed_with: set[str] = set()
    while time.monotonic() < deadline and process.poll() is None:
        if segment_training():
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            killed_with = {path.parts[-4] for path in results.glob("metrics/*/arithmetic/validation/problems.jsonl")}
            break
        time.sleep(0.2)
    assert killed_with, "the run ended (or timed out) before a later segment trained"
    first_logs = set(logs.glob("*.snakemake.log"))
    assert run_snakemake(workdir, "--unlock", configfile=configfile).returncode == 0
    before = set(logs.glob("*.snakemake.log"))
    rerun = run_snakemake(workdir, "--cores", "2", "--rerun-incomplete", configfile=configfile)
    assert rerun.returncode == 0, rerun.stdout[-5000:] + rerun.stderr[-5000:]
    return {
        "results": results,
        "killed_with": killed_with,
        "first_log": "".join(path.read_text() for path in first_logs),
        "rerun_log": run_log(workdir, before),
        "stdout": rerun.stdout + rerun.stderr,
    }


@pytest.mark.slow
def test_a_rerun_after_a_kill_evaluates_no_finished_checkpoint_again(curves_run):
    assert "grpo-round1-step8" in curves_run["killed_with"]
    again = {model for _, model in evaluated_jobs(curves_run["rerun_log"])} & curves_run["killed_with"]
    assert not again, f"evaluated again after the kill: {sorted(again)}"
    first = {model for _, model in evaluated_jobs(curves_run["first_log"])}
    assert curves_run["killed_with"] <= first, "the first run evaluated them"
    # every checkpoint was evaluated, in the one run or the other
    evaluated = first | {model for _, model in evaluated_jobs(curves_run["rerun_log"])}
    checkpoints = {"sft-round1-step20", "sft-round1-step40", "grpo-round1-step8", "grpo-round1-step16"}
    assert evaluated == {"base", *checkpoints}, "each checkpoint, and the base model as the curves' step 0"


@pytest.mark.slow
def test_each_method_has_its_curve_and_the_chosen_step_is_evaluated_on_test(curves_run):
    results = curves_run["results"]
    summary = read_json(results / "eval" / "summary.json")
    table = (results / "eval" / "summary.txt").read_text()
    assert "validation curves (pass@1 % on the validation split" in table
    for model, steps in (("sft-round1", [20, 40]), ("grpo-round1", [8, 16])):
        curve = summary[model]["validation/curve"]
        assert [entry["step"] for entry in curve] == [0, *steps] and curve[0]["checkpoint"] == "base"
        selection = read_json(results / "models" / model / "selection.json")
        means = [entry["mean"] for entry in curve[1:]]
        assert selection["selected_step"] == steps[means.index(max(means))]
        assert summary[model]["validation/selection"] == selection
        assert f"{model}: the output model (evaluated on the test split, the next round's start) is step " in table
        # the output model is the chosen checkpoint's weights
        chosen = results / "models" / f"{model}-step{selection['selected_step']}" / "adapter"
        output = results / "models" / model / "adapter"
        assert (output / "adapter_model.safetensors").read_bytes() == (
            chosen / "adapter_model.safetensors"
        ).read_bytes()
        metrics = read_json(output / "training_metrics.json")
        assert metrics["global_step"] == steps[-1] and len(metrics["segments"]) == len(steps)
        assert any(entry.get("step") == steps[-1] for entry in metrics["log_history"]), "the whole round's log"
        # the test split: the round's output model only, once
        assert (results / "metrics" / model / "arithmetic" / "test" / "metrics.json").exists()
    assert not list(results.glob("metrics/*-step*/arithmetic/test"))
    assert (results / "report" / "validation_curves.png").stat().st_size > 10_000
    assert summary["grpo-round1"]["training/cost"]["validation_seconds"] > 0
    # the tokens every segment trained, whether its trainer counts from its own start (SFT) or from the state (GRPO)
    assert all(summary[model]["training/cost"]["train_tokens"] > 0 for model in ("sft-round1", "grpo-round1"))
    # the trainer states between segments are gone once the next segment has read them
    assert not list(results.glob("models/*/trainer-state"))


@pytest.mark.slow
def test_a_round_retrained_to_the_same_weights_reuses_its_evaluations(curves_run):
    """``-R sft`` trains sft's segments again, to the same weights bit for bit (SFT resumes exactly): their generate
    jobs take the rows of the earlier run back without loading the model, and the curve is the same."""
    results = curves_run["results"]
    workdir = results.parents[1]
    before = read_json(results / "eval" / "summary.json")["sft-round1"]["validation/curve"]
    rerun = run_snakemake(workdir, "--cores", "2", "--forcerun", "sft", configfile=workdir / "curves.yaml")
    assert rerun.returncode == 0, rerun.stdout[-5000:] + rerun.stderr[-5000:]
    logs = sorted(results.glob("logs/generate/sft-round1-step*/arithmetic/validation/rs*/*.log"))
    assert len(logs) == 2 * 2 * 2, logs  # 2 checkpoints x 2 seeds x 2 chunks, each run again
    assert all("reused the rows of an earlier run of this job" in log.read_text() for log in logs)
    assert read_json(results / "eval" / "summary.json")["sft-round1"]["validation/curve"] == before
