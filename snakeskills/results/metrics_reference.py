"""The metrics of ``snakeskills.results.metrics``, written out plainly: one problem and one k at a time.

This is the oracle the tests check the vectorised implementation against, and the baseline of
``bench/summarize.py``. It follows NeMo-Skills' ``BaseMetrics`` literally: the judged JSONL files are
read with ``json.loads`` line by line, and for every problem and every k the "first k" metrics are
computed again from the first k samples, with lists, sums and ``Counter``. Nothing is vectorised and
nothing is shared between values of k, so that each metric can be read off against its definition
(see the docstring of ``snakeskills.results.metrics``).
"""

from __future__ import annotations

import json
import math
from collections import Counter
from pathlib import Path

SCORE_COLUMNS = ("symbolic_correct", "judge_correct")


def read_judged_problems(seed_paths: list[str | Path]) -> tuple[list[list[dict]], list[str]]:
    """``problems[p][s]``: the judged row of problem p in seed file s; and the score columns present.

    A score column counts when the first row of the first file has it, as in ``summarize``.
    """
    seeds = []
    for path in seed_paths:
        with open(path, encoding="utf-8") as handle:
            rows = [json.loads(line) for line in handle if line.strip()]
        if not rows:
            raise ValueError(f"{path}: judged file is empty")
        seeds.append(rows)
    first_ids = [row["id"] for row in seeds[0]]
    for path, rows in zip(seed_paths, seeds, strict=True):
        if [row["id"] for row in rows] != first_ids:
            raise ValueError(f"{path}: problem ids differ from {seed_paths[0]}")
    problems = [list(samples) for samples in zip(*seeds, strict=True)]
    score_columns = [column for column in SCORE_COLUMNS if column in seeds[0][0]]
    return problems, score_columns


def reference_summarize(benchmark: str, seed_paths: list[str | Path]) -> dict:
    """``{benchmark: {eval_mode: {metric: value}}}``, as ``summarize.summarize_benchmark`` gives it."""
    problems, score_columns = read_judged_problems(seed_paths)
    metrics = reference_metrics(problems, score_columns)
    if "finish_reason" in problems[0][0]:
        for mode, values in metrics.items():
            k = int(mode.split("-of-")[1].rstrip("]")) if "-of-" in mode else int(mode.split("@")[1])
            for reason, metric in (("length", "truncated"), ("error", "errors")):
                ended = sum(sample["finish_reason"] == reason for samples in problems for sample in samples[:k])
                values[metric] = 100.0 * ended / (k * len(problems))
    return {benchmark: metrics}


def reference_metrics(problems: list[list[dict]], score_columns: list[str]) -> dict[str, dict]:
    """``{eval_mode: {metric: value}}`` for every k; each sample a dict with ``predicted_answer``,
    ``num_generated_tokens`` and the score columns (judged rows)."""
    total = len(problems)
    n = len(problems[0])
    if any(len(samples) != n for samples in problems):
        raise ValueError("every problem needs the same number of samples")
    ks = range(1, n + 1)

    # sums over problems, per k
    pass_sum = {column: [0.0] * (n + 1) for column in score_columns}
    avg_sum = {column: [0.0] * (n + 1) for column in score_columns}
    majority_sum = {column: [0.0] * (n + 1) for column in score_columns}
    sample_std_sum = {column: [0.0] * (n + 1) for column in score_columns}
    run_sum = {column: [0.0] * n for column in score_columns}  # per seed: summed over problems
    all_missing_count = [0] * (n + 1)
    missing_share_sum = [0.0] * (n + 1)
    tokens_sum = 0.0

    for samples in problems:
        answers = [_vote(sample) for sample in samples]
        missing = [answer is None for answer in answers]
        tokens_sum += sum(int(s["num_generated_tokens"]) for s in samples) / n
        for k in ks:
            all_missing_count[k] += all(missing[:k])
            missing_share_sum[k] += sum(missing[:k]) / k
        for column in score_columns:
            scores = [1.0 if s[column] else 0.0 for s in samples]
            correct = int(sum(scores))
            for index, score in enumerate(scores):
                run_sum[column][index] += score
            for k in ks:
                if n - correct < k:
                    pass_sum[column][k] += 1.0
                else:
                    pass_sum[column][k] += 1.0 - math.comb(n - correct, k) / math.comb(n, k)
                avg_sum[column][k] += sum(scores[:k]) / k
                if k >= 2:
                    sample_std_sum[column][k] += _stdev(scores[:k])
                    majority_sum[column][k] += _majority_score(answers[:k], scores[:k])

    common = {"num_entries": total, "avg_tokens": int(tokens_sum / total)}
    metrics: dict[str, dict] = {}
    for k in ks:
        avg_k = dict(common)
        for column in score_columns:
            avg_k[column] = 100.0 * avg_sum[column][k] / total
        avg_k["no_answer"] = 100.0 * missing_share_sum[k] / total
        if k >= 2:
            for column in score_columns:
                run_averages = [run_sum[column][index] / total for index in range(k)]
                std_dev = _stdev(run_averages)
                avg_k[f"{column}_statistics"] = {
                    "avg": sum(run_sum[column][:k]) / (k * total),
                    "std_dev_across_runs": std_dev,
                    "avg_sample_std_dev": sample_std_sum[column][k] / total,
                    "std_err_across_runs": std_dev / math.sqrt(k),
                }
        metrics[f"pass@1[avg-of-{k}]"] = avg_k
        if k >= 2:
            majority_k = dict(common)
            for column in score_columns:
                majority_k[column] = 100.0 * majority_sum[column][k] / total
            majority_k["no_answer"] = 100.0 * all_missing_count[k] / total
            metrics[f"majority@{k}"] = majority_k
        pass_k = dict(common)
        for column in score_columns:
            pass_k[column] = 100.0 * pass_sum[column][k] / total
        pass_k["no_answer"] = 100.0 * all_missing_count[k] / total
        metrics[f"pass@{k}"] = pass_k
    return metrics


def _vote(sample: dict) -> str | None:
    """What the sample votes for in majority@k: its answer; a program judged by running it, what it did."""
    if sample["predicted_answer"] is None:
        return None
    if "execution_status" in sample:
        return f"{sample['execution_status']}: {sample['execution_error'] or ''}"
    return str(sample["predicted_answer"])


def _majority_score(answers: list[str | None], scores: list[float]) -> float:
    """Votes per (answer, score) among the answered samples; ties score the mean of the tied groups."""
    votes = Counter((answer, score) for answer, score in zip(answers, scores, strict=True) if answer is not None)
    if not votes:
        return 0.0
    top = max(votes.values())
    tied = [score for (_, score), count in votes.items() if count == top]
    return sum(tied) / len(tied)


def _stdev(values: list[float]) -> float:
    """Sample standard deviation (ddof=1), two passes."""
    mean = sum(values) / len(values)
    return math.sqrt(sum((value - mean) ** 2 for value in values) / (len(values) - 1))
