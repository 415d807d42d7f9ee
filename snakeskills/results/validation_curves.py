"""Learning curves on the validation split: each checkpoint of a round trained in segments
(``<method>.training.eval_every_steps``, ``plan/validation.py``) scored by its problems' pass@1 with a bootstrap
interval over problems; the round's output model chosen among its checkpoints (``<method>.select``: the last, or the
best on validation, a tie to the earlier step); and the curve as a table for eval/summary.txt."""

from __future__ import annotations

import math
import re
import shutil
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path

from snakeskills.errors import SnakeskillsError
from snakeskills.io import publish_directory, read_json, write_json
from snakeskills.results.method_comparison import segment_tokens
from snakeskills.results.metrics import aligned_rows
from snakeskills.results.paired_bootstrap import pass_at_1_interval, read_problem_scores

# a round's entries in eval/summary.json: its checkpoints' validation scores by step, and its output model's step
VALIDATION_CURVE = "validation/curve"
VALIDATION_SELECTION = "validation/selection"
METRICS_FILE = "training_metrics.json"


def checkpoint_scores(problem_paths: Sequence[str | Path], benchmarks: Sequence[str]) -> dict:
    """A checkpoint's validation scores: each benchmark's pass@1 with its interval (``pass_at_1_interval``, from the
    benchmark's problems.jsonl) and ``mean``, the benchmarks' mean pass@1 (what ``best_validation`` compares)."""
    if len(problem_paths) != len(benchmarks):
        raise ValueError(f"{len(problem_paths)} problem files for {len(benchmarks)} benchmarks")
    by_benchmark = {
        benchmark: pass_at_1_interval(read_problem_scores(path))
        for benchmark, path in zip(benchmarks, problem_paths, strict=True)
    }
    mean = math.fsum(entry["pass@1"] for entry in by_benchmark.values()) / len(by_benchmark)
    return {"benchmarks": by_benchmark, "mean": round(mean, 4)}


def choose_step(steps: Sequence[int], means: Sequence[float] | None, select: str) -> int:
    """The step a round's output model is taken from: ``last``, its last step; ``best_validation``, the step of the
    highest mean validation pass@1 (``means``, one per step), the earlier on a tie."""
    if select == "last":
        return steps[-1]
    if select != "best_validation":
        raise SnakeskillsError(f"select: {select!r} is not one of last, best_validation")
    if means is None or len(means) != len(steps):
        raise ValueError("best_validation needs one validation score per step")
    return steps[list(means).index(max(means))]


def select_checkpoint(
    *,
    checkpoints: Sequence[str | Path],
    steps: Sequence[int],
    select: str,
    validation: Sequence[str | Path] | None,
    benchmarks: Sequence[str],
    output_dir: str | Path,
    selection_path: str | Path,
) -> dict:
    """Make a segmented round's output model: a copy of the weights folder of its checkpoint at the chosen step
    (``choose_step``; ``validation``: each checkpoint's problems.jsonl per benchmark, checkpoint by checkpoint), whose
    ``training_metrics.json`` is the whole round's (the last segment's, with the log of every step, its seconds and
    tokens trained summed over the segments, the step chosen); writes ``selection_path`` saying which step and why.
    Returns the selection."""
    if len(checkpoints) != len(steps):
        raise ValueError(f"{len(checkpoints)} checkpoints for {len(steps)} steps")
    scores = None
    if validation:
        width = len(benchmarks)
        scores = [
            checkpoint_scores(validation[index * width : (index + 1) * width], benchmarks)
            for index in range(len(steps))
        ]
    step = choose_step(steps, None if scores is None else [entry["mean"] for entry in scores], select)
    chosen = Path(checkpoints[list(steps).index(step)])
    segments = [read_json(Path(folder) / METRICS_FILE) for folder in checkpoints]
    metrics = dict(segments[-1])
    runtimes = [segment.get("train_runtime") for segment in segments]
    if all(runtime is not None for runtime in runtimes):
        metrics["train_runtime"] = round(math.fsum(runtimes), 4)
    tokens = [segment_tokens(segment, start) for segment, start in zip(segments, [0, *steps[:-1]], strict=True)]
    metrics["round_train_tokens"] = None if None in tokens else sum(tokens)
    metrics["segments"] = [
        {"step": segment_step, "train_runtime": runtime, "train_tokens": segment_count}
        for segment_step, runtime, segment_count in zip(steps, runtimes, tokens, strict=True)
    ]
    selection = {
        "select": select,
        "selected_step": step,
        "last_step": steps[-1],
        "steps": list(steps),
        "validation_mean_pass@1": None if scores is None else [entry["mean"] for entry in scores],
    }
    metrics["selection"] = selection
    output_dir = Path(output_dir)
    staging = output_dir.parent / f".{output_dir.name}.staging"
    shutil.rmtree(staging, ignore_errors=True)
    shutil.copytree(chosen, staging)
    write_json(staging / METRICS_FILE, metrics)
    publish_directory(staging, output_dir)
    write_json(selection_path, selection)
    return selection


def round_curves(runs: Sequence[Sequence], problem_paths: Sequence[str | Path]) -> dict[str, list[dict]]:
    """Each round's validation curve from ``runs`` ((round, checkpoint, step, benchmark), ``Plan.validation_runs``)
    and their problems.jsonl files: {round: [{step, checkpoint, benchmarks, mean}, ...] by step}."""
    grouped: dict[str, dict[tuple[int, str], dict[str, str]]] = {}
    for (model, checkpoint, step, benchmark), path in zip(runs, problem_paths, strict=True):
        grouped.setdefault(model, {}).setdefault((int(step), checkpoint), {})[benchmark] = str(path)
    curves = {}
    for model, checkpoints in grouped.items():
        curves[model] = [
            {"step": step, "checkpoint": checkpoint, **checkpoint_scores(list(paths.values()), list(paths))}
            for (step, checkpoint), paths in sorted(checkpoints.items())
        ]
    return curves


def curve_table(curves: dict[str, list[dict]], selections: dict[str, dict]) -> str:
    """The validation curves as a table (a row per checkpoint: each benchmark's pass@1 and interval, their mean where
    there are several, the round's output model marked) and, per round, the step its output model is; empty without
    curves."""
    if not curves:
        return ""
    benchmarks = list(dict.fromkeys(name for entries in curves.values() for e in entries for name in e["benchmarks"]))
    header = ["round", "step", *benchmarks, *(["mean"] if len(benchmarks) > 1 else []), "output"]
    rows = [header]
    lines = []
    for model, entries in curves.items():
        selection = selections.get(model)
        chosen = None if selection is None else selection["selected_step"]
        for entry in entries:
            cells = [model, str(entry["step"])]
            for benchmark in benchmarks:
                score = entry["benchmarks"].get(benchmark)
                cells.append("" if score is None else _with_interval(score))
            cells += [f"{entry['mean']:.2f}"] if len(benchmarks) > 1 else []
            start = f"(start: {entry['checkpoint']})" if entry["step"] == 0 else ""
            cells.append("<-" if entry["step"] == chosen else start)
            rows.append(cells)
        if selection is not None:
            why = "its last step" if selection["select"] == "last" else "best on validation, a tie to the earlier step"
            lines.append(
                f"  {model}: the output model (evaluated on the test split, the next round's start) is step "
                f"{chosen} of {selection['last_step']} ({selection['select']}: {why})"
            )
    return (
        "\nvalidation curves (pass@1 % on the validation split by optimizer step, 95% bootstrap interval over "
        "problems; step 0: the model the round started from; <-: the round's output model)\n"
        + "\n".join(aligned_rows(rows, rule_under_header=True))
        + "\n"
        + "".join(line + "\n" for line in lines)
    )


# a job log line's time (snakeskills.job's logging format)
_LOG_TIME = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) ")


def job_log_seconds(path: str | Path) -> float | None:
    """The seconds a job ran by its log: from its first timed line to its last; None for a log without two."""
    try:
        lines = Path(path).read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return None
    times = [
        datetime.strptime(match.group(1), "%Y-%m-%d %H:%M:%S,%f") for line in lines if (match := _LOG_TIME.match(line))
    ]
    return (times[-1] - times[0]).total_seconds() if len(times) >= 2 else None


def evaluation_seconds(log_paths: Sequence[str | Path]) -> float | None:
    """The seconds the jobs of ``log_paths`` ran, summed (``job_log_seconds``); None where none of them has a log."""
    seconds = [value for value in map(job_log_seconds, log_paths) if value is not None]
    return round(math.fsum(seconds), 1) if seconds else None


def _with_interval(score: dict) -> str:
    return f"{score['pass@1']:.2f} [{score['ci_low']:.2f}, {score['ci_high']:.2f}]"


def add_validation_curves(summary: dict, curves: dict[str, list[dict]], selections: dict[str, dict]) -> None:
    """Each round's curve and selection into eval/summary.json, under its model."""
    for model, entries in curves.items():
        summary.setdefault(model, {})[VALIDATION_CURVE] = entries
    for model, selection in selections.items():
        summary.setdefault(model, {})[VALIDATION_SELECTION] = selection
