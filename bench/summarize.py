"""Benchmark the summarize step: judged seed files on disk -> metrics, fast path against the per-row reference.

Usage: python bench/summarize.py [--seeds 64] [--problems 15625] [--repeats 5] [--output bench/results/summarize.json]

Writes ``seeds`` judged JSONL files of ``problems`` rows each into a scratch folder (deterministic: the
same arguments give the same bytes), with the fields the judge writes: a problem and a generation of a few
hundred characters, expected_answer, predicted_answer (null for about 5 %), symbolic_correct,
judge_correct, num_generated_tokens, finish_reason, random_seed. Then, in the same run and over the same
files, it times (a) ``snakeskills.results.summarize.summarize_benchmark`` (the median of ``--repeats`` runs; the
best run is reported too) and (b) the plain per-row implementation
``snakeskills.results.metrics_reference.reference_summarize`` (once), checks that both give the same metrics,
prints a table and writes the figures as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import string
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import polars as pl

from snakeskills.results import summarize
from snakeskills.results.metrics_reference import read_judged_problems, reference_summarize
from snakeskills.results.summarize import summarize_benchmark

REPO = Path(__file__).resolve().parent.parent


def write_judged_files(directory: Path, seeds: int, problems: int, rng_seed: int = 0) -> list[Path]:
    """``seeds`` files ``output-rs{seed}.jsonl`` with ``problems`` judged rows each, the same ids in order."""
    rng = random.Random(rng_seed)
    words = ["".join(rng.choices(string.ascii_lowercase, k=rng.randint(1, 9))) for _ in range(2000)]
    # per problem: an id, the JSON-encoded problem text, the expected answer and how easy it is
    problem_rows = []
    for index in range(problems):
        text = f"Problem {index}: " + " ".join(rng.choice(words) for _ in range(rng.randint(25, 45))) + "?"
        problem_rows.append(
            (json.dumps(f"bench-{index:06d}"), json.dumps(text), str(rng.randint(0, 999)), rng.random())
        )
    # generations are drawn from a pool of texts of a few hundred characters, then end with the answer
    pool = [" ".join(rng.choice(words) for _ in range(rng.randint(50, 90))) for _ in range(4096)]
    paths = []
    for seed in range(seeds):
        seed_rng = random.Random(rng_seed * 1_000_003 + seed + 1)
        lines = []
        for row_id, problem, expected, easiness in problem_rows:
            draw = seed_rng.random()
            if draw < 0.05:
                answer = None
            elif draw < 0.05 + 0.9 * easiness:
                answer = expected
            else:
                answer = str(seed_rng.randint(0, 9))  # few distinct wrong answers: majority ties happen
            generation = pool[seed_rng.randrange(len(pool))] + (
                f" so the answer is \\boxed{{{answer}}}." if answer is not None else " I am not sure."
            )
            symbolic = answer == expected
            judge = symbolic if seed_rng.random() < 0.9 else not symbolic
            lines.append(
                f'{{"id": {row_id}, "problem": {problem}, "expected_answer": "{expected}", '
                f'"generation": {json.dumps(generation)}, "num_generated_tokens": {seed_rng.randint(40, 400)}, '
                f'"finish_reason": "stop", "random_seed": {seed}, '
                f'"predicted_answer": {json.dumps(answer)}, "symbolic_correct": {json.dumps(symbolic)}, '
                f'"judge_correct": {json.dumps(judge)}}}\n'
            )
        path = directory / f"output-rs{seed}.jsonl"
        path.write_text("".join(lines), encoding="utf-8")
        paths.append(path)
    return paths


def largest_difference(actual, expected, where: str = "") -> float:
    """The largest absolute difference between two metrics dicts; raises if keys or their order differ."""
    if isinstance(expected, dict):
        if not isinstance(actual, dict) or list(actual) != list(expected):
            raise AssertionError(f"{where or '/'}: keys differ")
        return max((largest_difference(actual[key], expected[key], f"{where}/{key}") for key in expected), default=0.0)
    if type(actual) is not type(expected):
        raise AssertionError(f"{where}: {type(actual).__name__} vs {type(expected).__name__}")
    return abs(actual - expected)


def timed(function, *arguments):
    start = time.perf_counter()
    result = function(*arguments)
    return time.perf_counter() - start, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, default=64)
    parser.add_argument("--problems", type=int, default=15_625)
    parser.add_argument("--repeats", type=int, default=5, help="runs of the fast path; the median is reported")
    parser.add_argument("--tolerance", type=float, default=1e-9, help="largest allowed difference, in metric units")
    parser.add_argument("--output", type=Path, default=REPO / "bench/results/summarize.json")
    arguments = parser.parse_args()

    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="snakeskills-bench-summarize-") as scratch:
        generate_seconds, paths = timed(write_judged_files, Path(scratch), arguments.seeds, arguments.problems)
        data_bytes = sum(path.stat().st_size for path in paths)
        # the files must take polars' path, not the per-row fallback reader
        fast_reader_used = all(summarize._read_seed_fast(path) is not None for path in paths[:2])
        # (a) the fast path; the first run also warms the page cache for both
        fast_runs = []
        for _ in range(arguments.repeats):
            seconds, fast = timed(summarize_benchmark, "bench", paths)
            fast_runs.append(seconds)
        # (b) the per-row reference over the same files, and its JSON reading alone
        reference_seconds, reference = timed(reference_summarize, "bench", paths)
        reference_read_seconds, _ = timed(read_judged_problems, paths)
    load_after = os.getloadavg()

    difference = largest_difference(fast, reference)
    fast_seconds = statistics.median(fast_runs)
    figures = {
        "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cpus",
        "cpu_count": os.cpu_count(),
        "usable_cpus": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "load_average_before_after": [round(load_before[0], 2), round(load_after[0], 2)],
        "python": platform.python_version(),
        "polars": pl.__version__,
        "numpy": np.__version__,
        "seeds": arguments.seeds,
        "problems": arguments.problems,
        "rows": arguments.seeds * arguments.problems,
        "data_megabytes": round(data_bytes / 1e6, 1),
        "eval_modes": len(fast["bench"]),
        "fast_reader_used": fast_reader_used,
        "write_files_seconds": round(generate_seconds, 1),
        "summarize_benchmark_seconds": round(fast_seconds, 3),
        "summarize_benchmark_statistic": f"median of {arguments.repeats} runs",
        "summarize_benchmark_best_seconds": round(min(fast_runs), 3),
        "summarize_benchmark_runs_seconds": [round(seconds, 3) for seconds in fast_runs],
        "reference_seconds": round(reference_seconds, 2),
        "reference_json_reading_seconds": round(reference_read_seconds, 2),
        "speedup": round(reference_seconds / fast_seconds, 1),
        "largest_metric_difference": difference,
        "metrics_agree": difference <= arguments.tolerance,
    }
    arguments.output.parent.mkdir(parents=True, exist_ok=True)
    arguments.output.write_text(json.dumps(figures, indent=2) + "\n")
    for key, value in figures.items():
        print(f"{key:36s} {value}")
    if not figures["metrics_agree"]:
        sys.exit(f"metrics differ by {difference} (tolerance {arguments.tolerance})")
    if not fast_reader_used:
        sys.exit("the generated files went through the per-row fallback reader")


if __name__ == "__main__":
    main()
