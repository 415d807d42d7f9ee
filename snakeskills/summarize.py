"""Summaries: judged seed files -> ``metrics.json``; per-model metrics -> one comparison table."""

from __future__ import annotations

from pathlib import Path

import polars as pl

from snakeskills.errors import SnakeskillsError
from snakeskills.io import iter_jsonl
from snakeskills.metrics import compute_metrics, format_value, headline_modes

SCORE_COLUMNS = ("symbolic_correct", "judge_correct")


def load_judged_seeds(seed_paths: list[str | Path]) -> pl.DataFrame:
    """One frame over all seeds; each seed file must list the same problem ids in the same order."""
    frames = []
    reference_ids = None
    for sample_index, path in enumerate(seed_paths):
        rows = list(iter_jsonl(path))
        if not rows:
            raise SnakeskillsError(f"{path}: judged file is empty")
        for line_number, row in enumerate(rows, start=1):
            for field in ("id", "predicted_answer", "symbolic_correct", "num_generated_tokens"):
                if field not in row:
                    raise SnakeskillsError(f"{path}:{line_number}: judged row lacks field {field!r}")
        ids = [row["id"] for row in rows]
        if reference_ids is None:
            reference_ids = ids
        elif ids != reference_ids:
            raise SnakeskillsError(
                f"{path}: problem ids differ from {seed_paths[0]}; seed files must line up row by row"
            )
        columns = {
            "problem_index": list(range(len(rows))),
            "sample_index": [sample_index] * len(rows),
            "predicted_answer": [
                None if row["predicted_answer"] is None else str(row["predicted_answer"]) for row in rows
            ],
            "num_generated_tokens": [int(row["num_generated_tokens"]) for row in rows],
        }
        for score in SCORE_COLUMNS:
            if score in rows[0]:
                columns[score] = [bool(row[score]) for row in rows]
        frames.append(pl.DataFrame(columns, schema_overrides={"predicted_answer": pl.String}))
    return pl.concat(frames, how="vertical")


def summarize_benchmark(benchmark: str, seed_paths: list[str | Path]) -> dict:
    """``{benchmark: {eval_mode: {metric: value}}}`` for one (model, benchmark, split)."""
    frame = load_judged_seeds(seed_paths)
    score_columns = [column for column in SCORE_COLUMNS if column in frame.columns]
    return {benchmark: compute_metrics(frame, score_columns)}


def comparison_rows(summary: dict[str, dict]) -> list[list[str]]:
    """Rows of (model, benchmark, headline modes...) for a ``{model: {benchmark: metrics}}`` summary."""
    rows = []
    header = None
    for model, benchmarks in summary.items():
        for benchmark, metrics in benchmarks.items():
            modes = headline_modes(metrics)
            if header is None:
                header = ["model", "benchmark", "num_entries", *modes]
            rows.append(
                [model, benchmark, str(metrics[modes[0]]["num_entries"])]
                + [format_value(metrics[mode], "symbolic_correct") for mode in modes]
            )
    return [header, *rows]


def format_comparison(summary: dict[str, dict], base_model: str) -> str:
    rows = comparison_rows(summary)
    widths = [max(len(row[index]) for row in rows) for index in range(len(rows[0]))]
    lines = [" | ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip() for row in rows]
    lines.insert(1, "-+-".join("-" * width for width in widths))
    gains = []
    for model, benchmarks in summary.items():
        if model == base_model:
            continue
        for benchmark, metrics in benchmarks.items():
            mode = headline_modes(metrics)[0]
            base_metrics = summary[base_model][benchmark][mode]
            delta = metrics[mode]["symbolic_correct"] - base_metrics["symbolic_correct"]
            gains.append(f"{model} vs {base_model} on {benchmark}: {mode} symbolic_correct {delta:+.2f} points")
    title = "symbolic_correct by model (eval split)"
    return "\n".join([title, *lines, "", *gains]) + "\n"


def write_comparison(*, runs, metrics_paths, base_model: str, summary_path, table_path) -> str:
    """Collect per-(model, benchmark) metrics into ``{model: {benchmark: {eval_mode: {metric}}}}``."""
    from snakeskills.io import read_json, write_json, write_text

    summary: dict[str, dict] = {}
    for (model, benchmark), path in zip(runs, metrics_paths, strict=True):
        metrics = read_json(path)
        if benchmark not in metrics:
            raise SnakeskillsError(f"{path}: has no entry for benchmark {benchmark!r}")
        summary.setdefault(model, {})[benchmark] = metrics[benchmark]
    table = format_comparison(summary, base_model)
    write_json(summary_path, summary)
    write_text(table_path, table)
    return table
