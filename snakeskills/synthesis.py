"""Problem synthesis: new training problems written from the problems a model gets wrong, labelled by majority vote.

The steps of one round, for one train benchmark (config key ``synthesis``; rules/synthesis.smk):

1. ``select_sources``: the train problems that seed the writer. ``failed``: those the previous model (the base
   model for round 1, round r-1 after that) solved in at most ``max_solved_share`` of its judged samples, the
   DataEnvGym feedback; ``all``: any train problem. At most ``max_problems``, drawn by a seeded hash, weakest first.
2. The writer samples ``new_per_problem`` texts per source through the ``generate`` rule (one random seed each).
3. ``filter_problems``: parse each text into a problem (``parse_problem``); drop empty and too long ones, repeats
   (normalized text, ``problem_key``), copies of a source or of any train problem, and problems too close to an
   eval problem of any benchmark (``NgramIndex``: n-gram overlap after normalization). Every drop is counted.
4. The solver samples ``num_samples`` solutions per kept problem (the ``generate`` rule again); ``label_problems``
   extracts their answers, groups them into equivalence classes (math-verify's, or exact), and takes the
   majority class as ``expected_answer`` when its share of the samples reaches ``min_agreement``.
   The solver's samples are judged against that label, so the ones that agree are SFT examples like any other.

Why plain n-gram sets for decontamination: the eval sets are small (thousands of problems), so an exact inverted
index answers in milliseconds without a new dependency, and its overlap coefficient (shared n-grams over the
shorter problem's) also catches an eval problem copied inside a longer text, which MinHash's Jaccard estimate
(datasketch) discounts by the length difference; rapidfuzz's edit ratios would compare every pair.
"""

from __future__ import annotations

import hashlib
import logging
import re
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from pathlib import Path

from snakeskills.errors import SnakeskillsError
from snakeskills.io import iter_jsonl, read_json, read_jsonl, write_json, write_jsonl, write_text
from snakeskills.judge import extract_answer, judge_verdicts, normalize_answer

logger = logging.getLogger(__name__)

# ---------------------------------------------------------------- sources


def solved_shares(judged_rows: Iterable[dict]) -> dict[str, float]:
    """Per problem id, the share of its judged samples (all seeds pooled) that were correct."""
    correct: Counter = Counter()
    total: Counter = Counter()
    for row in judged_rows:
        total[row["id"]] += 1
        correct[row["id"]] += bool(row["symbolic_correct"])
    return {problem_id: correct[problem_id] / total[problem_id] for problem_id in total}


def draw_key(seed: int, problem_id: str) -> str:
    """A stable pseudo-random order of problems, the same for any chunking or file order."""
    return hashlib.sha256(f"{seed}\x00{problem_id}".encode()).hexdigest()


def select_sources(
    train_records: list[dict],
    shares: dict[str, float] | None,
    *,
    problems: str,
    max_solved_share: float,
    max_problems: int | None,
    seed: int,
) -> list[dict]:
    """The train problems that seed the writer, in the train split's order, each with its ``solved_share``
    (``None`` for ``problems: all``).

    ``failed`` keeps problems whose solved share is at most ``max_solved_share``; a cap keeps the weakest first,
    ties broken by a seeded hash of the id. ``all`` draws up to ``max_problems`` by that hash alone.
    """
    if problems == "failed":
        if shares is None:
            raise SnakeskillsError("synthesis.sources.problems is 'failed' but no judged samples were given")
        missing = [record["id"] for record in train_records if record["id"] not in shares]
        if missing:
            raise SnakeskillsError(
                f"{len(missing)} train problems (first: {missing[0]!r}) have no judged sample to decide whether "
                "the model failed them"
            )
        candidates = [record for record in train_records if shares[record["id"]] <= max_solved_share]
        order = sorted(candidates, key=lambda record: (shares[record["id"]], draw_key(seed, record["id"])))
    elif problems == "all":
        order = sorted(train_records, key=lambda record: draw_key(seed, record["id"]))
    else:
        raise SnakeskillsError(f"synthesis.sources.problems: unknown value {problems!r}; known: failed, all")
    chosen = {record["id"] for record in (order if max_problems is None else order[:max_problems])}
    return [
        {**record, "solved_share": None if shares is None or problems == "all" else shares[record["id"]]}
        for record in train_records
        if record["id"] in chosen
    ]


# ---------------------------------------------------------------- parsing and normalization

# a label the writer may put before its problem ("New problem:", "**Problem 2:**"), and what may follow the problem
_LEADING_LABEL = re.compile(r"^\W*(?:new\s+)?(?:problem|question)\s*\d*\s*[:.)-]\W*", re.IGNORECASE)
_TRAILING_PART = re.compile(r"\n\s*\W*(?:solution|answer|new problem|problem|question)\s*\d*\s*[:.]", re.IGNORECASE)


def parse_problem(generation: str) -> str | None:
    """The problem a writer's text states: a leading label ("New problem:") removed, cut before a following
    solution, answer or next problem; ``None`` when nothing is left."""
    text = generation.strip()
    text = _LEADING_LABEL.sub("", text, count=1)
    match = _TRAILING_PART.search(text)
    if match:
        text = text[: match.start()]
    text = text.strip().strip("*").strip()
    return text or None


_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")
_TRAILING_ZEROS = re.compile(r"(\d+)\.(\d*?)0+(?!\d)")
_TOKEN = re.compile(r"\d+(?:\.\d+)?|[^\W\d_]+|[^\w\s]")


def problem_tokens(text: str) -> list[str]:
    """Words, numbers and symbols of a problem, case and spacing ignored and numbers written one way
    ("1,000.50" and "1000.5" are one token), so a reformatted copy has the same tokens."""
    text = _THOUSANDS.sub("", text.lower())
    text = _TRAILING_ZEROS.sub(lambda match: f"{match.group(1)}.{match.group(2)}".rstrip("."), text)
    return _TOKEN.findall(text)


def problem_key(text: str) -> str:
    """The normalized text that decides whether two problems are the same one."""
    return " ".join(problem_tokens(text))


# ---------------------------------------------------------------- decontamination


def ngrams(tokens: list[str], size: int) -> set[tuple[str, ...]]:
    """The token n-grams of a problem; a problem shorter than ``size`` tokens is one gram, itself."""
    if len(tokens) < size:
        return {tuple(tokens)} if tokens else set()
    return {tuple(tokens[start : start + size]) for start in range(len(tokens) - size + 1)}


class NgramIndex:
    """Eval problems indexed by their n-grams; ``closest`` gives the most similar one to a text.

    Similarity is the overlap coefficient of the two n-gram sets: shared n-grams over the smaller set's size,
    1.0 for a copy, a reformatted copy or an eval problem embedded in a longer text."""

    def __init__(self, problems: list[dict], size: int):
        self.size = size
        self.problems = problems
        self.grams = [ngrams(problem_tokens(problem["problem"]), size) for problem in problems]
        self.index: dict[tuple[str, ...], list[int]] = defaultdict(list)
        for position, grams in enumerate(self.grams):
            for gram in grams:
                self.index[gram].append(position)

    def closest(self, text: str) -> tuple[dict | None, float]:
        grams = ngrams(problem_tokens(text), self.size)
        shared: Counter = Counter()
        for gram in grams:
            shared.update(self.index.get(gram, ()))
        if not shared:
            return None, 0.0
        position, score = max(
            ((position, count / min(len(grams), len(self.grams[position]))) for position, count in shared.items()),
            key=lambda item: (item[1], -item[0]),
        )
        return self.problems[position], score


def filter_problems(
    generated_rows: list[dict],
    *,
    train_problems: list[str],
    eval_problems: list[dict],
    max_chars: int,
    pattern: str | None,
    ngram_size: int,
    threshold: float,
    id_prefix: str,
) -> tuple[list[dict], list[dict], dict]:
    """New problems from the writer's rows (each with ``id`` of its source, ``problem`` the source's text,
    ``generation`` and ``random_seed``), in row order; returns (kept, dropped, counts).

    Kept rows: ``id`` (``{id_prefix}-{n}``), ``problem``, ``source_id``, ``source_problem``, ``random_seed``.
    Dropped rows say why (``reason``) and, for contamination, the eval problem matched and the score.
    ``pattern`` (synthesis.filter.pattern): a regular expression a parsed problem must match (``re.search``),
    the form a structured task's problems take; ``None`` = any text.
    ``eval_problems``: rows with ``problem``, ``benchmark`` and ``id``."""
    index = NgramIndex(eval_problems, ngram_size)
    train_keys = {problem_key(problem) for problem in train_problems}
    counts = dict.fromkeys(("generated", "parsed", "unique", "clean"), 0)
    counts.update(dict.fromkeys(("empty", "too_long", "off_pattern", "duplicate", "copy_of_train", "contaminated"), 0))
    form = re.compile(pattern) if pattern is not None else None
    seen: set[str] = set()
    kept, dropped = [], []

    def drop(row, reason, **details):
        counts[reason] += 1
        dropped.append({"source_id": row["id"], "generation": row["generation"], "reason": reason, **details})

    for row in generated_rows:
        counts["generated"] += 1
        problem = parse_problem(row["generation"]) if row.get("finish_reason") != "error" else None
        if problem is None:
            drop(row, "empty")
            continue
        if len(problem) > max_chars:
            drop(row, "too_long", problem=problem)
            continue
        if form is not None and not form.search(problem):
            drop(row, "off_pattern", problem=problem)
            continue
        counts["parsed"] += 1
        key = problem_key(problem)
        if key in seen:
            drop(row, "duplicate", problem=problem)
            continue
        seen.add(key)
        if key == problem_key(row["problem"]) or key in train_keys:
            drop(row, "copy_of_train", problem=problem)
            continue
        counts["unique"] += 1
        match, score = index.closest(problem)
        if match is not None and score >= threshold:
            drop(
                row,
                "contaminated",
                problem=problem,
                score=round(score, 4),
                eval_benchmark=match["benchmark"],
                eval_id=match["id"],
                eval_problem=match["problem"],
            )
            continue
        counts["clean"] += 1
        kept.append(
            {
                "id": f"{id_prefix}-{len(kept):06d}",
                "problem": problem,
                "source_id": row["id"],
                "source_problem": row["problem"],
                "random_seed": row["random_seed"],
            }
        )
    return kept, dropped, counts


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
    answer_groups: list[list[str | None]], judge_config: dict, *, num_workers: int
) -> Callable[[str, str], bool]:
    """``same(a, b)`` under judge.equivalence for every pair of distinct answers any one problem has, each pair
    compared once (math-verify in the judge's timed worker processes)."""
    pairs = set()
    for answers in answer_groups:
        distinct = list(dict.fromkeys(normalize_answer(answer) for answer in answers if answer is not None))
        pairs.update((a, b) for position, a in enumerate(distinct) for b in distinct[position + 1 :])
    ordered = sorted(pairs)
    agreeing = judge_verdicts(ordered, judge_config, num_workers=num_workers)
    equal = {pair for pair, verdict in zip(ordered, agreeing, strict=True) if verdict}
    return lambda a, b: (a, b) in equal or (b, a) in equal


def label_problems(
    problems: list[dict],
    solver_seed_rows: list[list[dict]],
    *,
    judge_config: dict,
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
    extract = {"method": judge_config["extraction"], "regex": judge_config["regex"]}
    answers = {
        problem["id"]: [extract_answer(row["generation"], **extract) for row in rows_by_id[problem["id"]]]
        for problem in problems
    }
    missing = [problem["id"] for problem in problems if len(answers[problem["id"]]) != len(solver_seed_rows)]
    if missing:
        raise SnakeskillsError(
            f"{len(missing)} synthesized problems (first: {missing[0]!r}) lack a sample from some seed of the solver"
        )
    same = equivalence_function(list(answers.values()), judge_config, num_workers=num_workers)
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
        check_labels(labelled, exact_answer, judge_config, num_workers=num_workers)
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
    labelled: list[dict], exact_answer: Callable[[str], str | None], judge_config: dict, *, num_workers: int
) -> None:
    """Add ``label_correct`` to each labelled problem: its label against the answer the benchmark computes
    (``None`` where it cannot compute one: a problem not in the benchmark's form)."""
    truths = [exact_answer(record["problem"]) for record in labelled]
    pairs = [(truth, record["expected_answer"]) for truth, record in zip(truths, labelled, strict=True) if truth]
    label_verdicts = iter(judge_verdicts(pairs, judge_config, num_workers=num_workers))
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


# ---------------------------------------------------------------- the steps as file operations (rules/synthesis.smk)


def rows_by_seed(chunk_paths: list[str | Path], chunks_per_seed: int) -> list[list[dict]]:
    """Generated chunk files, given seed by seed (``chunks_per_seed`` files each, as the plan lists them), pooled
    per seed."""
    if len(chunk_paths) % chunks_per_seed:
        raise SnakeskillsError(f"{len(chunk_paths)} chunk files do not split into seeds of {chunks_per_seed} chunks")
    return [
        [row for path in chunk_paths[start : start + chunks_per_seed] for row in read_jsonl(path)]
        for start in range(0, len(chunk_paths), chunks_per_seed)
    ]


def write_sources(
    train_path: str | Path, judged_paths: list[str | Path], output_path: str | Path, *, sources: dict, seed: int
) -> int:
    """Round r's source problems (``select_sources``) from the train split and the previous model's judged samples."""
    train = read_jsonl(train_path)
    shares = solved_shares(row for path in judged_paths for row in iter_jsonl(path)) if judged_paths else None
    chosen = select_sources(
        train,
        shares,
        problems=sources["problems"],
        max_solved_share=sources["max_solved_share"],
        max_problems=sources["max_problems"],
        seed=seed,
    )
    if not chosen:
        raise SnakeskillsError(
            f"{train_path}: no train problem was solved in at most synthesis.sources.max_solved_share="
            f"{sources['max_solved_share']} of its samples, so the writer has nothing to start from; raise it or use "
            "synthesis.sources.problems: all"
        )
    write_jsonl(output_path, chosen)
    logger.info("%d of %d train problems seed the writer (%s)", len(chosen), len(train), sources["problems"])
    return len(chosen)


def read_eval_problems(eval_paths: list[str | Path]) -> list[dict]:
    """``benchmark``, ``id`` and ``problem`` of every row of the prepared eval splits
    ``data/{benchmark}/{split}.jsonl``."""
    return [
        {"benchmark": Path(path).parent.name, "id": row["id"], "problem": row["problem"]}
        for path in eval_paths
        for row in iter_jsonl(path)
    ]


def write_problems(
    generated_paths: list[str | Path],
    *,
    train_paths: list[str | Path],
    eval_paths: list[str | Path],
    output_path: str | Path,
    dropped_path: str | Path,
    stats_path: str | Path,
    filter_config: dict,
    decontamination: dict,
    id_prefix: str,
    writer: str,
    round_number: int,
) -> dict:
    """Parse, deduplicate and decontaminate the writer's texts (``filter_problems``); eval problems come from the
    prepared eval splits ``data/{benchmark}/{split}.jsonl``."""
    generated = [row for path in generated_paths for row in read_jsonl(path)]
    train_problems = [row["problem"] for path in train_paths for row in iter_jsonl(path)]
    eval_problems = read_eval_problems(eval_paths)
    kept, dropped, counts = filter_problems(
        generated,
        train_problems=train_problems,
        eval_problems=eval_problems,
        max_chars=filter_config["max_chars"],
        pattern=filter_config["pattern"],
        ngram_size=decontamination["ngram_size"],
        threshold=decontamination["threshold"],
        id_prefix=id_prefix,
    )
    kept = [{**row, "generated_by": writer, "round": round_number} for row in kept]
    write_jsonl(output_path, kept)
    write_jsonl(dropped_path, dropped)
    write_json(stats_path, counts)
    logger.info("synthesized problems: %s", counts)
    return counts


def write_labels(
    problems_path: str | Path,
    solver_paths: list[str | Path],
    *,
    labelled_path: str | Path,
    judged_path: str | Path,
    stats_path: str | Path,
    judge_config: dict,
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
        judge_config=judge_config,
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


FUNNEL_STEPS = ("generated", "parsed", "unique", "clean", "labelled")


def funnel(
    filter_stats: list[dict],
    label_stats: list[dict],
    runs: list[tuple[int, str]],
    sft_stats: dict,
    llm_check_stats: list[dict] | None = None,
) -> list[dict]:
    """One row per (round, benchmark): the new problems left after each step, the round's SFT examples from
    synthesized problems, and the label accuracy where the benchmark could check labels. With the LLM
    contamination check (``llm_check_stats``, one per run), clean counts what both checks kept, and
    ``llm_contaminated`` what the LLM check removed."""
    rows = []
    for position, ((round_number, benchmark), filtered, labelled) in enumerate(
        zip(runs, filter_stats, label_stats, strict=True)
    ):
        row = {"round": round_number, "benchmark": benchmark, **{step: filtered[step] for step in FUNNEL_STEPS[:-1]}}
        if llm_check_stats:
            row["llm_contaminated"] = llm_check_stats[position]["contaminated"]
            row["clean"] = llm_check_stats[position]["clean"]
        row["labelled"] = labelled["labelled"]
        row["sft_examples"] = sft_stats[round_number]["kept_by_source"].get("synthesized", 0)
        row["label_accuracy"] = labelled.get("label_accuracy")
        row["label_checked"] = labelled.get("label_checked")
        rows.append(row)
    return rows


def format_funnel(rows: list[dict]) -> str:
    header = ["round", "benchmark", *FUNNEL_STEPS, "SFT examples", "label accuracy"]
    lines = []
    for row in rows:
        accuracy = (
            f"{100 * row['label_accuracy']:.2f}% of {row['label_checked']}"
            if row["label_accuracy"] is not None
            else "-"
        )
        lines.append(
            [
                f"round{row['round']}",
                row["benchmark"],
                *(str(row[step]) for step in FUNNEL_STEPS),
                str(row["sft_examples"]),
                accuracy,
            ]
        )
    widths = [max(len(str(cell)) for cell in column) for column in zip(header, *lines, strict=True)]
    text = [
        "synthesized problems per round (generated -> parsed -> unique -> clean of contamination -> labelled), "
        "and the round's SFT examples from them"
    ]
    if any("llm_contaminated" in row for row in rows):
        removed = ", ".join(f"round{row['round']} {row['benchmark']}: {row['llm_contaminated']}" for row in rows)
        text.append(f"clean: by the n-gram and the LLM check (removed by the LLM judge: {removed})")
    for cells in [header, *lines]:
        text.append("  ".join(str(cell).ljust(width) for cell, width in zip(cells, widths, strict=True)).rstrip())
    return "\n".join(text) + "\n"


def write_funnel(
    filter_paths: list[str | Path],
    label_paths: list[str | Path],
    sft_stats_paths: list[str | Path],
    llm_check_paths: list[str | Path],
    *,
    runs: list[tuple[int, str]],
    rounds: list[int],
    output_path: str | Path,
    table_path: str | Path,
) -> list[dict]:
    sft_stats = {round_number: read_json(path) for round_number, path in zip(rounds, sft_stats_paths, strict=True)}
    rows = funnel(
        [read_json(path) for path in filter_paths],
        [read_json(path) for path in label_paths],
        runs,
        sft_stats,
        [read_json(path) for path in llm_check_paths],
    )
    write_json(output_path, rows)
    write_text(table_path, format_funnel(rows))
    return rows
