"""GRPO's data: the train problems whose pass rate under the previous model lies in grpo.pass_rate (a problem
always or never solved gives a group with no advantage to learn from), with the student's prompt messages."""

from __future__ import annotations

from pathlib import Path

from snakeskills.errors import SnakeskillsError
from snakeskills.io import write_json, write_jsonl
from snakeskills.training.samples import group_problems, in_pass_rate, pass_rate_counts


def write_rl_problems(
    judged_paths: list[str | Path], benchmarks: list[str], prompts: list[dict], bounds: dict, output_path, stats_path
) -> dict:
    """GRPO's train problems: each problem whose pass rate under the previous model lies in ``bounds``, as its
    prepared fields plus ``benchmark`` and ``prompt`` (the student's messages); the counts go to ``stats_path``."""
    problems = group_problems(judged_paths, benchmarks, prompts, "symbolic_correct")
    counts = pass_rate_counts(problems, bounds)
    kept = [problem for problem in problems if in_pass_rate(problem, bounds)]
    if not kept:
        raise SnakeskillsError(
            f"no GRPO problems: none of the {len(problems)} train problems has a pass rate in "
            f"[{bounds['min']}, {bounds['max']}] under the previous model ({counts['problems_never_solved']} never "
            f"solved, {counts['problems_always_solved']} always solved); widen grpo.pass_rate or sample more seeds "
            "(train_num_seeds)"
        )
    write_jsonl(
        output_path,
        [{**problem.row, "benchmark": problem.benchmark, "prompt": problem.prompt} for problem in kept],
    )
    write_json(stats_path, counts)
    return counts
