"""Majority labels of synthesized problems (synthesis.label): the solver's answers to each new problem are grouped
into equivalence classes (math-verify's, or exact), the majority class becomes ``expected_answer`` when its share
of the samples reaches ``min_agreement``, and the solver's samples are judged against that label, so the ones that
agree are SFT examples like any other."""

from __future__ import annotations

import logging
from collections import Counter, defaultdict
from collections.abc import Callable
from pathlib import Path

from snakeskills.errors import SnakeskillsError
from snakeskills.io import read_jsonl, write_json, write_jsonl
from snakeskills.judging.extractors import extract_answer
from snakeskills.judging.judge import judge_verdicts, normalize_answer
from snakeskills.settings.judging import RuleJudge

logger = logging.getLogger(__name__)


# ---------------------------------------------------------------- majority labels


def answer_classes(answers: list[str], same: Callable[[str, str], bool]) -> list[list[int]]:
    """Indices of ``answers`` grouped into equivalence classes ("1/2" and "0.5" are one answer), in order of first
    appearance; ``same(a, b)`` decides whether two distinct normalized answers are equal."""
    classes: list[list[int]] = []
    representatives: list[str] = []
    for position, answer in enumerate(answers):
        for number, representative in enumerate(representatives):
            if answer == representative or same(representative, answer):
                classes[number].append(position)
                break
        else:
            classes.append([position])
            representatives.append(answer)
    return classes


def majority(answers: list[str | None], same: Callable[[str, str], bool]) -> tuple[str | None, float, str]:
    """(label, agreement, verdict) for one problem's sampled answers.

    agreement: the largest class's share of all samples (samples with no answer count against it). The label is
    the class's most common written form. verdict: ``labelled``, ``no_answer`` or ``tie`` (two classes share the
    top count: no majority)."""
    given = [(position, normalize_answer(answer)) for position, answer in enumerate(answers) if answer is not None]
    if not given:
        return None, 0.0, "no_answer"
    classes = answer_classes([answer for _, answer in given], same)
    sizes = sorted((len(members) for members in classes), reverse=True)
    top = max(classes, key=len)
    agreement = len(top) / len(answers)
    if len(sizes) > 1 and sizes[0] == sizes[1]:
        return None, agreement, "tie"
    forms = Counter(given[member][1] for member in top)  # most_common keeps first appearance among equals
    return forms.most_common(1)[0][0], agreement, "labelled"


def equivalence_function(
    answer_groups: list[list[str | None]], judge: RuleJudge, *, num_workers: int
) -> Callable[[str, str], bool]:
    """``same(a, b)`` under judge.equivalence for every pair of distinct answers any one problem has, each pair
    compared once (math-verify in the judge's timed worker processes)."""
    pairs = set()
    for answers in answer_groups:
        distinct = list(dict.fromkeys(normalize_answer(answer) for answer in answers if answer is not None))
        pairs.update((a, b) for position, a in enumerate(distinct) for b in distinct[position + 1 :])
    ordered = sorted(pairs)
    agreeing = judge_verdicts(ordered, judge, num_workers=num_workers)
    equal = {pair for pair, verdict in zip(ordered, agreeing, strict=True) if verdict}
    return lambda a, b: (a, b) in equal or (b, a) in equal


def label_problems(
    problems: list[dict],
    solver_seed_rows: list[list[dict]],
    *,
    judge: RuleJudge,
    min_agreement: float,
    num_workers: int,
    exact_answer: Callable[[str], str | None] | None = None,
) -> tuple[list[dict], list[list[dict]], dict]:
    """Majority labels from the solver's samples; returns (labelled problems, judged rows per seed, counts).

    ``solver_seed_rows``: per random seed, the solver's generated rows for ``problems`` (any order).
    A problem is labelled when its majority class holds at least ``min_agreement`` of the samples; it then
    carries ``expected_answer`` and ``agreement``, and each seed's rows for it are judged against the label
    (``predicted_answer``, ``symbolic_correct``). ``exact_answer`` (a benchmark that can compute a problem's
    answer itself) adds ``label_correct`` to each labelled problem and ``label_accuracy`` to the counts."""
    rows_by_id: dict[str, list[dict]] = defaultdict(list)
    for rows in solver_seed_rows:
        for row in rows:
            rows_by_id[row["id"]].append(row)
    extract = {"method": judge.extraction, "regex": judge.regex}
    answers = {
        problem["id"]: [extract_answer(row["generation"], **extract) for row in rows_by_id[problem["id"]]]
        for problem in problems
    }
    missing = [problem["id"] for problem in problems if len(answers[problem["id"]]) != len(solver_seed_rows)]
    if missing:
        raise SnakeskillsError(
            f"{len(missing)} synthesized problems (first: {missing[0]!r}) lack a sample from some seed of the solver"
        )
    same = equivalence_function(list(answers.values()), judge, num_workers=num_workers)
    counts = {"problems": len(problems), "labelled": 0, "low_agreement": 0, "tie": 0, "no_answer": 0}
    labelled = []
    for problem in problems:
        label, agreement, verdict = majority(answers[problem["id"]], same)
        if verdict == "labelled" and agreement < min_agreement:
            verdict = "low_agreement"
        counts[verdict] += 1
        if verdict != "labelled":
            continue
        labelled.append({**problem, "expected_answer": label, "agreement": round(agreement, 4)})
    if exact_answer is not None:
        check_labels(labelled, exact_answer, judge, num_workers=num_workers)
        verified = [record["label_correct"] for record in labelled if record["label_correct"] is not None]
        counts["label_checked"] = len(verified)
        counts["label_accuracy"] = round(sum(verified) / len(verified), 4) if verified else None
    judged = judge_against_labels(labelled, solver_seed_rows, same, extract)
    logger.info(
        "%d synthesized problems: %d labelled (agreement >= %s), %d below it, %d ties, %d with no answer",
        counts["problems"],
        counts["labelled"],
        min_agreement,
        counts["low_agreement"],
        counts["tie"],
        counts["no_answer"],
    )
    return labelled, judged, counts


def check_labels(
    labelled: list[dict], exact_answer: Callable[[str], str | None], judge: RuleJudge, *, num_workers: int
) -> None:
    """Add ``label_correct`` to each labelled problem: its label against the answer the benchmark computes
    (``None`` where it cannot compute one: a problem not in the benchmark's form)."""
    truths = [exact_answer(record["problem"]) for record in labelled]
    pairs = [(truth, record["expected_answer"]) for truth, record in zip(truths, labelled, strict=True) if truth]
    label_verdicts = iter(judge_verdicts(pairs, judge, num_workers=num_workers))
    for truth, record in zip(truths, labelled, strict=True):
        record["label_correct"] = next(label_verdicts) if truth else None


def judge_against_labels(
    labelled: list[dict], solver_seed_rows: list[list[dict]], same: Callable[[str, str], bool], extract: dict
) -> list[list[dict]]:
    """Each seed's solver rows for the labelled problems, in the labelled order, judged against the label with the
    equivalence already decided for the majority (the label is one of each problem's compared answers)."""
    by_id = {record["id"]: record for record in labelled}
    judged = []
    for rows in solver_seed_rows:
        position = {row["id"]: row for row in rows}
        seed_rows = []
        for problem_id, record in by_id.items():
            row = position[problem_id]
            answer = extract_answer(row["generation"], **extract)
            label = record["expected_answer"]
            normalized = normalize_answer(answer) if answer is not None else None
            correct = normalized is not None and (normalized == label or same(label, normalized))
            seed_rows.append(
                {
                    **row,
                    "expected_answer": label,
                    "agreement": record["agreement"],
                    "predicted_answer": answer,
                    "symbolic_correct": correct,
                }
            )
        judged.append(seed_rows)
    return judged


def rows_by_seed(chunk_paths: list[str | Path], chunks_per_seed: int) -> list[list[dict]]:
    """Generated chunk files, given seed by seed (``chunks_per_seed`` files each, as the plan lists them), pooled
    per seed."""
    if len(chunk_paths) % chunks_per_seed:
        raise SnakeskillsError(f"{len(chunk_paths)} chunk files do not split into seeds of {chunks_per_seed} chunks")
    return [
        [row for path in chunk_paths[start : start + chunks_per_seed] for row in read_jsonl(path)]
        for start in range(0, len(chunk_paths), chunks_per_seed)
    ]


def write_labels(
    problems_path: str | Path,
    solver_paths: list[str | Path],
    *,
    labelled_path: str | Path,
    judged_path: str | Path,
    stats_path: str | Path,
    judge: RuleJudge,
    min_agreement: float,
    num_workers: int,
    exact_answer: Callable[[str], str | None] | None,
    solver: str,
    chunks_per_seed: int,
) -> dict:
    """Majority labels (``label_problems``): the labelled split, and the solver's samples judged against it.
    ``solver_paths``: the solver's chunk files, seed by seed, ``chunks_per_seed`` each."""
    problems = read_jsonl(problems_path)
    labelled, judged, counts = label_problems(
        problems,
        rows_by_seed(solver_paths, chunks_per_seed) if problems else [],
        judge=judge,
        min_agreement=min_agreement,
        num_workers=num_workers,
        exact_answer=exact_answer,
    )
    labelled = [{**record, "labelled_by": solver} for record in labelled]
    write_jsonl(labelled_path, labelled)
    write_jsonl(judged_path, [row for rows in judged for row in rows])
    write_json(stats_path, counts)
    return counts


def exact_answer_function(name: str | None) -> Callable[[str], str | None] | None:
    """The function that computes a synthesized problem's answer for a benchmark that can (``arithmetic``: the
    synthetic skill), else ``None``."""
    from snakeskills.data.synthetic import arithmetic_answer

    if name is None:
        return None
    if name != "arithmetic":
        raise SnakeskillsError(f"no exact answers for {name!r}; known: arithmetic")
    return arithmetic_answer
