"""Is a gain real? Two models compared problem by problem on the same eval split.

Each summarize job writes, beside ``metrics.json``, the problems' scores (``problems.jsonl``: id, samples, the
number of correct samples). Here a tuned model's scores are paired with its base model's:

- **The gain and its confidence interval: a paired bootstrap over problems.** Each problem's score is the share of
  its samples judged correct (the seeds averaged per problem), so the gain is exactly the difference of the two
  models' pass@1[avg-of-n]. The problems, not the samples, are the independent units: a benchmark is a sample of
  problems, and the samples of one problem share its difficulty, so resampling samples would understate the
  uncertainty. Resampling problems with replacement, the same draw for both models (the pairing), keeps what the
  two models share per problem out of the interval: a difference the models agree on problem by problem is
  tighter than two independent intervals would say. No normal approximation: scores are shares of a few samples.
  The draws are fixed (seed 0) and summed in integers, so the interval is the same on every machine.
- **Flips**: a problem counts as solved by a model when at least half of its samples are correct; each problem
  falls in one of four groups (solved by the tuned model only, by the base model only, by both, by neither).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from snakeskills.errors import SnakeskillsError
from snakeskills.io import iter_jsonl

RESAMPLES = 10_000
CONFIDENCE = 0.95
# the summary key of a model's comparison with its base model on one benchmark: "<benchmark>/paired_gain" (a
# named metric's key has the same shape, so every reader that skips named metrics skips this one too)
PAIRED_GAIN = "paired_gain"
FLIPS = ("tuned only", "base only", "both", "neither")
FLIPS_HEADER = ("model", "base_model", "benchmark", "id", "base_correct", "model_correct", "flip")


@dataclass(frozen=True)
class ProblemScores:
    """One model's scores on one benchmark split: per problem, the samples and the correct ones among them."""

    ids: list[str]
    samples: np.ndarray  # int64, per problem
    correct: np.ndarray  # int64, per problem

    def shares(self) -> np.ndarray:
        return self.correct / self.samples


def problem_score_rows(ids: list[str], scores: np.ndarray, judge_scores: np.ndarray | None = None) -> list[dict]:
    """``problems.jsonl``'s rows from a (samples, problems) matrix of 0/1 scores (``symbolic_correct``; the LLM
    judge's ``judge_correct`` beside it when it ran)."""
    rows = []
    for index, problem_id in enumerate(ids):
        row = {"id": problem_id, "samples": int(scores.shape[0]), "symbolic_correct": int(scores[:, index].sum())}
        if judge_scores is not None:
            row["judge_correct"] = int(judge_scores[:, index].sum())
        rows.append(row)
    return rows


def read_problem_scores(path: str | Path) -> ProblemScores:
    rows = list(iter_jsonl(path))
    if not rows:
        raise SnakeskillsError(f"{path}: no problems")
    for line, row in enumerate(rows, start=1):
        missing = [field for field in ("id", "samples", "symbolic_correct") if field not in row]
        if missing:
            raise SnakeskillsError(f"{path}:{line}: problem score row lacks {missing}")
    return ProblemScores(
        ids=[str(row["id"]) for row in rows],
        samples=np.array([row["samples"] for row in rows], dtype=np.int64),
        correct=np.array([row["symbolic_correct"] for row in rows], dtype=np.int64),
    )


def paired_bootstrap(
    base: ProblemScores, tuned: ProblemScores, *, resamples: int = RESAMPLES, confidence: float = CONFIDENCE
) -> dict:
    """The tuned model's gain over the base model in percentage points, with its paired-bootstrap interval."""
    if base.ids != tuned.ids:
        raise SnakeskillsError(
            "paired comparison: the two models' problem ids differ; both must be judged on the same eval split"
        )
    num_problems = len(base.ids)
    # each problem's difference of shares as an integer over a common denominator: exact sums on every machine
    denominator = int(np.lcm.reduce(np.r_[base.samples, tuned.samples]))
    differences = tuned.correct * (denominator // tuned.samples) - base.correct * (denominator // base.samples)
    generator = np.random.default_rng(0)
    totals = np.empty(resamples, dtype=np.int64)
    chunk = max(1, 4_000_000 // num_problems)
    for start in range(0, resamples, chunk):
        stop = min(resamples, start + chunk)
        draws = generator.integers(0, num_problems, size=(stop - start, num_problems))
        totals[start:stop] = differences[draws].sum(axis=1)
    scale = 100.0 / (denominator * num_problems)
    tail = (1.0 - confidence) / 2
    low, high = np.quantile(totals, [tail, 1.0 - tail], method="inverted_cdf") * scale
    return {
        "gain": round(float(differences.sum() * scale), 4),
        "ci_low": round(float(low), 4),
        "ci_high": round(float(high), 4),
        "confidence": confidence,
        "includes_zero": bool(low <= 0 <= high),
        "problems": num_problems,
        "resamples": resamples,
        "method": "paired bootstrap over problems, each problem's samples averaged",
    }


def flip_of(base_solved: bool, tuned_solved: bool) -> str:
    if tuned_solved and base_solved:
        return "both"
    if tuned_solved:
        return "tuned only"
    return "base only" if base_solved else "neither"


def flip_rows(model: str, base_model: str, benchmark: str, base: ProblemScores, tuned: ProblemScores) -> list[list]:
    """One row per problem (FLIPS_HEADER): correct samples as "c/n" and the problem's group."""
    rows = []
    for index, problem_id in enumerate(base.ids):
        base_solved = 2 * base.correct[index] >= base.samples[index]
        tuned_solved = 2 * tuned.correct[index] >= tuned.samples[index]
        rows.append(
            [
                model,
                base_model,
                benchmark,
                problem_id,
                f"{base.correct[index]}/{base.samples[index]}",
                f"{tuned.correct[index]}/{tuned.samples[index]}",
                flip_of(bool(base_solved), bool(tuned_solved)),
            ]
        )
    return rows


def compare(model: str, base_model: str, benchmark: str, base_path, tuned_path) -> tuple[dict, list[list]]:
    """(the ``paired_gain`` entry, the flips rows) of ``model`` against ``base_model`` on ``benchmark``."""
    base, tuned = read_problem_scores(base_path), read_problem_scores(tuned_path)
    try:
        entry = paired_bootstrap(base, tuned)
    except SnakeskillsError as error:
        raise SnakeskillsError(f"{tuned_path} against {base_path}: {error}") from None
    rows = flip_rows(model, base_model, benchmark, base, tuned)
    counts = Counter(row[-1] for row in rows)
    entry = {"base_model": base_model, **entry, "flips": {flip: counts.get(flip, 0) for flip in FLIPS}}
    return entry, rows


def describe(model: str, entry: dict) -> str:
    """The interval and flips in words, for the comparison text."""
    percent = round(100 * entry["confidence"])
    text = (
        f"{percent}% CI [{entry['ci_low']:+.2f}, {entry['ci_high']:+.2f}] (paired bootstrap over"
        f" {entry['problems']} problems)"
    )
    if entry["includes_zero"]:
        text += f"; the interval includes 0: no evidence that {model} differs from {entry['base_model']}"
    flips = entry["flips"]
    return (
        text + f"; solved by {model} only {flips['tuned only']}, by {entry['base_model']} only {flips['base only']},"
        f" by both {flips['both']}, by neither {flips['neither']}"
    )
