"""One benchmark's summary: its judged seed files -> ``metrics.json`` (pass@1[avg-of-k], majority@k, pass@k, named
metrics, how the answers were found) and each problem's scores (problems.jsonl, for the paired comparison); the eval
rule's comparison of every model is ``comparison``."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import polars as pl

from snakeskills.errors import SnakeskillsError
from snakeskills.io import iter_jsonl, write_json, write_jsonl, write_text
from snakeskills.judging.extraction_routes import EXTRACTION_ROUTE, ROUTES_METRIC, format_routes, routes_summary
from snakeskills.results.cost_metrics import COST, COST_METRIC, TOOL_CALL_LOG, cost_metrics, format_cost_metrics
from snakeskills.results.metrics import (
    EXECUTION_ERROR,
    EXECUTION_STATUS,
    add_finish_reason_shares,
    answer_codes,
    format_table,
    metrics_from_arrays,
    vote_keys,
)
from snakeskills.results.named_metrics import compute_named_metrics, format_metric
from snakeskills.results.paired_bootstrap import problem_score_rows
from snakeskills.results.tool_metrics import (
    OVER_LIMIT,
    TOOL_CALLS,
    TOOL_ERRORS,
    TOOL_SECONDS,
    TOOL_TIMEOUTS,
    TOOLS_METRIC,
    VERDICT,
    format_tool_metrics,
    tool_metrics,
)

SCORE_COLUMNS = ("symbolic_correct", "judge_correct")
# read when the first row has it (judged files from other tools may lack it): the truncated and errors shares
FINISH_REASON = "finish_reason"
REQUIRED_FIELDS = ("id", "predicted_answer", "symbolic_correct", "num_generated_tokens")
# fields that may be null in a judged row (no answer; a program that passed)
NULLABLE_FIELDS = ("predicted_answer", EXECUTION_ERROR)
# read when the first row has it; a row without it (older results) reads null: unknown
OPTIONAL_FIELDS = (EXTRACTION_ROUTE,)


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
    ``problems.jsonl``: each problem's correct samples (``paired.problem_score_rows``). Where the judged rows say how
    their answers were found, metrics.json has ``"<benchmark>/extraction_routes"`` (``extraction_routes.
    routes_summary``) and metrics.txt a line of it under the table; where they say how they used a tool (a run with
    tools), ``"<benchmark>/tools"`` (``tool_metrics.tool_metrics``) and its lines."""
    ids, seeds = _load_seeds(seed_paths)
    metrics = _summarize_seeds(benchmark, seeds)
    scores = {
        column: np.stack([seed[column].to_numpy() for seed in seeds]) for column in SCORE_COLUMNS if column in seeds[0]
    }
    named = compute_named_metrics(benchmark, metric_specs, seed_paths)  # before any file: a failing metric writes none
    routes = _routes_entry(benchmark, seeds)
    tools = _tools_entry(benchmark, seed_paths)
    costs, prices = _cost_entry(benchmark, seed_paths)
    for name, entry, written in (
        (ROUTES_METRIC, routes, "how the answers were found"),
        (TOOLS_METRIC, tools, "tool use"),
        (COST_METRIC, costs, "the samples' prices"),
    ):
        if entry.keys() & named.keys():
            raise SnakeskillsError(
                f"config key metrics.{name} (or benchmarks.{benchmark}.metrics.{name}): summarize writes {written} "
                "under that name; rename the metric"
            )
    write_jsonl(problems_path, problem_score_rows(ids, scores["symbolic_correct"], scores.get("judge_correct"), prices))
    table = format_table(benchmark, metrics[benchmark]) + "".join(format_routes(value) for value in routes.values())
    table += "".join(format_tool_metrics(value) for value in tools.values())
    table += "".join(format_cost_metrics(value) for value in costs.values())
    table += "".join(format_metric(k, v) for k, v in named.items())
    write_json(metrics_path, {**metrics, **named, **routes, **tools, **costs})
    write_text(table_path, table)
    return table


def _routes_entry(benchmark: str, seeds: list[pl.DataFrame]) -> dict[str, dict]:
    """``{"<benchmark>/extraction_routes": routes_summary}`` over every seed's samples, or nothing where no judged
    row says how its answer was found."""
    if EXTRACTION_ROUTE not in seeds[0].columns or all(
        seed[EXTRACTION_ROUTE].null_count() == seed.height for seed in seeds
    ):
        return {}
    routes = pl.concat([seed[EXTRACTION_ROUTE] for seed in seeds]).to_list()
    correct = pl.concat([seed["symbolic_correct"].cast(pl.Boolean) for seed in seeds]).to_list()
    return {f"{benchmark}/{ROUTES_METRIC}": routes_summary(routes, correct)}


def _tools_entry(benchmark: str, seed_paths: list[str | Path]) -> dict[str, dict]:
    """``{"<benchmark>/tools": tool_metrics}`` over every seed's samples where the first row of a seed file says how
    many tool calls it made (``code_rounds_executed``: a run with tools); nothing otherwise, and no file is read
    again."""
    if not any(TOOL_CALLS in (_first_row(path) or {}) for path in seed_paths):
        return {}
    block = tool_metrics(row for path in seed_paths for row in _tool_rows(path))
    return {} if block is None else {f"{benchmark}/{TOOLS_METRIC}": block}


def _tool_rows(path: str | Path):
    """A judged file's tool fields and verdict, one dict per row (null where a row lacks a field): read by polars,
    or row by row where polars rejects a value (``_load_seeds`` has checked the file already)."""
    counts = dict.fromkeys((TOOL_CALLS, TOOL_ERRORS, TOOL_TIMEOUTS), pl.Int64)
    schema = {**counts, TOOL_SECONDS: pl.Float64, OVER_LIMIT: pl.Boolean, VERDICT: pl.Boolean}
    try:
        return pl.read_ndjson(_polars_source(path), schema=schema).iter_rows(named=True)
    except Exception:  # a value polars does not read as its type: Python reads every row
        return ({field: row.get(field) for field in schema} for row in iter_jsonl(path))


def _cost_entry(benchmark: str, seed_paths: list[str | Path]) -> tuple[dict[str, dict], np.ndarray | None]:
    """(``{"<benchmark>/cost": cost_metrics}`` over every seed's samples, a (seeds, problems) matrix of the samples'
    prices, 0 where a row has none) where the first row of a seed file has a price (``cost``: a run with priced
    tools) and some row's is not null; ``({}, None)`` otherwise, without a file read again where no first row has
    one."""
    if not any(COST in (_first_row(path) or {}) for path in seed_paths):
        return {}, None
    seeds = [list(_cost_rows(path)) for path in seed_paths]
    block = cost_metrics(row for seed in seeds for row in seed)
    if block is None:
        return {}, None
    prices = np.array([[row[COST] or 0.0 for row in seed] for seed in seeds], dtype=np.float64)
    return {f"{benchmark}/{COST_METRIC}": block}, prices


def _cost_rows(path: str | Path):
    """A judged file's price and tool calls (each call's tool and price), one dict per row (null where a row lacks
    a field): read by polars, or row by row where polars rejects a value (a price that is not a number stops there,
    naming the file and line)."""
    calls = pl.List(pl.Struct({"tool": pl.String, COST: pl.Float64}))
    schema = {COST: pl.Float64, TOOL_CALL_LOG: calls}
    try:
        return pl.read_ndjson(_polars_source(path), schema=schema).iter_rows(named=True)
    except Exception:  # a value polars does not read as its type: Python reads every row
        return list(_cost_rows_per_row(path))


def _cost_rows_per_row(path: str | Path):
    for line_number, row in enumerate(iter_jsonl(path), start=1):
        price = row.get(COST)
        if price is not None and (isinstance(price, bool) or not isinstance(price, int | float)):
            raise SnakeskillsError(f"{path}:{line_number}: judged row's {COST!r} is {price!r}, not a number")
        yield {COST: price, TOOL_CALL_LOG: row.get(TOOL_CALL_LOG)}


def _with_routes_alike(seeds: list[pl.DataFrame]) -> list[pl.DataFrame]:
    """Every seed with an ``extraction_route`` column (null: unknown) where any has one, so that older and newer
    seeds line up."""
    if not any(EXTRACTION_ROUTE in seed.columns for seed in seeds):
        return seeds
    return [
        seed if EXTRACTION_ROUTE in seed.columns else seed.with_columns(pl.lit(None, pl.String).alias(EXTRACTION_ROUTE))
        for seed in seeds
    ]


def _load_seeds(seed_paths: list[str | Path]) -> tuple[list[str], list[pl.DataFrame]]:
    """The problem ids, and per seed file, in order: ``predicted_answer``, ``num_generated_tokens``, the score
    columns, and where the first row has them ``finish_reason``, the execution fields and ``extraction_route``.

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
    seeds = _with_routes_alike(seeds)
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
            **{field: pl.String for field in OPTIONAL_FIELDS if field in first},
        }
        frame = pl.read_ndjson(_polars_source(path), schema=schema)
        # a field missing from a row reads as null: only the nullable and optional fields may legitimately be null
        allowed = (*NULLABLE_FIELDS, *OPTIONAL_FIELDS)
        if frame.height == 0 or any(frame[column].null_count() for column in schema if column not in allowed):
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
        optional = [field for field in OPTIONAL_FIELDS if field in rows[0]]
        for field in optional:
            columns[field] = [None if row.get(field) is None else str(row[field]) for row in rows]
        seeds.append(
            pl.DataFrame(
                columns,
                schema_overrides={
                    "predicted_answer": pl.String,
                    "num_generated_tokens": pl.Int64,
                    **dict.fromkeys((*execution, *optional), pl.String),
                },
            )
        )
    seeds = _with_routes_alike(seeds)
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
