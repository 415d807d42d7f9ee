"""Benchmark specs at plan time: presets merged with a config's keys, cross-key checks of a spec, the splits a
spec declares, the part of a spec that decides its prepared rows, and the local files a split is read from.
Nothing here reads a dataset."""

from __future__ import annotations

import copy
import os
import re
import string
from pathlib import Path

import yaml

from snakeskills.data.synthetic import check_pool_size
from snakeskills.errors import SnakeskillsError

SOURCES = ("synthetic", "jsonl", "parquet", "hf")
PRESETS_DIR = Path(__file__).resolve().parent / "benchmarks"
CODE_COLUMN_KEYS = ("tests", "cases", "setup", "starter", "reference")  # the code keys that name a column


def known_presets() -> list[str]:
    return sorted(path.stem for path in PRESETS_DIR.glob("*.yaml"))


def load_preset(preset: str) -> dict:
    return yaml.safe_load((PRESETS_DIR / f"{preset}.yaml").read_text(encoding="utf-8"))


def deep_merge(base: dict, override: dict) -> dict:
    """``base`` with ``override``'s keys; nested dicts merge, anything else is replaced."""
    merged = copy.deepcopy(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def apply_preset(benchmark: str, spec):
    """``spec`` on top of its preset (deep merge; ``preset`` is kept); a spec without one is returned as is.

    Runs before schema validation, so that the schema checks (and fills the defaults of) the full spec;
    anything malformed is left for the schema to report.
    """
    if not isinstance(spec, dict) or "preset" not in spec:
        return spec
    preset = spec["preset"]
    if preset not in known_presets():
        raise SnakeskillsError(
            f"config key benchmarks.{benchmark}.preset: unknown preset {preset!r}; "
            f"known presets: {', '.join(known_presets())}"
        )
    return deep_merge(load_preset(preset), spec)


def apply_presets(benchmarks):
    """``config["benchmarks"]`` with every preset applied (see ``apply_preset``)."""
    if not isinstance(benchmarks, dict):
        return benchmarks
    return {benchmark: apply_preset(benchmark, spec) for benchmark, spec in benchmarks.items()}


def resolve_benchmark_spec(benchmark: str, spec: dict) -> dict:
    """The full, checked spec of ``benchmarks.<benchmark>``: its preset (if any) overridden by its own keys."""
    spec = apply_preset(benchmark, spec)
    check_benchmark_spec(benchmark, spec)
    return spec


def check_benchmark_spec(benchmark: str, spec: dict) -> None:
    """Cross-key checks the schema cannot express; each error names the config key at fault."""
    key = f"benchmarks.{benchmark}"
    source = spec.get("source")
    if source not in SOURCES:
        raise SnakeskillsError(f"config key {key}.source: unknown source {source!r}; known: {', '.join(SOURCES)}")
    if source not in spec:
        raise SnakeskillsError(f"config key {key}.{source} is required when source is {source!r}")
    if source == "synthetic":
        synthetic = spec["synthetic"]
        check_pool_size(
            operations=synthetic["operations"],
            max_operand=synthetic["max_operand"],
            split_sizes=synthetic["split_sizes"],
            key=f"{key}.synthetic",
        )
    for field, rule in (spec.get("field_map") or {}).items():
        if isinstance(rule, dict) and rule.get("regex") is not None:
            try:
                re.compile(rule["regex"])
            except re.error as error:
                raise SnakeskillsError(f"config key {key}.field_map.{field}.regex: invalid pattern ({error})") from None

    if spec.get("multiple_choice") is not None and "expected_answer" in (spec.get("field_map") or {}):
        raise SnakeskillsError(
            f"config key {key}.field_map.expected_answer: the answer of a multiple-choice benchmark is the letter of "
            f"its correct option ({key}.multiple_choice.correct); remove one of the two"
        )

    code = spec.get("code")
    if code is not None:
        if spec.get("multiple_choice") is not None:
            raise SnakeskillsError(
                f"config key {key}.code: a benchmark is a code benchmark or a multiple-choice one, not both; remove "
                f"{key}.code or {key}.multiple_choice"
            )
        if (code.get("tests") is None) == (code.get("cases") is None):
            raise SnakeskillsError(
                f"config key {key}.code: name the column of each row's tests with {key}.code.tests (a test program "
                f"or test statements) or {key}.code.cases (input/output cases for a program reading stdin), one of "
                "the two"
            )
        if code.get("cases") is not None:
            for name in ("setup", "run"):
                if code.get(name) is not None:
                    raise SnakeskillsError(
                        f"config key {key}.code.{name}: a benchmark with {key}.code.cases runs the answer as a whole "
                        f"program on each case's input; {name} belongs to test programs ({key}.code.tests)"
                    )
        if code.get("run") is not None:
            run_columns(code["run"], f"{key}.code.run")


def run_columns(run: str, key: str) -> list[str]:
    """The columns a ``code.run`` line reads (its ``{column}`` fields); a line that does not parse stops."""
    try:
        fields = [field for _, field, _, _ in string.Formatter().parse(run) if field is not None]
    except ValueError as error:
        raise SnakeskillsError(
            f"config key {key}: {run!r} does not parse ({error}); double literal braces: {{{{ }}}}"
        ) from None
    for field in fields:
        if not field.isidentifier():
            raise SnakeskillsError(f"config key {key}: {{{field}}} is not a column name; name one column in braces")
    return fields


def preparing_spec(spec: dict) -> dict:
    """The part of a benchmark spec that decides its prepared rows (prepare_data's params, so its rerun trigger):
    how the benchmark is asked, judged and summarized (``prompt``, ``judge``, ``metrics``) is left out, and
    ``multiple_choice`` and ``code`` when not set, so that neither those keys nor their defaults rerun preparing
    and everything after it."""
    return {
        key: value
        for key, value in spec.items()
        if key not in ("prompt", "judge", "metrics") and not (key in ("multiple_choice", "code") and value is None)
    }


def check_benchmark_specs(benchmarks: dict) -> None:
    for benchmark, spec in benchmarks.items():
        check_benchmark_spec(benchmark, spec)


def declared_splits(spec: dict) -> list[str]:
    """The split names a (resolved) benchmark spec provides."""
    source = spec["source"]
    if source == "synthetic":
        return list(spec["synthetic"]["split_sizes"])
    if source == "hf":
        return list(spec["hf"]["splits"])
    return list(spec[source]["paths"])


def check_splits(benchmarks: dict, required: dict[str, list[tuple[str, str]]]) -> None:
    """Each benchmark must provide the splits the run needs: ``required[benchmark] = [(split, config key)]``."""
    for benchmark, needs in required.items():
        splits = declared_splits(benchmarks[benchmark])
        for split, key in needs:
            if split not in splits:
                raise SnakeskillsError(
                    f"config key {key}: benchmark {benchmark!r} has no split {split!r} "
                    f"(it has: {', '.join(splits)}); see benchmarks.{benchmark}"
                )


def local_source_files(spec: dict, split: str) -> list[str]:
    """Local files one split is read from (Snakemake inputs, so that editing them reruns prepare_data).

    Nothing for ``synthetic`` or a Hub dataset id; every non-hidden file of an ``hf.path`` folder; a
    local-looking ``hf.path`` that does not exist is returned as is, so Snakemake reports it missing.
    """
    source = spec["source"]
    if source in ("jsonl", "parquet"):
        paths = spec[source]["paths"]
        return [paths[split]] if split in paths else []
    if source == "hf":
        path = Path(os.path.expanduser(spec["hf"]["path"]))
        if path.is_dir():
            return sorted(
                str(file)
                for file in path.rglob("*")
                if file.is_file() and not any(part.startswith(".") for part in file.relative_to(path).parts)
            )
        return [str(path)] if looks_local(spec["hf"]["path"]) else []
    return []


def looks_local(path: str) -> bool:
    """A filesystem path rather than a Hub id (``openai/gsm8k``): absolute, or starting with ``.`` or ``~``."""
    return os.path.isabs(path) or path.startswith((".", "~")) or os.path.isdir(os.path.expanduser(path))
