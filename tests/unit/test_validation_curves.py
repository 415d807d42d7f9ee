"""Learning curves: the steps a round is evaluated at, the checks of the validation keys, a checkpoint's pass@1 and its
interval, the choice of a round's output model, and the curve table."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from snakeskills.errors import SnakeskillsError
from snakeskills.io import read_json, write_json, write_jsonl
from snakeskills.plan.validation import check_validation, evaluated_steps
from snakeskills.results.method_comparison import trained_tokens
from snakeskills.results.paired_bootstrap import ProblemScores, pass_at_1_interval
from snakeskills.results.validation_curves import (
    choose_step,
    curve_table,
    evaluation_seconds,
    job_log_seconds,
    round_curves,
    select_checkpoint,
)


def config_with(training: dict, **top) -> dict:
    config = {
        "methods": ["sft"],
        "sft": {"training": training, "select": "last"},
        "validation_split": "validation",
        "eval_split": "test",
        "train_split": "train",
    }
    config.update(top)
    return config


@pytest.mark.parametrize(
    ("every", "max_steps", "steps"),
    [
        (20, 60, [20, 40, 60]),
        (25, 60, [25, 50, 60]),
        (60, 60, [60]),
        (100, 60, [60]),
        ([50, 5], 60, [5, 50, 60]),
        ([5, 60], 60, [5, 60]),
        (0, 60, []),
        (None, None, []),
    ],
)
def test_the_steps_evaluated_end_with_the_last_one(every, max_steps, steps):
    training = {"max_steps": max_steps} if every is None else {"max_steps": max_steps, "eval_every_steps": every}
    assert evaluated_steps(config_with(training), "sft") == steps


def test_steps_need_a_known_end_and_lie_before_it():
    with pytest.raises(SnakeskillsError, match=r"sft.training.eval_every_steps is set, but sft.training.max_steps"):
        evaluated_steps(config_with({"eval_every_steps": 10}), "sft")
    with pytest.raises(SnakeskillsError, match=r"lists step 70, past the round's last step"):
        evaluated_steps(config_with({"eval_every_steps": [10, 70], "max_steps": 60}), "sft")


@pytest.mark.parametrize(
    ("top", "message"),
    [
        ({"validation_split": "test"}, r"validation_split is 'test', the test split \(eval_split\): a model chosen"),
        ({"validation_split": "train"}, r"validation_split is 'train', the train split"),
        ({"validation_split": None}, r"eval_every_steps is set, but validation_split is not"),
    ],
)
def test_the_validation_split_is_held_out(top, message):
    with pytest.raises(SnakeskillsError, match=message):
        check_validation(config_with({"eval_every_steps": 10, "max_steps": 30}, **top))


def test_best_validation_needs_checkpoints():
    config = config_with({"max_steps": 30})
    check_validation(config)
    config["sft"]["select"] = "best_validation"
    with pytest.raises(SnakeskillsError, match=r"sft.select is best_validation, but sft.training.eval_every_steps"):
        check_validation(config)


def scores(correct: list[int], samples: int = 4) -> ProblemScores:
    return ProblemScores(
        ids=[str(index) for index in range(len(correct))],
        samples=np.full(len(correct), samples, dtype=np.int64),
        correct=np.array(correct, dtype=np.int64),
    )


def test_pass_at_1_and_its_interval():
    entry = pass_at_1_interval(scores([4, 0, 2, 1]))
    assert entry["pass@1"] == 43.75 and entry["problems"] == 4
    assert 0 <= entry["ci_low"] <= 43.75 <= entry["ci_high"] <= 100
    # every problem the same: no spread
    same = pass_at_1_interval(scores([2] * 50))
    assert same["pass@1"] == same["ci_low"] == same["ci_high"] == 50.0
    # more problems, narrower
    rng = np.random.default_rng(1)
    few, many = (pass_at_1_interval(scores(list(rng.integers(0, 5, n)))) for n in (20, 2000))
    assert many["ci_high"] - many["ci_low"] < few["ci_high"] - few["ci_low"]


def test_choice_of_the_output_step():
    assert choose_step([10, 20, 30], None, "last") == 30
    assert choose_step([10, 20, 30], [40.0, 55.5, 50.0], "best_validation") == 20
    assert choose_step([10, 20, 30], [40.0, 55.5, 55.5], "best_validation") == 20, "a tie goes to the earlier step"
    with pytest.raises(SnakeskillsError, match="not one of last, best_validation"):
        choose_step([10], [1.0], "best")


def make_checkpoint(folder: Path, step: int, runtime: float) -> Path:
    """A segment of SFT (its trainer counts tokens from its own start) that ended at ``step``, 10 steps after the
    previous one, 100 tokens a step: the log restored from the previous segment's state, then its own."""
    folder.mkdir(parents=True)
    (folder / "adapter_model.safetensors").write_bytes(f"weights of step {step}".encode())
    history = [{"step": s, "loss": 1.0 / s, "num_tokens": 100 * ((s - 1) % 10 + 1)} for s in range(1, step + 1)]
    state = f"models/sft-round1-step{step - 10}/trainer-state" if step > 10 else None
    metrics = {"global_step": step, "train_runtime": runtime, "log_history": history, "training_method": "sft"}
    write_json(
        folder / "training_metrics.json",
        {**metrics, "resumed_from_checkpoint": state, "segment": {"resumed_state": state}},
    )
    return folder


def problems_file(path: Path, correct: list[int]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    write_jsonl(path, [{"id": str(i), "samples": 4, "symbolic_correct": c} for i, c in enumerate(correct)])
    return path


@pytest.mark.parametrize(("select", "chosen"), [("best_validation", 20), ("last", 30)])
def test_the_round_output_is_the_chosen_checkpoint_with_the_whole_rounds_metrics(tmp_path, select, chosen):
    steps = [10, 20, 30]
    checkpoints = [make_checkpoint(tmp_path / f"step{s}", s, runtime=s / 10) for s in steps]
    # two benchmarks; step 20 is best on their mean, step 30 best on the first alone
    correct = {10: ([1, 1], [1, 1]), 20: ([3, 3], [4, 4]), 30: ([4, 4], [0, 1])}
    validation = [
        problems_file(tmp_path / f"v{s}-{b}.jsonl", correct[s][i]) for s in steps for i, b in enumerate(["a", "b"])
    ]
    output, selection_path = tmp_path / "round" / "adapter", tmp_path / "round" / "selection.json"
    selection = select_checkpoint(
        checkpoints=checkpoints,
        steps=steps,
        select=select,
        validation=validation if select == "best_validation" else None,
        benchmarks=["a", "b"],
        output_dir=output,
        selection_path=selection_path,
    )
    assert selection["selected_step"] == chosen and read_json(selection_path) == selection
    assert (output / "adapter_model.safetensors").read_bytes() == f"weights of step {chosen}".encode()
    metrics = read_json(output / "training_metrics.json")
    assert metrics["global_step"] == 30 and len(metrics["log_history"]) == 30, "the whole round's log"
    assert metrics["train_runtime"] == pytest.approx(6.0), "every segment's seconds"
    assert trained_tokens(metrics) == 3000, "every segment's tokens"
    assert metrics["selection"]["selected_step"] == chosen
    if select == "best_validation":
        assert selection["validation_mean_pass@1"] == [25.0, 87.5, 56.25]
    assert not list(tmp_path.glob("round/.*")), "no staging folder left"


def test_the_curve_table_marks_the_output_step(tmp_path):
    runs, paths = [], []
    for step, correct in ((10, [1, 2]), (20, [4, 3])):
        runs.append(("sft-round1", f"sft-round1-step{step}", step, "arithmetic"))
        paths.append(problems_file(tmp_path / f"{step}.jsonl", correct))
    curves = round_curves(runs, paths)
    assert [entry["step"] for entry in curves["sft-round1"]] == [10, 20]
    assert curves["sft-round1"][1]["benchmarks"]["arithmetic"]["pass@1"] == 87.5
    selection = {"select": "best_validation", "selected_step": 20, "last_step": 20}
    table = curve_table(curves, {"sft-round1": selection})
    lines = table.strip().splitlines()
    assert lines[0].startswith("validation curves (pass@1 % on the validation split")
    assert lines[3].split("|")[1].strip() == "10" and lines[4].rstrip().endswith("<-")
    assert "37.50 [" in lines[3] and "87.50 [" in lines[4]
    assert (
        "sft-round1: the output model (evaluated on the test split, the next round's start) is step 20 of 20" in table
    )
    assert curve_table({}, {}) == ""
    json.dumps(curves)  # summary.json holds it
    # step 0: the model the round started from
    start = round_curves([("sft-round1", "base", 0, "arithmetic")], [paths[0]])
    assert "(start: base)" in curve_table(start, {})


def test_a_jobs_seconds_from_its_log(tmp_path):
    log = tmp_path / "job.log"
    log.write_text(
        "2026-12-07 16:23:20,152 snakeskills INFO: generating\n"
        "a traceback line without a time\n"
        "2026-12-07 16:23:21,652 snakeskills INFO: job finished\n"
    )
    one_line = tmp_path / "short.log"
    one_line.write_text("2026-12-07 16:23:20,152 snakeskills INFO: started\n")
    assert job_log_seconds(log) == 1.5
    assert job_log_seconds(one_line) is None and job_log_seconds(tmp_path / "missing.log") is None
    assert evaluation_seconds([log, log, one_line]) == 3.0 and evaluation_seconds([one_line]) is None
