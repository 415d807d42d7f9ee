"""Warnings where a run is weak: too little SFT data, truncated or unanswered samples, in job logs and the
comparison; a job stopped by Ctrl-C."""

from __future__ import annotations

import subprocess
import sys

from snakeskills.plan.config import default_config
from snakeskills.results.run_warnings import (
    format_warnings,
    metrics_warnings,
    optimizer_steps,
    sft_warnings,
    training_warnings,
)

THRESHOLDS = default_config()["warnings"]
TRAINING = {"num_epochs": 1, "batch_size": 4}


def test_defaults_are_in_the_schema():
    assert THRESHOLDS == {
        "min_sft_examples": 32,
        "min_sft_problems": 8,
        "min_optimizer_steps": 10,
        "max_truncated_share": 25,
        "max_no_answer_share": 25,
    }


def test_optimizer_steps_follow_epochs_and_batches():
    assert optimizer_steps(11, {"num_epochs": 1, "batch_size": 4}) == 3
    assert optimizer_steps(11, {"num_epochs": 2.5, "batch_size": 4}) == 8
    assert optimizer_steps(64, {"num_epochs": 3, "batch_size": 16}) == 12


def test_a_round_with_few_examples_warns_once_naming_each_shortfall():
    stats = {"kept": 11, "problems_covered": 9, "judged": 800}
    (line,) = sft_warnings("round1", stats, TRAINING, THRESHOLDS)
    assert line.startswith("warning: round1 trains on 11 SFT examples of 9 problems (800 samples judged), 3 optimizer")
    assert "11 SFT examples (warnings.min_sft_examples 32)" in line
    assert "3 optimizer steps (warnings.min_optimizer_steps 10)" in line
    assert "min_sft_problems" not in line, "9 problems is above the threshold of 8"
    enough = {"kept": 400, "problems_covered": 120, "judged": 800}
    assert sft_warnings("round1", enough, TRAINING, THRESHOLDS) == []
    assert (
        sft_warnings("round1", stats, TRAINING, {**THRESHOLDS, "min_sft_examples": 0, "min_optimizer_steps": 0}) == []
    )


def test_a_dpo_or_grpo_round_on_little_data_warns():
    # what a SmolLM2 run on 2-digit subtraction, a task it almost never solves, trained on
    dpo = {"method": "dpo", "round": 1, "examples": 14, "problems": 5, "optimizer_steps": 2, "wall_seconds": 9.0}
    (line,) = training_warnings("dpo-round1", dpo, THRESHOLDS)
    assert line.startswith("warning: dpo-round1 trains on 14 DPO pairs of 5 problems in 2 optimizer steps: too few")
    assert "14 DPO pairs (warnings.min_sft_examples 32)" in line and "sample more seeds" in line
    grpo = {**dpo, "method": "grpo", "examples": 6, "problems": 6}
    (line,) = training_warnings("grpo-round1", grpo, THRESHOLDS)
    assert "6 GRPO problems of 6 problems" in line and "min_sft_examples" not in line, "problems, not pairs"
    assert "widen the range" in line
    enough = {**dpo, "examples": 4773, "problems": 2423, "optimizer_steps": 300}
    assert training_warnings("dpo-round1", enough, THRESHOLDS) == []


def test_truncated_and_unanswered_shares_over_their_thresholds_warn():
    metrics = {
        "pass@1[avg-of-4]": {"symbolic_correct": 5.0, "no_answer": 89.0, "truncated": 66.0},
        "majority@4": {"symbolic_correct": 5.0, "no_answer": 80.0},
        "pass@4": {"symbolic_correct": 10.0, "no_answer": 70.0},
    }
    truncated, unanswered = metrics_warnings("base", "mmlu", "test", metrics, THRESHOLDS)
    assert truncated.startswith("warning: base on mmlu (test): 66.0% of samples hit max_new_tokens")
    assert "(warnings.max_truncated_share 25%)" in truncated
    assert unanswered.startswith("warning: base on mmlu (test): 89.0% of samples give no answer the judge can read")
    calm = {mode: {**values, "no_answer": 1.0, "truncated": 2.0} for mode, values in metrics.items()}
    assert metrics_warnings("base", "mmlu", "test", calm, THRESHOLDS) == []
    without_reasons = {mode: {"symbolic_correct": 5.0, "no_answer": 0.0} for mode in metrics}
    assert metrics_warnings("base", "mmlu", "test", without_reasons, THRESHOLDS) == []


def test_the_comparison_section_lists_every_warning_or_nothing():
    assert format_warnings([]) == ""
    section = format_warnings(["warning: a", "warning: b"])
    assert section == "\nwarnings (2):\n  a\n  b\n"


def test_ctrl_c_ends_a_job_with_one_log_line_and_status_130(tmp_path):
    """A job interrupted inside ``script_logging`` (as Ctrl-C interrupts every job of the terminal) prints no
    traceback, logs what is kept and how to resume, and exits 130."""
    log = tmp_path / "job.log"
    code = (
        "from snakeskills.job import script_logging\n"
        f"with script_logging({str(log)!r}) as logger:\n"
        "    logger.info('working')\n"
        "    raise KeyboardInterrupt\n"
    )
    process = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert process.returncode == 130
    assert process.stdout == process.stderr == ""
    text = log.read_text()
    assert "Traceback" not in text
    assert "WARNING: interrupted (Ctrl-C): the job stopped; its finished work is kept" in text
    assert "run the same command again to resume" in text
