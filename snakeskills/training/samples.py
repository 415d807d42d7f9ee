"""The judged train samples a round learns from, read the same way by every method's data rule: each sample's verdict
(``is_correct``: sft.filters.score, dpo.pairs.score, kto.score), the text it teaches (``trained_text``), its problem's
samples grouped over seeds and benchmarks (``group_problems``) with their pass rate, and the pass-rate filter every
training method applies (open-r1's pass-rate filtering, open-instruct's zero-variance filter: a problem always or
never solved gives GRPO a group with no advantage and DPO no pair)."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

from snakeskills.errors import SnakeskillsError
from snakeskills.io import iter_jsonl, write_json, write_jsonl
from snakeskills.prompts import build_messages
from snakeskills.tools.loop import RECORD_FIELDS

SCORES = {
    "symbolic_correct": ("symbolic_correct",),
    "judge_correct": ("judge_correct",),
    "both": ("symbolic_correct", "judge_correct"),
}


def is_correct(row: dict, score: str, where: str) -> bool:
    """The row's verdict under ``score``: symbolic_correct (the symbolic judge), judge_correct (the
    LLM judge) or both (each must say correct). A verdict the row lacks is an error naming ``where``."""
    verdicts = []
    for verdict in SCORES[score]:
        if verdict not in row:
            source = "an LLM judge (judge.llm)" if verdict == "judge_correct" else "the judge stage"
            raise SnakeskillsError(
                f"{where}: no {verdict!r} field, which the score {score!r} (sft.filters.score, dpo.pairs.score, "
                f"kto.score) needs; it is written by {source}"
            )
        verdicts.append(bool(row[verdict]))
    return all(verdicts)


def trained_text(row: dict) -> str:
    """The text a generation teaches: the whole text where a reasoning model's thinking was split off
    (``_full_generation``, parse_reasoning), so the student learns to think as well as to answer; else
    ``generation``."""
    return row["_full_generation"] if "_full_generation" in row else row["generation"]


def sample_pass_rates(judged_paths: list[str | Path], score: str) -> dict[tuple[str, str], float]:
    """Each problem's pass rate over all of ``judged_paths``' samples (keyed by id and problem text)."""
    solved: dict[tuple[str, str], list[bool]] = {}
    for path in judged_paths:
        for row_number, row in enumerate(iter_jsonl(path), start=1):
            verdict = is_correct(row, score, f"{path}: row {row_number}")
            solved.setdefault((str(row["id"]), str(row["problem"])), []).append(verdict)
    return {key: sum(verdicts) / len(verdicts) for key, verdicts in solved.items()}


# what generate and judge add to a prepared row: left out of a problem's own fields
SAMPLE_FIELDS = frozenset(
    {
        "generation",
        "num_generated_tokens",
        "finish_reason",
        "random_seed",
        "predicted_answer",
        "extraction_route",
        "symbolic_correct",
        "judgement",
        "judge_correct",
        "execution_status",
        "execution_error",
        "error",
        "reasoning_content",
        *RECORD_FIELDS,  # a sample's tool use
    }
)


@dataclass
class Problem:
    """One train problem with every judged sample of it: ``row`` its prepared fields, ``prompt`` the student's
    messages for it, ``samples`` the judged rows, ``correct`` each sample's verdict."""

    benchmark: str
    row: dict
    prompt: list[dict]
    samples: list[dict] = field(default_factory=list)
    correct: list[bool] = field(default_factory=list)

    @property
    def pass_rate(self) -> float:
        return sum(self.correct) / len(self.correct)


def problem_fields(row: dict) -> dict:
    """A judged row's prepared fields (generation, verdict and private ``_`` fields left out)."""
    return {key: value for key, value in row.items() if key not in SAMPLE_FIELDS and not key.startswith("_")}


def group_problems(
    judged_paths: list[str | Path], benchmarks: list[str], prompts: list[dict], score: str
) -> list[Problem]:
    """The judged samples of ``judged_paths`` grouped by problem ((benchmark, id), in first-seen order), each
    sample's verdict by ``score`` (symbolic_correct, judge_correct, both). ``benchmarks`` and ``prompts`` (the
    student's resolved prompt on that benchmark) go with each file."""
    if not len(judged_paths) == len(benchmarks) == len(prompts):
        raise SnakeskillsError(
            f"{len(judged_paths)} judged files, {len(benchmarks)} benchmarks, {len(prompts)} prompts"
        )
    problems: dict[tuple[str, str], Problem] = {}
    for path, benchmark, prompt in zip(judged_paths, benchmarks, prompts, strict=True):
        for row_number, row in enumerate(iter_jsonl(path), start=1):
            key = (benchmark, str(row["id"]))
            problem = problems.get(key)
            if problem is None:
                problem = problems[key] = Problem(benchmark, problem_fields(row), build_messages(prompt, row))
            problem.samples.append(row)
            problem.correct.append(is_correct(row, score, f"{path}: row {row_number}"))
    return list(problems.values())


def in_pass_rate(problem: Problem, bounds: dict) -> bool:
    return bounds["min"] <= problem.pass_rate <= bounds["max"]


def pass_rate_counts(problems: list[Problem], bounds: dict) -> dict:
    """How the pass-rate filter treated ``problems``: how many there were, how many it kept, how many it dropped
    below min and above max, and how many the previous model never and always solved."""
    kept = [problem for problem in problems if in_pass_rate(problem, bounds)]
    return {
        "problems": len(problems),
        "pass_rate": {"min": bounds["min"], "max": bounds["max"]},
        "problems_in_pass_rate": len(kept),
        "problems_below_pass_rate": sum(problem.pass_rate < bounds["min"] for problem in problems),
        "problems_above_pass_rate": sum(problem.pass_rate > bounds["max"] for problem in problems),
        "problems_never_solved": sum(not any(problem.correct) for problem in problems),
        "problems_always_solved": sum(all(problem.correct) for problem in problems),
    }


def problems_in_pass_rate(
    judged_paths: list[str | Path], benchmarks: list[str], prompts: list[dict], score: str, bounds: dict
) -> tuple[list[Problem], dict]:
    """The problems of the judged samples (``group_problems``) whose pass rate lies in ``bounds``, and the counts a
    round's stats.json opens with: the samples judged and how the pass-rate filter treated the problems."""
    problems = group_problems(judged_paths, benchmarks, prompts, score)
    counts = {"judged": sum(len(problem.samples) for problem in problems), **pass_rate_counts(problems, bounds)}
    return [problem for problem in problems if in_pass_rate(problem, bounds)], counts


def write_round_data(records: list[dict], counts: dict, output_path, stats_path, what: str) -> dict:
    """A round's training data (JSONL) and its counts (stats.json), written atomically, the counts logged."""
    write_jsonl(output_path, records)
    write_json(stats_path, counts)
    logging.getLogger(__name__).info("%s: %s", what, counts)
    return counts
