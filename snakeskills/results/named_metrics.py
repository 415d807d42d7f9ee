"""Metrics chosen by name (config ``metrics`` and ``benchmarks.<name>.metrics``), computed by summarize beside
NeMo-Skills' eval modes: a built-in one from ``METRICS``, or a user's own given as ``module:function``.

A metric is ``(problems, **options) -> dict``: ``problems[p]`` is problem p's judged rows in seed order (every field
of the judged file); ``options`` are its config keys other than ``function``. The returned dict (leaves: numbers,
strings, booleans, null) goes to ``metrics.json`` under ``"<benchmark>/<name>"``. Built-in ones:

- ``by_field`` (``field``, ``score``): pass@1[avg-of-n], majority@n and pass@n per value of a column (MATH by
  level, MMLU-Pro by category).
- ``pass_hat_k`` (``score``): pass^k (Yao et al. 2024), C(c, k) / C(n, k) averaged over problems: how reliably a
  model solves a problem. pass^1 equals pass@1[avg-of-n].
- ``tokens_by_verdict`` (``score``): the mean generated tokens of correct and of incorrect samples, and their counts.

``score`` (default ``symbolic_correct``) is the verdict column read (``judge_correct`` for the LLM judge's)."""

from __future__ import annotations

import dataclasses
import inspect
import json
import math
from collections.abc import Callable
from pathlib import Path

import numpy as np
import polars as pl

from snakeskills.errors import SnakeskillsError
from snakeskills.io import iter_jsonl
from snakeskills.registry import Chosen, UserFunctionError, choose
from snakeskills.results.metrics import (
    EXECUTION_ERROR,
    EXECUTION_STATUS,
    answer_codes,
    headline_modes,
    metrics_from_arrays,
    vote_keys,
)
from snakeskills.results.paired_bootstrap import PAIRED_GAIN

Problems = list[list[dict]]


def by_field(problems: Problems, *, field: str, score: str = "symbolic_correct") -> dict:
    """``{value: {num_entries, <headline mode>: percent, ...}}`` over the problems of each value of ``field``;
    values in numeric order when all are numbers, else in text order."""
    groups: dict = {}
    for samples in problems:
        row = samples[0]
        if field not in row:
            raise SnakeskillsError(
                f"by_field: judged row of problem {row.get('id')!r} has no field {field!r}; its fields: "
                f"{', '.join(sorted(row))}"
            )
        groups.setdefault(row[field], []).append(samples)
    numeric = all(isinstance(value, int | float) and not isinstance(value, bool) for value in groups)
    result = {}
    for value in sorted(groups, key=(lambda v: v) if numeric else str):
        metrics = problems_metrics(groups[value], score)
        modes = headline_modes(metrics)
        result[str(value)] = {"num_entries": len(groups[value]), **{mode: metrics[mode][score] for mode in modes}}
    return result


def pass_hat_k(problems: Problems, *, score: str = "symbolic_correct") -> dict:
    """``{"pass^k": percent}`` for k = 1..n."""
    correct = _scores(problems, score).sum(axis=0).astype(int)
    n = len(problems[0])
    return {
        f"pass^{k}": 100.0 * math.fsum(math.comb(int(c), k) / math.comb(n, k) for c in correct) / len(problems)
        for k in range(1, n + 1)
    }


def tokens_by_verdict(problems: Problems, *, score: str = "symbolic_correct") -> dict:
    """Mean ``num_generated_tokens`` of the correct and of the incorrect samples (null where there are none), and
    how many samples each mean is over."""
    verdicts = _scores(problems, score).astype(bool)
    tokens = np.array([[row["num_generated_tokens"] for row in samples] for samples in problems], dtype=np.float64).T
    result = {}
    for name, chosen in (("correct", verdicts), ("incorrect", ~verdicts)):
        count = int(chosen.sum())
        result[f"{name}_tokens"] = float(tokens[chosen].mean()) if count else None
        result[f"{name}_samples"] = count
    return result


METRICS: dict[str, Callable[..., dict]] = {
    "by_field": by_field,
    "pass_hat_k": pass_hat_k,
    "tokens_by_verdict": tokens_by_verdict,
}


def problems_metrics(problems: Problems, score: str) -> dict[str, dict]:
    """NeMo-Skills' eval modes (``metrics_from_arrays``) of ``problems`` for one score column; majority@k votes
    on what summarize votes on (``vote_keys``)."""
    num_samples = len(problems[0])
    rows = [samples[index] for index in range(num_samples) for samples in problems]  # seed by seed
    columns = {"predicted_answer": [_text(row.get("predicted_answer")) for row in rows]}
    if EXECUTION_STATUS in rows[0]:
        for field in (EXECUTION_STATUS, EXECUTION_ERROR):
            columns[field] = [_text(row.get(field)) for row in rows]
    votes = vote_keys(pl.DataFrame(columns, schema=dict.fromkeys(columns, pl.String)))
    return metrics_from_arrays(
        answers=answer_codes(votes).reshape(num_samples, len(problems)),
        tokens=np.array([[row["num_generated_tokens"] for row in samples] for samples in problems]).T,
        scores={score: _scores(problems, score)},
    )


def _text(value) -> str | None:
    return None if value is None else str(value)


def _scores(problems: Problems, score: str) -> np.ndarray:
    """The ``score`` column as floats of shape (samples, problems)."""
    if score not in problems[0][0]:
        scores = [field for field in ("symbolic_correct", "judge_correct") if field in problems[0][0]]
        raise SnakeskillsError(f"judged rows have no score column {score!r}; they have {', '.join(scores) or 'none'}")
    return np.array([[float(bool(row[score])) for row in samples] for samples in problems]).T


def metric_function(spec: dict) -> Chosen:
    """The function a metric's spec names (a built-in or ``module:function``)."""
    return choose(METRICS, spec["function"], f"{spec['key']}.function")


def check_metric(spec: dict) -> None:
    """At plan time: the function imports and takes the spec's options: an unknown option (with the closest known
    one) or a missing one (by_field's ``field``) stops here, naming the key."""
    import difflib

    if spec["key"].rsplit(".", 1)[-1] == PAIRED_GAIN:
        raise SnakeskillsError(
            f"config key {spec['key']}: {PAIRED_GAIN!r} names the eval's paired comparison of each tuned model with its"
            " base model (eval/summary.json); give this metric another name"
        )
    function, key, name = metric_function(spec).function, spec["key"], repr(spec["function"])
    parameters = list(inspect.signature(function).parameters.values())[1:]  # after the problems
    if any(parameter.kind is inspect.Parameter.VAR_KEYWORD for parameter in parameters):
        return  # **options: it takes any
    named = (inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    known = [parameter.name for parameter in parameters if parameter.kind in named]
    takes = f"it takes: {', '.join(known) or 'no options'}"
    for option in spec["options"]:
        if option not in known:
            close = difflib.get_close_matches(option, known, n=1, cutoff=0.6)
            hint = f"did you mean {close[0]!r}? " if close else ""
            raise SnakeskillsError(f"config key {key}.{option}: metric {name} has no option {option!r}; {hint}{takes}")
    for parameter in parameters:
        needed = parameter.kind in named and parameter.default is inspect.Parameter.empty
        if needed and parameter.name not in spec["options"]:
            raise SnakeskillsError(f"config key {key}: metric {name} needs option {parameter.name!r} ({takes})")


def read_problems(seed_paths: list[str | Path]) -> Problems:
    """``problems[p][s]``: the judged row of problem p in seed file s (summarize has checked the files line up)."""
    seeds = [list(iter_jsonl(path)) for path in seed_paths]
    return [list(samples) for samples in zip(*seeds, strict=True)]


def compute_named_metrics(benchmark: str, specs: dict[str, dict], seed_paths: list[str | Path]) -> dict[str, dict]:
    """``{"<benchmark>/<name>": value}`` for each metric spec (``plan.sections.benchmark_metrics``); a metric that
    fails, or returns what JSON cannot hold, stops naming its config key; a user's metric that raises also names the
    row it held (``registry.Chosen.call_on_rows``, rows named by ``ProblemRows``)."""
    if not specs:
        return {}
    problems = read_problems(seed_paths)
    rows = ProblemRows(problems, seed_paths)
    results = {}
    for name, spec in specs.items():
        try:
            function = dataclasses.replace(metric_function(spec), key=spec["key"])  # its error names the metric
            value = function.call_on_rows(rows.name, problems, **spec["options"])
        except UserFunctionError:
            raise
        except SnakeskillsError as error:  # a built-in metric's: its config key first
            raise SnakeskillsError(f"config key {spec['key']}: {error}") from None
        if not isinstance(value, dict):
            raise SnakeskillsError(
                f"config key {spec['key']}: metric {spec['function']!r} returned {type(value).__name__}, not a dict"
            )
        try:
            json.dumps(value, allow_nan=False)
        except (TypeError, ValueError) as error:
            raise SnakeskillsError(
                f"config key {spec['key']}: metric {spec['function']!r} returned what JSON cannot hold: {error}"
            ) from None
        results[f"{benchmark}/{name}"] = value
    return results


class ProblemRows:
    """Names, in an error, a judged row or a problem's rows a metric was handed: ``row 3 of <seed file> (id 'p2')``
    or ``problem 'p2' (row 3 of each seed file)``; found by identity, so a copy of a row is not named."""

    def __init__(self, problems: Problems, seed_paths: list[str | Path]) -> None:
        self.problems, self.seed_paths = problems, seed_paths
        self._where: dict[int, tuple[int, int | None]] | None = None

    def name(self, value) -> str | None:
        if not isinstance(value, dict | list):
            return None
        if self._where is None:  # made on the first error only
            self._where = {id(samples): (p, None) for p, samples in enumerate(self.problems)}
            self._where.update(
                (id(row), (p, s)) for p, samples in enumerate(self.problems) for s, row in enumerate(samples)
            )
        if id(value) not in self._where:
            return None
        problem, seed = self._where[id(value)]
        identity = self.problems[problem][0].get("id")
        if seed is None:
            return f"problem {identity!r} (row {problem + 1} of each seed file)"
        return f"row {problem + 1} of {self.seed_paths[seed]} (id {identity!r})"


def is_named_metric(key: str) -> bool:
    """Whether a key of metrics.json names a metric (``"<benchmark>/<name>"``) rather than a benchmark's modes."""
    return "/" in key


def metric_lines(value: dict, prefix: str = "") -> list[tuple[str, str]]:
    """A metric's leaves as (path, text) pairs, paths joined with " / "; numbers to two decimals."""
    lines = []
    for key, item in value.items():
        path = f"{prefix} / {key}" if prefix else str(key)
        if isinstance(item, dict):
            lines.extend(metric_lines(item, path))
        else:
            lines.append((path, format_leaf(item)))
    return lines


def format_leaf(item) -> str:
    if item is None:
        return "-"
    if isinstance(item, float):
        return f"{item:.2f}"
    return json.dumps(item) if isinstance(item, list) else str(item)


def format_metric(key: str, value: dict) -> str:
    """One metric as a two-column block under its ``"<benchmark>/<name>"``."""
    lines = metric_lines(value)
    width = max((len(path) for path, _ in lines), default=0)
    return "\n".join([f"{key}:", *(f"  {path.ljust(width)} | {text}" for path, text in lines)]) + "\n"
