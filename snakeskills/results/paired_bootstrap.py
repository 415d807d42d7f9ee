"""Is a gain real? Two models compared problem by problem on the same eval split.

Each summarize job writes ``problems.jsonl`` beside ``metrics.json`` (id, samples, correct samples); here a tuned
model's scores are paired with its base model's:

- **The gain and its confidence interval: a paired bootstrap over problems.** A problem's score is its share of
  correct samples (seeds averaged), so the gain is exactly the difference of pass@1[avg-of-n]. Problems are the
  independent units (a problem's samples share its difficulty); resampling them with the same draw for both
  models keeps what the models share per problem out of the interval. No normal approximation; the draws are
  fixed (seed 0) and summed in integers, so the interval is the same on every machine.
- **The price difference and its interval**, where scores carry prices (``cost_metrics``): a problem's price is
  its samples' mean, resampled with the gain's draws, summed in floats.
- **Flips**: a problem is solved by a model when at least half its samples are correct; each problem is solved by
  the tuned model only, the base model only, both, or neither."""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from snakeskills.errors import SnakeskillsError
from snakeskills.io import iter_jsonl
from snakeskills.results.cost_metrics import COST, rounded_cost

RESAMPLES = 10_000
CONFIDENCE = 0.95
# the summary key of a model's comparison with its base model on one benchmark: "<benchmark>/paired_gain" (a
# named metric's key has the same shape, so every reader that skips named metrics skips this one too)
PAIRED_GAIN = "paired_gain"
FLIPS = ("tuned only", "base only", "both", "neither")
FLIPS_HEADER = ("model", "base_model", "benchmark", "id", "base_correct", "model_correct", "flip")


@dataclass(frozen=True)
class ProblemScores:
    """One model's scores on one benchmark split: per problem, the samples and the correct ones among them, and in
    a run with prices the samples' summed price (None where its records have none)."""

    ids: list[str]
    samples: np.ndarray  # int64, per problem
    correct: np.ndarray  # int64, per problem
    cost: np.ndarray | None = None  # float64, per problem: its samples' prices summed

    def shares(self) -> np.ndarray:
        return self.correct / self.samples

    def prices(self) -> np.ndarray:
        """Each problem's mean price of one sample; 0 for a model whose records have no price."""
        return np.zeros(len(self.ids)) if self.cost is None else self.cost / self.samples


def problem_score_rows(
    ids: list[str],
    scores: np.ndarray,
    judge_scores: np.ndarray | None = None,
    costs: np.ndarray | None = None,
) -> list[dict]:
    """``problems.jsonl``'s rows from a (samples, problems) matrix of 0/1 scores (``symbolic_correct``; the LLM
    judge's ``judge_correct`` beside it when it ran) and, where the records have prices, a (samples, problems) matrix
    of them (``cost``: each problem's summed)."""
    rows = []
    for index, problem_id in enumerate(ids):
        row = {"id": problem_id, "samples": int(scores.shape[0]), "symbolic_correct": int(scores[:, index].sum())}
        if judge_scores is not None:
            row["judge_correct"] = int(judge_scores[:, index].sum())
        if costs is not None:
            row[COST] = rounded_cost(math.fsum(costs[:, index]))
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
    if COST in rows[0]:
        for line, row in enumerate(rows, start=1):
            if not isinstance(row.get(COST), int | float):
                raise SnakeskillsError(
                    f"{path}:{line}: problem score row lacks a number {COST!r} (the first row has one)"
                )
    return ProblemScores(
        ids=[str(row["id"]) for row in rows],
        samples=np.array([row["samples"] for row in rows], dtype=np.int64),
        correct=np.array([row["symbolic_correct"] for row in rows], dtype=np.int64),
        cost=np.array([row[COST] for row in rows], dtype=np.float64) if COST in rows[0] else None,
    )


def paired_bootstrap(
    base: ProblemScores, tuned: ProblemScores, *, resamples: int = RESAMPLES, confidence: float = CONFIDENCE
) -> dict:
    """The tuned model's gain over the base model in percentage points, with its paired-bootstrap interval."""
    _check_same_problems(base, tuned)
    num_problems = len(base.ids)
    # each problem's difference of shares as an integer over a common denominator: exact sums on every machine
    denominator = int(np.lcm.reduce(np.r_[base.samples, tuned.samples]))
    differences = tuned.correct * (denominator // tuned.samples) - base.correct * (denominator // base.samples)
    gain, low, high = _percent_interval(differences, denominator, resamples, confidence)
    return {
        "gain": round(gain, 4),
        "ci_low": round(float(low), 4),
        "ci_high": round(float(high), 4),
        "confidence": confidence,
        "includes_zero": bool(low <= 0 <= high),
        "problems": num_problems,
        "resamples": resamples,
        "method": "paired bootstrap over problems, each problem's samples averaged",
    }


def pass_at_1_interval(scores: ProblemScores, *, resamples: int = RESAMPLES, confidence: float = CONFIDENCE) -> dict:
    """One model's pass@1[avg-of-n] in percent with its bootstrap interval over problems (the draws of
    ``paired_bootstrap``, summed in integers: the same interval on every machine)."""
    denominator = int(np.lcm.reduce(scores.samples))
    value, low, high = _percent_interval(
        scores.correct * (denominator // scores.samples), denominator, resamples, confidence
    )
    return {
        "pass@1": round(value, 4),
        "ci_low": round(float(low), 4),
        "ci_high": round(float(high), 4),
        "confidence": confidence,
        "problems": len(scores.ids),
    }


def _percent_interval(per_problem: np.ndarray, denominator: int, resamples: int, confidence: float):
    """(mean, low, high) in percent of the problems' integer ``per_problem`` shares over ``denominator``: their mean and
    its bootstrap interval (``_resampled_sums``, summed in integers: the same on every machine)."""
    scale = 100.0 / (denominator * len(per_problem))
    low, high = _interval(_resampled_sums(per_problem, resamples), confidence) * scale
    return float(per_problem.sum() * scale), low, high


def paired_cost_difference(
    reference: ProblemScores, model: ProblemScores, *, resamples: int = RESAMPLES, confidence: float = CONFIDENCE
) -> dict:
    """``model``'s mean price per problem less ``reference``'s, with its paired-bootstrap interval (the draws of
    ``paired_bootstrap``): each problem's price is the mean price of its samples (``ProblemScores.prices``: 0 for a
    model without prices), so ``reference_cost`` and ``model_cost`` are the models' mean price of one sample."""
    _check_same_problems(reference, model)
    num_problems = len(reference.ids)
    differences = model.prices() - reference.prices()
    low, high = _interval(_resampled_sums(differences, resamples), confidence) / num_problems
    return {
        "reference_cost": rounded_cost(math.fsum(reference.prices()) / num_problems),
        "model_cost": rounded_cost(math.fsum(model.prices()) / num_problems),
        "difference": rounded_cost(math.fsum(differences) / num_problems),
        "ci_low": rounded_cost(float(low)),
        "ci_high": rounded_cost(float(high)),
        "problems": num_problems,
        "resamples": resamples,
        "confidence": confidence,
    }


def _check_same_problems(base: ProblemScores, tuned: ProblemScores) -> None:
    if base.ids != tuned.ids:
        raise SnakeskillsError(
            "paired comparison: the two models' problem ids differ; both must be judged on the same eval split"
        )


def _resampled_sums(differences: np.ndarray, resamples: int) -> np.ndarray:
    """The per-problem ``differences`` summed over each of ``resamples`` draws of as many problems with
    replacement. The draws are fixed (seed 0, drawn in the same chunks every time), so every paired comparison over
    the same problems resamples the same problems."""
    num_problems = len(differences)
    generator = np.random.default_rng(0)
    totals = np.empty(resamples, dtype=differences.dtype)
    chunk = max(1, 4_000_000 // num_problems)
    for start in range(0, resamples, chunk):
        stop = min(resamples, start + chunk)
        draws = generator.integers(0, num_problems, size=(stop - start, num_problems))
        totals[start:stop] = differences[draws].sum(axis=1)
    return totals


def _interval(totals: np.ndarray, confidence: float) -> np.ndarray:
    """The resampled totals' central ``confidence`` interval, (low, high)."""
    tail = (1.0 - confidence) / 2
    return np.quantile(totals, [tail, 1.0 - tail], method="inverted_cdf")


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


def compare_accuracy_cost(reference_path, model_path) -> dict:
    """``{"accuracy": paired_bootstrap entry, "cost": paired_cost_difference entry}`` of the model whose
    problems.jsonl is ``model_path`` against the one whose is ``reference_path``."""
    reference, model = read_problem_scores(reference_path), read_problem_scores(model_path)
    try:
        return {"accuracy": paired_bootstrap(reference, model), "cost": paired_cost_difference(reference, model)}
    except SnakeskillsError as error:
        raise SnakeskillsError(f"{model_path} against {reference_path}: {error}") from None


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
