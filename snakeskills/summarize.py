"""Summaries: judged seed files -> ``metrics.json``; per-model metrics -> one comparison table."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import polars as pl

from snakeskills.errors import SnakeskillsError
from snakeskills.io import iter_jsonl, read_json, write_json, write_jsonl, write_text
from snakeskills.method_comparison import PAIRED_GAIN_OVER, TRAINING_COST, compare_methods, format_costs
from snakeskills.metrics import (
    EXECUTION_ERROR,
    EXECUTION_STATUS,
    FINISH_REASON_SHARES,
    add_finish_reason_shares,
    aligned_rows,
    answer_codes,
    format_table,
    format_value,
    headline_modes,
    metrics_from_arrays,
    vote_keys,
)
from snakeskills.named_metrics import compute_named_metrics, format_metric, is_named_metric, metric_lines
from snakeskills.paired import FLIPS_HEADER, PAIRED_GAIN, problem_score_rows
from snakeskills.paired import compare as compare_paired
from snakeskills.paired import describe as describe_paired
from snakeskills.run_warnings import format_warnings, metrics_warnings, sft_warnings, training_warnings

SCORE_COLUMNS = ("symbolic_correct", "judge_correct")
# read when the first row has it (judged files from other tools may lack it): the truncated and errors shares
FINISH_REASON = "finish_reason"
REQUIRED_FIELDS = ("id", "predicted_answer", "symbolic_correct", "num_generated_tokens")
# fields that may be null in a judged row (no answer; a program that passed)
NULLABLE_FIELDS = ("predicted_answer", EXECUTION_ERROR)


def load_judged_seeds(seed_paths: list[str | Path]) -> pl.DataFrame:
    """One frame over all seeds; each seed file must list the same problem ids in the same order."""
    _, seeds = _load_seeds(seed_paths)
    return pl.concat(
        [
            seed.select(
                pl.int_range(pl.len(), dtype=pl.Int64).alias("problem_index"),
                pl.lit(sample_index, dtype=pl.Int64).alias("sample_index"),
                pl.all(),
            )
            for sample_index, seed in enumerate(seeds)
        ],
        how="vertical",
    )


def summarize_benchmark(benchmark: str, seed_paths: list[str | Path]) -> dict:
    """``{benchmark: {eval_mode: {metric: value}}}`` for one (model, benchmark, split)."""
    return _summarize_seeds(benchmark, _load_seeds(seed_paths)[1])


def _summarize_seeds(benchmark: str, seeds: list[pl.DataFrame]) -> dict:
    score_columns = [column for column in SCORE_COLUMNS if column in seeds[0].columns]
    num_samples, num_problems = len(seeds), seeds[0].height
    answers = answer_codes(pl.concat([vote_keys(seed) for seed in seeds]))
    metrics = metrics_from_arrays(
        answers=answers.reshape(num_samples, num_problems),
        tokens=np.stack([seed["num_generated_tokens"].to_numpy() for seed in seeds]),
        scores={
            column: np.stack([seed[column].to_numpy().astype(np.float64) for seed in seeds]) for column in score_columns
        },
    )
    if FINISH_REASON in seeds[0].columns:
        add_finish_reason_shares(metrics, np.stack([seed[FINISH_REASON].to_numpy() for seed in seeds]))
    return {benchmark: metrics}


def write_benchmark_summary(
    benchmark: str,
    seed_paths: list[str | Path],
    metric_specs: dict[str, dict],
    *,
    metrics_path,
    table_path,
    problems_path,
) -> str:
    """``metrics.json``: the benchmark's eval modes (``summarize_benchmark``) and its named metrics
    (``named_metrics.compute_named_metrics``); ``metrics.txt``: NeMo-Skills' table, then each named metric;
    ``problems.jsonl``: each problem's correct samples (``paired.problem_score_rows``)."""
    ids, seeds = _load_seeds(seed_paths)
    metrics = _summarize_seeds(benchmark, seeds)
    scores = {
        column: np.stack([seed[column].to_numpy() for seed in seeds]) for column in SCORE_COLUMNS if column in seeds[0]
    }
    write_jsonl(problems_path, problem_score_rows(ids, scores["symbolic_correct"], scores.get("judge_correct")))
    named = compute_named_metrics(benchmark, metric_specs, seed_paths)
    table = format_table(benchmark, metrics[benchmark]) + "".join(format_metric(k, v) for k, v in named.items())
    write_json(metrics_path, {**metrics, **named})
    write_text(table_path, table)
    return table


def _load_seeds(seed_paths: list[str | Path]) -> tuple[list[str], list[pl.DataFrame]]:
    """The problem ids, and per seed file, in order: ``predicted_answer``, ``num_generated_tokens``, the score
    columns, and where the first row has them ``finish_reason`` and the execution fields.

    Files are parsed by polars, reading only the fields the metrics need. Anything unusual (a malformed
    line, a missing or null field, a non-boolean score, an empty file) sends all files through the
    per-row reader, which names the file and line at fault or reads the rows as Python would.
    """
    if not seed_paths:
        raise SnakeskillsError("summarize: no judged seed files given")
    # two files at a time: polars parses each in parallel too, this overlaps the serial parts
    with ThreadPoolExecutor(max_workers=2) as executor:
        frames = list(executor.map(_read_seed_fast, seed_paths))
    seeds = []
    reference_ids = None
    for path, frame in zip(seed_paths, frames, strict=True):
        if frame is None:
            return _load_seeds_per_row(seed_paths)
        if reference_ids is None:
            reference_ids = frame["id"]
        elif not frame["id"].equals(reference_ids):
            raise SnakeskillsError(
                f"{path}: problem ids differ from {seed_paths[0]}; seed files must line up row by row"
            )
        seeds.append(frame.drop("id"))
    _check_same_scores(seed_paths, seeds)
    return reference_ids.to_list(), seeds


def _read_seed_fast(path: str | Path) -> pl.DataFrame | None:
    """The needed columns of one judged file, or None when the per-row reader has to look at it."""
    try:
        first = _first_row(path)
        if first is None:
            return None
        # as the per-row reader does, a score column (or finish_reason) is taken when the first row has it
        scores = [column for column in SCORE_COLUMNS if column in first]
        schema = {
            "id": pl.String,
            "predicted_answer": pl.String,
            "num_generated_tokens": pl.Int64,
            **dict.fromkeys(scores, pl.Boolean),
            **({FINISH_REASON: pl.String} if FINISH_REASON in first else {}),
            **(dict.fromkeys((EXECUTION_STATUS, EXECUTION_ERROR), pl.String) if EXECUTION_STATUS in first else {}),
        }
        frame = pl.read_ndjson(_polars_source(path), schema=schema)
        # a field missing from a row reads as null: only the nullable fields may legitimately be null
        if frame.height == 0 or any(frame[column].null_count() for column in schema if column not in NULLABLE_FIELDS):
            return None
        # a null there may also be a missing key: count the keys (one per row; nested ones make it more, and
        # then the per-row reader decides)
        for column in NULLABLE_FIELDS:
            nulls = column in schema and frame[column].null_count()
            if nulls and _count_in_file(path, f'"{column}"'.encode()) != frame.height:
                return None
    except Exception:  # whatever polars rejects, the per-row reader explains
        return None
    return frame


def _first_row(path: str | Path) -> dict | None:
    with open(path, "rb") as handle:
        for line in handle:
            if line.strip():
                row = json.loads(line)
                return row if isinstance(row, dict) else None
    return None


def _polars_source(path: str | Path):
    """polars expands glob characters in path strings; hand it such paths as bytes."""
    if any(character in str(path) for character in "*?[]{}"):
        return Path(path).read_bytes()
    return path


def _count_in_file(path: str | Path, needle: bytes, chunk_size: int = 1 << 23) -> int:
    """Occurrences of ``needle`` in the file, read in chunks into one reused buffer."""
    keep = len(needle) - 1
    buffer = bytearray(keep + chunk_size)
    view = memoryview(buffer)
    total = 0
    start = 0  # bytes carried over from the previous chunk
    with open(path, "rb", buffering=0) as handle:
        while True:
            read = handle.readinto(view[start : start + chunk_size])
            if not read:
                return total
            end = start + read
            total += buffer.count(needle, 0, end)
            # the last len(needle) - 1 bytes hold no whole needle; carry them so a split one is found
            carried = min(keep, end)
            buffer[:carried] = buffer[end - carried : end]
            start = carried


def _load_seeds_per_row(seed_paths: list[str | Path]) -> tuple[list[str], list[pl.DataFrame]]:
    """The per-row reader: json per line, every field checked, errors name the file and line."""
    seeds = []
    reference_ids = None
    for path in seed_paths:
        rows = list(iter_jsonl(path))
        if not rows:
            raise SnakeskillsError(f"{path}: judged file is empty")
        scores = [score for score in SCORE_COLUMNS if score in rows[0]]
        execution = [EXECUTION_STATUS, EXECUTION_ERROR] if EXECUTION_STATUS in rows[0] else []
        for line_number, row in enumerate(rows, start=1):
            for field in (*REQUIRED_FIELDS, *scores, *execution):
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
            "predicted_answer": [
                None if row["predicted_answer"] is None else str(row["predicted_answer"]) for row in rows
            ],
            "num_generated_tokens": [int(row["num_generated_tokens"]) for row in rows],
        }
        for score in scores:
            columns[score] = [bool(row[score]) for row in rows]
        if FINISH_REASON in rows[0]:
            for line_number, row in enumerate(rows, start=1):
                if not isinstance(row.get(FINISH_REASON), str):
                    raise SnakeskillsError(f"{path}:{line_number}: judged row lacks a string field 'finish_reason'")
            columns[FINISH_REASON] = [row[FINISH_REASON] for row in rows]
        for field in execution:
            columns[field] = [None if row[field] is None else str(row[field]) for row in rows]
        seeds.append(
            pl.DataFrame(
                columns,
                schema_overrides={
                    "predicted_answer": pl.String,
                    "num_generated_tokens": pl.Int64,
                    **dict.fromkeys(execution, pl.String),
                },
            )
        )
    _check_same_scores(seed_paths, seeds)
    return [str(problem_id) for problem_id in reference_ids], seeds


def _check_same_scores(seed_paths: list[str | Path], seeds: list[pl.DataFrame]) -> None:
    for path, seed in zip(seed_paths, seeds, strict=True):
        for field in (FINISH_REASON, EXECUTION_STATUS):
            if (field in seed.columns) != (field in seeds[0].columns):
                has = "has" if field in seed.columns else "lacks"
                other = "lacks" if field in seed.columns else "has"
                raise SnakeskillsError(f"{path}: {has} {field} but {seed_paths[0]} {other} it")
        if seed.columns != seeds[0].columns:
            have = [column for column in SCORE_COLUMNS if column in seed.columns]
            first = [column for column in SCORE_COLUMNS if column in seeds[0].columns]
            raise SnakeskillsError(
                f"{path}: has score fields {have} but {seed_paths[0]} has {first}; judge every seed the same way"
            )


def comparison_rows(summary: dict[str, dict]) -> list[list[str]]:
    """Rows of (model, benchmark, headline modes...) for a ``{model: {benchmark: metrics}}`` summary."""
    rows = []
    header = None
    for model, benchmarks in summary.items():
        for benchmark, metrics in benchmark_entries(benchmarks).items():
            modes = headline_modes(metrics)
            # the LLM judge's verdict, when it ran, beside the symbolic one (headline mode only)
            judged = ["judge_correct"] if "judge_correct" in metrics[modes[0]] else []
            shares = [metric for metric in FINISH_REASON_SHARES.values() if metric in metrics[modes[0]]]
            if header is None:
                header = ["model", "benchmark", "num_entries", *modes, *(f"{modes[0]} judge" for _ in judged), *shares]
            rows.append(
                [model, benchmark, str(metrics[modes[0]]["num_entries"])]
                + [format_value(metrics[mode], "symbolic_correct") for mode in modes]
                + [format_value(metrics[modes[0]], metric) for metric in [*judged, *shares]]
            )
    return [header, *rows]


def format_comparison(summary: dict[str, dict], base_model: str, teacher: str | None = None) -> str:
    """The eval table, then each model's gain over the base model (with its paired confidence interval and flips
    where the summary has them: ``paired.PAIRED_GAIN``); with a ``teacher`` in the summary, also the share of the
    teacher's lead over the base model that each tuned round closed."""
    rows = comparison_rows(summary)
    lines = aligned_rows(rows, rule_under_header=True)
    gains = []
    for model, benchmarks in summary.items():
        if model == base_model:
            continue
        for benchmark, metrics in benchmark_entries(benchmarks).items():
            mode = headline_modes(metrics)[0]
            base_score = summary[base_model][benchmark][mode]["symbolic_correct"]
            delta = metrics[mode]["symbolic_correct"] - base_score
            gain = f"{model} vs {base_model} on {benchmark}: {mode} symbolic_correct {delta:+.2f} points"
            if teacher is not None and model != teacher:
                lead = summary[teacher][benchmark][mode]["symbolic_correct"] - base_score
                if lead > 0:
                    gain += f" ({100 * delta / lead:.0f}% of the teacher's {lead:+.2f})"
            paired = benchmarks.get(f"{benchmark}/{PAIRED_GAIN}")
            gains.append(gain + (f"\n  {describe_paired(model, paired)}" if paired else ""))
    title = "symbolic_correct by model (eval split); 'judge' columns: the LLM judge's judge_correct"
    if not any(cell.endswith(" judge") for cell in rows[0]):
        title = "symbolic_correct by model (eval split)"
    return "\n".join([title, *lines, "", *gains]) + "\n" + format_named_comparison(summary)


def benchmark_entries(entries: dict) -> dict:
    """A model's summary entries that are benchmarks' eval modes (its named metrics left out)."""
    return {name: metrics for name, metrics in entries.items() if not is_named_metric(name)}


def format_named_comparison(summary: dict[str, dict]) -> str:
    """Each named metric (``"<benchmark>/<name>"``) as a table: one row per leaf of its value, one column per
    model that has it; empty when no model has one."""
    keys = [
        key
        for key in dict.fromkeys(key for entries in summary.values() for key in entries if is_named_metric(key))
        if not key.endswith(f"/{PAIRED_GAIN}") and f"/{PAIRED_GAIN_OVER}/" not in key and key != TRAINING_COST
    ]
    blocks = []
    for key in keys:
        models = [model for model, entries in summary.items() if key in entries]
        values = {model: dict(metric_lines(summary[model][key])) for model in models}
        paths = list(dict.fromkeys(path for model in models for path in values[model]))
        rows = [[key, *models]] + [[path, *(values[model].get(path, "") for model in models)] for path in paths]
        blocks.append("\n".join(aligned_rows(rows, rule_under_header=True)) + "\n")
    return "".join("\n" + block for block in blocks)


def write_comparison(
    *,
    runs,
    metrics_paths,
    problem_paths,
    funnel_paths=(),
    built_models=(),
    base_model: str,
    teacher: str | None,
    summary_path,
    table_path,
    flips_path,
    sft_stats=None,
    training=None,
    thresholds=None,
    method_pairs=(),
    training_costs=None,
) -> str:
    """Collect per-(model, benchmark) metrics into ``{model: {benchmark: {eval_mode: {metric}}}}``, with each
    tuned model's paired comparison against the base model under ``"<benchmark>/paired_gain"`` and every
    problem's flip in ``flips_path`` (``paired``; ``problem_paths``: each run's problems.jsonl). The table ends
    with the synthesis funnel (``funnel_paths``: its table, when the run synthesizes problems) and the run's
    warnings (``run_warnings``): each built tiny model (``built_models``: checkpoint folders) whose bootstrap missed
    its target and, given ``thresholds`` (the config's ``warnings``), each round's SFT data that is too small
    (``sft_stats``: {round: its stats.json}; ``training``: sft.training) and each model's truncated or unanswered
    share over its threshold. With several training methods, ``method_pairs`` ((model, other) rounds of the same
    number) are compared paired as well (``method_comparison``), and ``training_costs`` ({model: cost}) are stored
    under ``"training/cost"`` and tabled."""
    from snakeskills.tiny_model import BOOTSTRAP_METRICS_FILE, bootstrap_miss

    summary: dict[str, dict] = {}
    problems = {}
    for (model, benchmark), path, problems_path in zip(runs, metrics_paths, problem_paths, strict=True):
        metrics = read_json(path)
        if benchmark not in metrics:
            raise SnakeskillsError(f"{path}: has no entry for benchmark {benchmark!r}")
        entries = summary.setdefault(model, {})
        entries[benchmark] = metrics[benchmark]
        entries.update((key, value) for key, value in metrics.items() if is_named_metric(key))
        problems[model, benchmark] = problems_path
    flips = [list(FLIPS_HEADER)]
    for model, benchmark in runs:
        if model in (base_model, teacher):
            continue
        entry, rows = compare_paired(
            model, base_model, benchmark, problems[base_model, benchmark], problems[model, benchmark]
        )
        summary[model][f"{benchmark}/{PAIRED_GAIN}"] = entry
        flips += rows
    write_text(flips_path, "".join("\t".join(map(str, row)) + "\n" for row in flips))
    benchmarks = list(dict.fromkeys(benchmark for _, benchmark in runs))
    method_lines = compare_methods(list(method_pairs), benchmarks, problems, summary)
    for model, cost in (training_costs or {}).items():
        summary[model][TRAINING_COST] = cost
    table = format_comparison(summary, base_model, teacher)
    if method_lines:
        table += "\ntraining methods compared (rounds of the same number, paired over the same problems)\n"
        table += "\n".join(method_lines) + "\n"
    table += format_costs(training_costs or {})
    for path in funnel_paths:
        table += "\n" + Path(path).read_text(encoding="utf-8")
    warnings = []
    for folder in built_models:
        miss = bootstrap_miss(read_json(Path(folder) / BOOTSTRAP_METRICS_FILE))
        if miss:
            warnings.append(f"{miss} ({folder})")
    if thresholds is not None:
        for model, path in (sft_stats or {}).items():
            warnings += sft_warnings(model, read_json(path), training, thresholds)
        for model, cost in (training_costs or {}).items():
            if cost["method"] != "sft":
                warnings += training_warnings(model, cost, thresholds)
        for model, benchmark in runs:
            warnings += metrics_warnings(model, benchmark, "eval split", summary[model][benchmark], thresholds)
    table += format_warnings(warnings)
    write_json(summary_path, summary)
    write_text(table_path, table)
    return table
