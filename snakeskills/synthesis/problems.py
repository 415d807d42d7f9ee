"""Problem synthesis: new training problems written from the problems a model gets wrong, labelled by majority vote.

One round, for one train benchmark (config key ``synthesis``; rules/synthesis.smk):

1. ``select_sources``: the seeds. ``failed``: train problems the previous model (the base model for round 1)
   solved in at most ``max_solved_share`` of its judged samples (DataEnvGym's feedback); ``all``: any train
   problem. At most ``max_problems``, drawn by a seeded hash, weakest first.
2. The writer samples ``new_per_problem`` texts per source through the ``generate`` rule (one seed each).
3. ``filter_problems``: parse each text (``parse_problem``); drop empty, too long and repeated ones
   (``problem_key``), copies of a source or train problem, and those too close to any eval problem
   (``NgramIndex``: n-gram overlap after normalization). Every drop is counted.
4. The solver samples ``num_samples`` solutions per kept problem; ``label_problems``
   (``snakeskills.synthesis.majority_labels``) takes the majority equivalence class of their answers as
   ``expected_answer`` when its share reaches ``min_agreement``; the samples judged against it are SFT examples.

Why n-gram sets: the eval sets are small, so an exact inverted index is fast without a dependency, and its overlap
coefficient catches an eval problem copied inside a longer text, which MinHash's Jaccard discounts."""

from __future__ import annotations

import hashlib
import logging
import re
from collections import Counter, defaultdict
from collections.abc import Iterable
from pathlib import Path

from snakeskills.errors import SnakeskillsError
from snakeskills.io import iter_jsonl, read_jsonl, write_json, write_jsonl

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


# ---------------------------------------------------------------- the steps as file operations (rules/synthesis.smk)


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
