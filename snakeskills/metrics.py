"""Metrics over judged generations, defined as in NeMo-Skills' ``BaseMetrics``.

Input: one row per (problem, sample) with columns ``problem_index``, ``sample_index`` (0..n-1, the
seed order), ``predicted_answer`` (null when no answer), ``num_generated_tokens`` and one or more
boolean score columns (``symbolic_correct``, ``judge_correct``). Every problem must have the same
number of samples n. For each k in 1..n:

- ``pass@k``: the unbiased estimator 1 - C(n-c, k) / C(n, k) from all n samples, c correct;
  ``no_answer``: all of the first k samples have no answer.
- ``pass@1[avg-of-k]``: mean correctness of the first k samples; ``no_answer``: share of the first
  k without answer; for k >= 2 also ``{score}_statistics`` (avg, std_dev_across_runs,
  std_err_across_runs, avg_sample_std_dev), as fractions.
- ``majority@k`` (k >= 2): the most common non-empty answer among the first k; a tie scores the
  mean correctness of the tied (answer, correctness) groups; no answer at all scores 0.

Percentages are 100 x mean over problems. ``num_entries`` counts problems and ``avg_tokens`` is the
mean over problems of their mean generated tokens (an int, as NeMo-Skills prints it).
"""

from __future__ import annotations

import math

import polars as pl

from snakeskills.errors import SnakeskillsError

REQUIRED_COLUMNS = ("problem_index", "sample_index", "predicted_answer", "num_generated_tokens")


def _check_frame(frame: pl.DataFrame, score_columns: list[str]) -> int:
    missing = [column for column in (*REQUIRED_COLUMNS, *score_columns) if column not in frame.columns]
    if missing:
        raise SnakeskillsError(f"metrics: judged rows lack column(s) {missing}")
    counts = frame.group_by("problem_index", maintain_order=True).agg(pl.len().alias("samples"))["samples"].unique()
    if counts.len() != 1:
        raise SnakeskillsError(
            f"metrics: problems have different numbers of samples ({sorted(counts.to_list())}); "
            "every seed file must cover the same problems"
        )
    malformed = (
        frame.group_by("problem_index", maintain_order=True)
        .agg((pl.col("sample_index").sort() == pl.int_range(pl.len())).all().alias("ok"))
        .filter(~pl.col("ok"))
    )
    if malformed.height:
        raise SnakeskillsError(
            "metrics: sample_index must run 0..n-1 once per problem; problems "
            f"{malformed['problem_index'].head(5).to_list()} do not"
        )
    return int(counts[0])


def pass_at_k_table(n: int, k: int) -> list[float]:
    """pass@k for c = 0..n correct out of n samples."""
    total = math.comb(n, k)
    return [1.0 - (math.comb(n - c, k) / total if n - c >= k else 0.0) for c in range(n + 1)]


def compute_metrics(frame: pl.DataFrame, score_columns: list[str]) -> dict[str, dict]:
    """``{eval_mode: {metric: value}}`` for every k from 1 to the number of samples per problem."""
    num_samples = _check_frame(frame, score_columns)
    frame = frame.with_columns(
        pl.col("predicted_answer").is_null().alias("no_answer"),
        *(pl.col(column).cast(pl.Float64).alias(column) for column in score_columns),
    )
    num_problems = frame["problem_index"].n_unique()
    tokens_per_problem = frame.group_by("problem_index", maintain_order=True).agg(pl.col("num_generated_tokens").mean())
    avg_tokens = int(tokens_per_problem["num_generated_tokens"].sum() / num_problems)
    common = {"num_entries": num_problems, "avg_tokens": avg_tokens}
    metrics: dict[str, dict] = {}

    # per-problem cumulative sums over the sample order give every "first k" aggregate at once
    ordered = frame.sort("problem_index", "sample_index").with_columns(
        pl.col(column).cum_sum().over("problem_index").alias(f"{column}_cum")
        for column in (*score_columns, "no_answer")
    )
    correct_totals = frame.group_by("problem_index", maintain_order=True).agg(pl.col(score_columns).sum())

    for k in range(1, num_samples + 1):
        at_k = ordered.filter(pl.col("sample_index") == k - 1)
        pass_k = dict(common)
        avg_k = dict(common)
        for column in score_columns:
            table = pl.Series(pass_at_k_table(num_samples, k))
            counts = correct_totals[column].cast(pl.Int64)
            pass_k[column] = 100.0 * float(table.gather(counts).mean())
            avg_k[column] = 100.0 * float((at_k[f"{column}_cum"] / k).mean())
        pass_k["no_answer"] = 100.0 * float((at_k["no_answer_cum"] == k).mean())
        avg_k["no_answer"] = 100.0 * float((at_k["no_answer_cum"] / k).mean())
        metrics[f"pass@1[avg-of-{k}]"] = avg_k
        if k >= 2:
            for column in score_columns:
                avg_k[f"{column}_statistics"] = _statistics(frame, column, k)
            metrics[f"majority@{k}"] = {**common, **_majority(frame, score_columns, k, num_problems)}
        metrics[f"pass@{k}"] = pass_k
    return metrics


def _statistics(frame: pl.DataFrame, column: str, k: int) -> dict:
    first_k = frame.filter(pl.col("sample_index") < k)
    run_averages = first_k.group_by("sample_index", maintain_order=True).agg(pl.col(column).mean())[column]
    std_dev_across_runs = float(run_averages.std(ddof=1))
    sample_std = first_k.group_by("problem_index", maintain_order=True).agg(pl.col(column).std(ddof=1))[column]
    return {
        "avg": float(first_k[column].mean()),
        "std_dev_across_runs": std_dev_across_runs,
        "avg_sample_std_dev": float(sample_std.mean()),
        "std_err_across_runs": std_dev_across_runs / math.sqrt(k),
    }


def _majority(frame: pl.DataFrame, score_columns: list[str], k: int, num_problems: int) -> dict:
    first_k = frame.filter(pl.col("sample_index") < k)
    answered = first_k.filter(pl.col("predicted_answer").is_not_null())
    result = {}
    for column in score_columns:
        groups = answered.group_by("problem_index", "predicted_answer", column, maintain_order=True).agg(
            pl.len().alias("count")
        )
        top = groups.filter(pl.col("count") == pl.col("count").max().over("problem_index"))
        per_problem = top.group_by("problem_index", maintain_order=True).agg(pl.col(column).mean())
        result[column] = 100.0 * float(per_problem[column].sum()) / num_problems
    all_missing = first_k.group_by("problem_index", maintain_order=True).agg(pl.col("no_answer").all())["no_answer"]
    result["no_answer"] = 100.0 * float(all_missing.sum()) / num_problems
    return result


def max_k(metrics: dict[str, dict]) -> int:
    return max(int(mode.split("@", 1)[1]) for mode in metrics if mode.startswith("pass@") and "[" not in mode)


def headline_modes(metrics: dict[str, dict]) -> list[str]:
    """The eval modes NeMo-Skills prints: the largest k of each kind."""
    k = max_k(metrics)
    modes = [f"pass@1[avg-of-{k}]"]
    if k >= 2:
        modes.append(f"majority@{k}")
    modes.append(f"pass@{k}")
    return modes


def format_value(metrics_for_mode: dict, metric: str) -> str:
    value = metrics_for_mode[metric]
    if metric in ("num_entries", "avg_tokens"):
        return str(int(value))
    statistics = metrics_for_mode.get(f"{metric}_statistics")
    if statistics is not None:
        return f"{value:.2f}% ± {100.0 * statistics['std_dev_across_runs']:.2f}%"
    return f"{value:.2f}%"


def format_table(benchmark: str, metrics: dict[str, dict]) -> str:
    """NeMo-Skills' summary layout: one block per benchmark, one row per headline eval mode."""
    modes = headline_modes(metrics)
    columns = [metric for metric in metrics[modes[0]] if not metric.endswith("_statistics")]
    rows = [["evaluation_mode", *columns]] + [
        [mode, *(format_value(metrics[mode], c) for c in columns)] for mode in modes
    ]
    widths = [max(len(row[index]) for row in rows) for index in range(len(columns) + 1)]
    lines = [" | ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip() for row in rows]
    total_width = max(len(line) for line in lines)
    header = f" {benchmark} ".center(total_width, "-")
    return "\n".join([header, *lines]) + "\n"
