"""Metrics over judged generations, defined as in NeMo-Skills' ``BaseMetrics``.

Input: one row per (problem, sample) with ``problem_index``, ``sample_index`` (0..n-1, seed order),
``predicted_answer`` (null when none), ``num_generated_tokens`` and boolean score columns (``symbolic_correct``,
``judge_correct``); every problem has the same n. For each k in 1..n:

- ``pass@k``: the unbiased 1 - C(n-c, k) / C(n, k) over all n samples, c correct; ``no_answer``: none of the
  first k has an answer.
- ``pass@1[avg-of-k]``: mean correctness of the first k; ``no_answer``: their share without answer; for k >= 2
  also ``{score}_statistics`` (avg, std_dev_across_runs, std_err_across_runs, avg_sample_std_dev), as fractions.
- ``majority@k`` (k >= 2): the most common non-empty answer of the first k; a tie scores the mean correctness of
  the tied (answer, correctness) groups; no answer scores 0 (``vote_keys``: programs' behaviour as answers).

Percentages are 100 x mean over problems; ``num_entries`` counts problems; ``avg_tokens`` is the int mean over
problems of their mean generated tokens. All k are computed in one vectorised pass (cumulative sums, Welford,
running vote state); ``snakeskills.results.metrics_reference`` is the plain loop the tests check it against."""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np
import polars as pl

from snakeskills.errors import SnakeskillsError

# read when the first row has them (rows judged by running their programs): what majority@k votes on there
EXECUTION_STATUS, EXECUTION_ERROR = "execution_status", "execution_error"
REQUIRED_COLUMNS = ("problem_index", "sample_index", "predicted_answer", "num_generated_tokens")


def _check_frame(frame: pl.DataFrame, score_columns: list[str]) -> pl.DataFrame:
    """The frame sorted by (problem, sample), after checking every problem has samples 0..n-1 once."""
    missing = [column for column in (*REQUIRED_COLUMNS, *score_columns) if column not in frame.columns]
    if missing:
        raise SnakeskillsError(f"metrics: judged rows lack column(s) {missing}")
    with_nulls = [
        column
        for column in ("problem_index", "sample_index", "num_generated_tokens", *score_columns)
        if frame[column].null_count()
    ]
    if with_nulls:
        raise SnakeskillsError(f"metrics: column(s) {with_nulls} have null values")
    not_binary = [
        column
        for column in score_columns
        if frame[column].dtype != pl.Boolean and not frame[column].cast(pl.Float64).is_in([0.0, 1.0]).all()
    ]
    if not_binary:
        raise SnakeskillsError(f"metrics: score column(s) {not_binary} must be boolean (or 0/1)")
    problems = frame["problem_index"].to_numpy()
    samples = frame["sample_index"].to_numpy()
    in_order = bool(
        np.all((problems[1:] > problems[:-1]) | ((problems[1:] == problems[:-1]) & (samples[1:] > samples[:-1])))
    )
    if not in_order:
        order = np.lexsort((samples, problems))
        frame = frame[order]
        problems, samples = problems[order], samples[order]
    starts = np.flatnonzero(np.r_[True, problems[1:] != problems[:-1]]) if len(problems) else np.array([], int)
    counts = np.unique(np.diff(np.r_[starts, len(problems)]))
    if len(counts) != 1:
        raise SnakeskillsError(
            f"metrics: problems have different numbers of samples ({sorted(counts.tolist())}); "
            "every seed file must cover the same problems"
        )
    num_samples = int(counts[0])
    if not np.array_equal(samples, np.tile(np.arange(num_samples), len(starts))):
        malformed = (
            frame.group_by("problem_index", maintain_order=True)
            .agg((pl.col("sample_index").sort() == pl.int_range(pl.len())).all().alias("ok"))
            .filter(~pl.col("ok"))
        )
        raise SnakeskillsError(
            "metrics: sample_index must run 0..n-1 once per problem; problems "
            f"{malformed['problem_index'].head(5).to_list()} do not"
        )
    return frame


def pass_at_k_table(n: int, k: int) -> list[float]:
    """pass@k for c = 0..n correct out of n samples."""
    total = math.comb(n, k)
    return [1.0 - (math.comb(n - c, k) / total if n - c >= k else 0.0) for c in range(n + 1)]


def answer_codes(answers: pl.Series) -> np.ndarray:
    """One int64 per answer: 0 for null, otherwise equal codes exactly for equal answers."""
    if answers.dtype != pl.String:
        answers = answers.cast(pl.String)
    codes = answers.cast(pl.Categorical).to_physical().cast(pl.Int64) + 1
    return codes.fill_null(0).to_numpy()


def compute_metrics(frame: pl.DataFrame, score_columns: list[str]) -> dict[str, dict]:
    """``{eval_mode: {metric: value}}`` for every k from 1 to the number of samples per problem."""
    frame = _check_frame(frame, score_columns)
    num_problems = frame["problem_index"].n_unique()
    num_samples = frame.height // num_problems

    def matrix(values: np.ndarray) -> np.ndarray:
        # rows sorted by (problem, sample) -> shape (samples, problems)
        return np.ascontiguousarray(values.reshape(num_problems, num_samples).T)

    return metrics_from_arrays(
        answers=matrix(answer_codes(frame["predicted_answer"])),
        tokens=matrix(frame["num_generated_tokens"].to_numpy()),
        scores={column: matrix(frame[column].cast(pl.Float64).to_numpy()) for column in score_columns},
    )


def metrics_from_arrays(answers: np.ndarray, tokens: np.ndarray, scores: Mapping[str, np.ndarray]) -> dict[str, dict]:
    """The metrics of ``compute_metrics`` from arrays of shape (samples, problems).

    ``answers`` holds answer codes (0: no answer; within a problem equal codes mean equal answers),
    ``tokens`` the generated token counts and ``scores`` one float array (0.0 or 1.0) per score column.
    """
    num_samples, num_problems = answers.shape
    ks = np.arange(1, num_samples + 1)
    no_answer = answers == 0
    # NeMo-Skills: the mean over problems of each problem's mean token count, truncated to an int
    per_problem_tokens = tokens.sum(axis=0, dtype=np.float64) / num_samples
    common = {"num_entries": num_problems, "avg_tokens": int(math.fsum(per_problem_tokens.tolist()) / num_problems)}

    # share of the first k without answer, and share of problems whose first k all lack one
    avg_no_answer = 100.0 * np.cumsum(no_answer.sum(axis=1)) / ks / num_problems
    all_missing = 100.0 * np.logical_and.accumulate(no_answer, axis=0).sum(axis=1) / num_problems

    per_column = {column: _column_metrics(values, answers, no_answer) for column, values in scores.items()}

    metrics: dict[str, dict] = {}
    for k in range(1, num_samples + 1):
        index = k - 1
        avg_k = dict(common)
        pass_k = dict(common)
        for column, values in per_column.items():
            avg_k[column] = values["avg"][index]
            pass_k[column] = values["pass"][index]
        pass_k["no_answer"] = float(all_missing[index])
        avg_k["no_answer"] = float(avg_no_answer[index])
        metrics[f"pass@1[avg-of-{k}]"] = avg_k
        if k >= 2:
            for column, values in per_column.items():
                avg_k[f"{column}_statistics"] = values["statistics"][index]
            majority_k = dict(common)
            for column, values in per_column.items():
                majority_k[column] = values["majority"][index]
            majority_k["no_answer"] = float(all_missing[index])
            metrics[f"majority@{k}"] = majority_k
        metrics[f"pass@{k}"] = pass_k
    return metrics


def _column_metrics(values: np.ndarray, answers: np.ndarray, no_answer: np.ndarray) -> dict[str, list]:
    """pass@k, avg-of-k, statistics and majority@k of one score column, for k = 1..n (index k-1)."""
    num_samples, num_problems = values.shape
    ks = np.arange(1, num_samples + 1)

    correct = values.sum(axis=0).astype(np.int64)
    problems_with = np.bincount(correct, minlength=num_samples + 1).tolist()  # how many problems have c correct
    pass_k = [
        100.0 * math.fsum(map(float.__mul__, pass_at_k_table(num_samples, k), problems_with)) / num_problems
        for k in range(1, num_samples + 1)
    ]

    run_averages = values.sum(axis=1) / num_problems  # mean score of each seed over problems
    first_k_sums = np.cumsum(values.sum(axis=1))
    avg = (100.0 * first_k_sums / ks / num_problems).tolist()

    statistics: list[dict | None] = [None] * num_samples
    # per-problem mean and sum of squared deviations of the first k samples (Welford)
    mean = np.zeros(num_problems)
    squares = np.zeros(num_problems)
    for index in range(num_samples):
        k = index + 1
        delta = values[index] - mean
        mean += delta / k
        squares += delta * (values[index] - mean)
        if k >= 2:
            std_dev_across_runs = float(np.std(run_averages[:k], ddof=1))
            statistics[index] = {
                "avg": float(first_k_sums[index] / (k * num_problems)),
                "std_dev_across_runs": std_dev_across_runs,
                "avg_sample_std_dev": float(np.mean(np.sqrt(squares / (k - 1)))),
                "std_err_across_runs": std_dev_across_runs / math.sqrt(k),
            }

    return {"pass": pass_k, "avg": avg, "statistics": statistics, "majority": _majority(values, answers, no_answer)}


def _majority(values: np.ndarray, answers: np.ndarray, no_answer: np.ndarray) -> list[float | None]:
    """majority@k for k = 1..n (index k-1; None for k = 1): votes go to (answer, correctness) groups."""
    num_samples, num_problems = values.shape
    group = answers * 2 + values.astype(np.int64)  # scores are 0.0 or 1.0
    occurrence = _running_counts(group)

    top = np.zeros(num_problems, dtype=np.int64)  # votes of the leading group(s) so far
    tied = np.zeros(num_problems, dtype=np.int64)  # how many groups have that many votes
    tied_score = np.zeros(num_problems)  # their summed score
    result: list[float | None] = [None] * num_samples
    for index in range(num_samples):
        answered = ~no_answer[index]
        votes = occurrence[index]
        # a group's count grows by one per vote: it either overtakes the leaders or joins them
        leads = answered & (votes > top)
        joins = answered & (votes == top)
        tied = np.where(leads, 1, tied + joins)
        tied_score = np.where(leads, values[index], tied_score + np.where(joins, values[index], 0.0))
        top = np.where(leads, votes, top)
        if index >= 1:
            per_problem = np.divide(tied_score, tied, out=np.zeros(num_problems), where=tied > 0)
            result[index] = 100.0 * float(per_problem.sum()) / num_problems
    return result


def _running_counts(group: np.ndarray) -> np.ndarray:
    """For (samples, problems) group codes: how often each sample's group occurred in its problem so far."""
    num_samples, num_problems = group.shape
    width = int(group.max()) + 1 if group.size else 1
    keys = (np.arange(num_problems, dtype=np.int64) * width + group).T.ravel()  # problem-major, samples in order
    order = np.argsort(keys, kind="stable")
    sorted_keys = keys[order]
    positions = np.arange(keys.size)
    run_starts = np.maximum.accumulate(np.where(np.r_[True, sorted_keys[1:] != sorted_keys[:-1]], positions, 0))
    counts = np.empty(keys.size, dtype=np.int64)
    counts[order] = positions - run_starts + 1
    return counts.reshape(num_problems, num_samples).T


# finish_reason value -> the metric giving the percent of the first k samples that ended so
FINISH_REASON_SHARES = {"length": "truncated", "error": "errors"}


def mode_k(mode: str) -> int:
    """How many samples per problem an eval mode reads: ``pass@1[avg-of-4]``, ``majority@4``, ``pass@4`` -> 4."""
    return int(mode.rsplit("-", 1)[1].rstrip("]")) if "[avg-of-" in mode else int(mode.split("@", 1)[1])


def add_finish_reason_shares(metrics: dict[str, dict], finish_reasons: np.ndarray) -> None:
    """Add ``truncated`` (hit ``max_new_tokens``) and ``errors`` (soft failures, e.g. a prompt longer than the
    context) to every eval mode: percent of its first k samples, from ``finish_reasons`` (samples, problems)."""
    num_samples, num_problems = finish_reasons.shape
    ks = np.arange(1, num_samples + 1)
    for reason, metric in FINISH_REASON_SHARES.items():
        shares = 100.0 * np.cumsum((finish_reasons == reason).sum(axis=1)) / ks / num_problems
        for mode, values in metrics.items():
            values[metric] = float(shares[mode_k(mode) - 1])


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


def aligned_rows(rows: list[list[str]], *, rule_under_header: bool = False) -> list[str]:
    """Rows of cells as lines, each column as wide as its widest cell, cells joined by " | "."""
    widths = [max(len(row[index]) for row in rows) for index in range(len(rows[0]))]
    lines = [" | ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip() for row in rows]
    if rule_under_header:
        lines.insert(1, "-+-".join("-" * width for width in widths))
    return lines


def format_table(benchmark: str, metrics: dict[str, dict]) -> str:
    """NeMo-Skills' summary layout: one block per benchmark, one row per headline eval mode."""
    modes = headline_modes(metrics)
    columns = [metric for metric in metrics[modes[0]] if not metric.endswith("_statistics")]
    rows = [["evaluation_mode", *columns]] + [
        [mode, *(format_value(metrics[mode], c) for c in columns)] for mode in modes
    ]
    lines = aligned_rows(rows)
    total_width = max(len(line) for line in lines)
    header = f" {benchmark} ".center(total_width, "-")
    return "\n".join([header, *lines]) + "\n"


def vote_keys(seed: pl.DataFrame) -> pl.Series:
    """What majority@k votes on, one value per row (null: no answer, no vote): the predicted answer; for rows
    judged by running their programs (code benchmarks), what the program did: ``passed``, or how it failed
    (its status and error: the case it failed and the output it printed, or its last error line). Programs
    rarely match as text; programs that behave alike on the benchmark's inputs vote together, as AlphaCode
    clusters its samples by their outputs."""
    if EXECUTION_STATUS not in seed.columns:
        return seed["predicted_answer"]
    behaviour = pl.concat_str([seed[EXECUTION_STATUS], seed[EXECUTION_ERROR].fill_null("")], separator=": ")
    return pl.select(
        pl.when(seed["predicted_answer"].is_null()).then(None).otherwise(behaviour).alias("vote")
    ).to_series()
