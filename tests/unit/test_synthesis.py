"""Problem synthesis (snakeskills/synthesis/problems.py, majority_labels.py, synthesis_funnel.py,
contamination_check.py): sources, parsing, normalized dedup, n-gram decontamination, the LLM
contamination check (through the real hf backend, an untrained tiny Llama as the judge model) and majority labels
over math-verify equivalence classes, as plain functions."""

from __future__ import annotations

import pytest
from conftest import asked_model, default_section, hf_backend, rule_judge
from interruptions import run_killed_after_batches

from snakeskills.backends import SamplingParams
from snakeskills.data.synthetic import arithmetic_answer
from snakeskills.errors import SnakeskillsError
from snakeskills.generation.resumable import progress_path_for
from snakeskills.io import read_json, read_jsonl, write_jsonl
from snakeskills.judging.llm_judge import parse_judgement
from snakeskills.plan.sections import JUDGE_RULE_KEYS
from snakeskills.prompts import resolve_prompt
from snakeskills.synthesis.contamination_check import NO_SHARED_WORD_JUDGEMENT, llm_contamination_check
from snakeskills.synthesis.funnel import funnel
from snakeskills.synthesis.majority_labels import label_problems, majority
from snakeskills.synthesis.problems import (
    NgramIndex,
    filter_problems,
    parse_problem,
    problem_key,
    select_sources,
    solved_shares,
)

GSM8K_LIKE = (
    "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May. "
    "How many clips did Natalia sell altogether in April and May?"
)
BIG_NUMBERS = "A school bought 1,250 pencils at $0.50 each and 3,000 erasers. How much did the pencils cost?"


def judge_section(equivalence="math-verify"):
    """The default config's rule-based judge, comparing with ``equivalence``."""
    judge = default_section("judge")
    return rule_judge({key: judge[key] for key in JUDGE_RULE_KEYS}, equivalence=equivalence)


# ---------------------------------------------------------------- sources


def test_failed_sources_are_the_problems_solved_in_at_most_the_share_weakest_first():
    train = [{"id": f"p{index}", "problem": f"{index}+1", "expected_answer": str(index + 1)} for index in range(6)]
    judged = [
        {"id": f"p{index}", "symbolic_correct": seed < correct}
        for index, correct in enumerate([0, 1, 4, 2, 0, 3])
        for seed in range(4)
    ]
    shares = solved_shares(judged)
    assert shares == {"p0": 0.0, "p1": 0.25, "p2": 1.0, "p3": 0.5, "p4": 0.0, "p5": 0.75}
    chosen = select_sources(train, shares, problems="failed", max_solved_share=0.5, max_problems=None, seed=0)
    assert [row["id"] for row in chosen] == ["p0", "p1", "p3", "p4"], "train order kept"
    assert [row["solved_share"] for row in chosen] == [0.0, 0.25, 0.5, 0.0]
    capped = select_sources(train, shares, problems="failed", max_solved_share=0.5, max_problems=2, seed=0)
    assert {row["id"] for row in capped} == {"p0", "p4"}, "the weakest first"
    drawn = select_sources(train, None, problems="all", max_solved_share=0.0, max_problems=3, seed=5)
    assert (
        len(drawn) == 3
        and drawn
        == select_sources(list(reversed(train)), None, problems="all", max_solved_share=0.0, max_problems=3, seed=5)[
            ::-1
        ]
    ), "the draw depends on ids and the seed, not on file order"
    with pytest.raises(SnakeskillsError, match="no judged sample"):
        select_sources(train, {"p0": 0.0}, problems="failed", max_solved_share=0.5, max_problems=None, seed=0)


# ---------------------------------------------------------------- parsing and normalization


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("New problem: 23+45", "23+45"),
        ("  **Problem:** What is 7 times 8?\n\nSolution: 7*8 = 56", "What is 7 times 8?"),
        (
            "Tom has 3 apples and buys 4 more. How many does he have?\nAnswer: 7",
            "Tom has 3 apples and buys 4 more. How many does he have?",
        ),
        (
            "A train goes 60 km in 1 hour.\nHow far in 3 hours?\n\nNew problem: 2+2",
            "A train goes 60 km in 1 hour.\nHow far in 3 hours?",
        ),
        ("   \n ", None),
        ("Problem:", None),
    ],
)
def test_parse_problem_strips_labels_and_what_follows(text, problem):
    assert parse_problem(text) == problem


def test_problem_key_ignores_case_spacing_and_number_formatting():
    assert problem_key("23 + 45") == problem_key("23+45") == "23 + 45"
    assert problem_key("It costs $1,250.50 in TOTAL.") == problem_key("it costs $1250.5 in total .")
    assert problem_key("3.0 kg") == problem_key("3 kg")
    assert problem_key("23+45") != problem_key("23+46")
    assert problem_key("12,34") != problem_key("1234"), "a comma that is not a thousands separator stays"


# ---------------------------------------------------------------- decontamination

EVAL = [
    {"benchmark": "gsm8k", "id": "test-0", "problem": GSM8K_LIKE},
    {"benchmark": "gsm8k", "id": "test-1", "problem": BIG_NUMBERS},
    {"benchmark": "arithmetic", "id": "test-000007", "problem": "31+52"},
]


@pytest.mark.parametrize(
    ("candidate", "eval_id"),
    [
        (GSM8K_LIKE.replace(" ", "  ").replace("48", " 48 "), "test-0"),  # whitespace changed
        (BIG_NUMBERS.replace("1,250", "1250").replace("$0.50", "$0.5").upper(), "test-1"),  # numbers reformatted
        ("Here is a problem. " + GSM8K_LIKE + " Explain your steps.", "test-0"),  # embedded in a longer text
        (GSM8K_LIKE.replace("Natalia", "Maria").replace("Natalia", "Maria"), "test-0"),  # a name swapped
        ("31 + 52", "test-000007"),
    ],
)
def test_a_reformatted_or_embedded_eval_problem_is_caught(candidate, eval_id):
    match, score = NgramIndex(EVAL, 5).closest(candidate)
    assert match["id"] == eval_id and score >= 0.5, score


@pytest.mark.parametrize(
    "candidate",
    [
        "Maria picked 12 apples on Monday and twice as many on Tuesday. How many apples did she pick in all?",
        "31+53",
        "52+31",
        "How many clips?",
    ],
)
def test_a_new_problem_is_not_flagged(candidate):
    _, score = NgramIndex(EVAL, 5).closest(candidate)
    assert score < 0.5, score


def test_filter_counts_every_drop_and_keeps_new_problems_in_order():
    def row(source, generation, seed=0, problem="10+20"):
        return {
            "id": source,
            "problem": problem,
            "generation": generation,
            "random_seed": seed,
            "finish_reason": "stop",
        }

    rows = [
        row("s1", "New problem: 11+22"),
        row("s1", "New problem: 11 + 22", seed=1),  # a repeat once normalized
        row("s2", "  "),  # nothing parsed
        row("s2", "10+20", seed=1),  # its own source
        row("s3", "5+5"),  # another train problem
        row("s3", "Problem: 31 + 52", seed=1),  # an eval problem
        row("s4", "x" * 50),  # too long
        row("s4", "40+2", seed=1),
        row("s5", "What is 40 plus 3?"),  # not in the task's form
    ]
    kept, dropped, counts = filter_problems(
        rows,
        train_problems=["10+20", "5+5"],
        eval_problems=EVAL,
        max_chars=40,
        pattern=r"^\d+ ?\+ ?\d+$",
        ngram_size=5,
        threshold=0.5,
        id_prefix="synth-round1",
    )
    assert [(row["id"], row["problem"], row["source_id"]) for row in kept] == [
        ("synth-round1-000000", "11+22", "s1"),
        ("synth-round1-000001", "40+2", "s4"),
    ]
    assert counts == {
        "generated": 9,
        "parsed": 6,
        "unique": 3,
        "clean": 2,
        "empty": 1,
        "too_long": 1,
        "off_pattern": 1,
        "duplicate": 1,
        "copy_of_train": 2,
        "contaminated": 1,
    }
    (contaminated,) = [row for row in dropped if row["reason"] == "contaminated"]
    assert contaminated["eval_id"] == "test-000007" and contaminated["score"] == 1.0


# ---------------------------------------------------------------- the LLM contamination check

# a prompt inside the tiny model's character set; real runs use the shipped same-problem template
SAME_PROBLEM_PROMPT = resolve_prompt(
    {
        "template": None,
        "system": None,
        "user": "{problem}?{similar_problem}:",
        "num_few_shot": None,
        "chat_template": False,
        "chat_template_kwargs": {},
    }
)
EVAL_ROWS = [{"id": f"e{i}", "problem": problem} for i, problem in enumerate(["12+30", "45+17", "8+8"])]
# "77-66" shares no word (number or symbol) with any eval problem: kept without asking the model
CANDIDATES = [
    {"id": f"synth-round1-{i:06d}", "problem": problem, "source_id": "t0", "random_seed": i % 3}
    for i, problem in enumerate(["30+12", "77-66", "45+71", "8+9", "12+31", "60-50", "17+45"])
]


@pytest.fixture(scope="module")
def judge_backend(tiny_checkpoint):
    return hf_backend(str(tiny_checkpoint), batch_size=8, threads=1)


@pytest.fixture()
def contamination_inputs(tmp_path):
    write_jsonl(tmp_path / "candidates.jsonl", CANDIDATES)
    (tmp_path / "data/arithmetic").mkdir(parents=True)
    write_jsonl(tmp_path / "data/arithmetic/test.jsonl", EVAL_ROWS)
    return tmp_path


def _check(backend, folder, name):
    return llm_contamination_check(
        asked_model(
            backend,
            SAME_PROBLEM_PROMPT,
            SamplingParams(temperature=1.0, top_p=1.0, top_k=0, max_new_tokens=8),
            rows_per_flush=2,
        ),
        candidates_path=folder / "candidates.jsonl",
        eval_paths=[folder / "data/arithmetic/test.jsonl"],
        problems_path=folder / f"{name}-problems.jsonl",
        checked_path=folder / f"{name}-checked.jsonl",
        stats_path=folder / f"{name}-stats.json",
    )


def test_each_candidate_is_judged_beside_its_most_similar_eval_problem(judge_backend, contamination_inputs):
    counts = _check(judge_backend, contamination_inputs, "run")
    checked = read_jsonl(contamination_inputs / "run-checked.jsonl")
    assert [row["id"] for row in checked] == [row["id"] for row in CANDIDATES]
    similar = {row["problem"]: row["similar_problem"] for row in checked}
    assert similar["30+12"] == "12+30" and similar["17+45"] == "45+17" and similar["8+9"] == "8+8"
    assert similar["77-66"] is None and similar["60-50"] is None
    assert {row["similar_benchmark"] for row in checked if row["similar_problem"]} == {"arithmetic"}
    for row in checked:
        assert row["llm_contaminated"] is parse_judgement(row["contamination_judgement"])
        # the model answered every candidate sharing a word with an eval problem, and no other
        assert (row["contamination_judgement"] == NO_SHARED_WORD_JUDGEMENT) is (row["similar_problem"] is None)
    kept = read_jsonl(contamination_inputs / "run-problems.jsonl")
    assert kept == [row for row, verdict in zip(CANDIDATES, checked, strict=True) if not verdict["llm_contaminated"]]
    assert counts == read_json(contamination_inputs / "run-stats.json")
    assert counts == {"checked": 7, "asked": 5, "contaminated": 7 - len(kept), "clean": len(kept)}


def test_a_killed_check_resumes_to_the_same_verdicts(judge_backend, contamination_inputs, monkeypatch):
    _check(judge_backend, contamination_inputs, "reference")
    run_killed_after_batches(
        judge_backend, monkeypatch, lambda: _check(judge_backend, contamination_inputs, "resumed"), batches=1
    )
    assert progress_path_for(contamination_inputs / "resumed-checked.jsonl").exists()
    _check(judge_backend, contamination_inputs, "resumed")
    for suffix in ("checked.jsonl", "problems.jsonl"):
        assert (contamination_inputs / f"resumed-{suffix}").read_bytes() == (
            contamination_inputs / f"reference-{suffix}"
        ).read_bytes()


def test_the_funnel_counts_what_the_llm_check_removed():
    filtered = {"generated": 10, "parsed": 9, "unique": 8, "clean": 7}
    label = {"labelled": 5, "label_accuracy": None, "label_checked": None}
    sft = {1: {"kept_by_source": {"synthesized": 5}}}
    (row,) = funnel([filtered], [label], [(1, "arithmetic")], sft, [{"contaminated": 2, "clean": 5}])
    assert row["clean"] == 5 and row["llm_contaminated"] == 2 and row["unique"] == 8
    (row,) = funnel([filtered], [label], [(1, "arithmetic")], sft, [])
    assert row["clean"] == 7 and "llm_contaminated" not in row


# ---------------------------------------------------------------- majority labels


def exact(a, b):
    from snakeskills.judging.judge import exact_match

    return exact_match(a, b)


def test_majority_groups_equivalent_answers():
    assert majority(["1/2", "0.5", "\\frac{1}{2}", "3", None], exact) == ("1/2", 0.6, "labelled")
    assert majority(["4", "5", "4", "5"], exact) == (None, 0.5, "tie")
    assert majority([None, None], exact) == (None, 0.0, "no_answer")
    assert majority(["7", "7.0", "07"], exact)[1] == 1.0


def solver_rows(answers_per_seed: list[dict[str, str]]) -> list[list[dict]]:
    return [
        [
            {"id": problem_id, "problem": problem_id, "generation": f"\\boxed{{{answer}}}", "random_seed": seed}
            for problem_id, answer in answers.items()
        ]
        for seed, answers in enumerate(answers_per_seed)
    ]


def test_labels_need_the_agreement_share_and_use_math_verify_classes():
    problems = [{"id": problem, "problem": problem} for problem in ("1/4+1/4", "2+2", "3+3", "9+9")]
    seeds = solver_rows(
        [
            {"1/4+1/4": "0.5", "2+2": "4", "3+3": "6", "9+9": "18"},
            {"1/4+1/4": "\\frac{1}{2}", "2+2": "4", "3+3": "7", "9+9": "17"},
            {"1/4+1/4": "\\dfrac{2}{4}", "2+2": "5", "3+3": "8", "9+9": "19"},
            {"1/4+1/4": "1/3", "2+2": "4", "3+3": "6", "9+9": "16"},
        ]
    )
    labelled, judged, counts = label_problems(
        problems,
        seeds,
        judge=judge_section(),
        min_agreement=0.7,
        num_workers=1,
        exact_answer=lambda problem: {"2+2": "4", "1/4+1/4": "1/2"}.get(problem),
    )
    assert [(row["id"], row["expected_answer"], row["agreement"]) for row in labelled] == [
        ("1/4+1/4", "0.5", 0.75),
        ("2+2", "4", 0.75),
    ]
    assert counts == {
        "problems": 4,
        "labelled": 2,
        "low_agreement": 1,
        "tie": 1,
        "no_answer": 0,
        "label_checked": 2,
        "label_accuracy": 1.0,
    }
    assert [row["label_correct"] for row in labelled] == [True, True]
    assert len(judged) == 4 and [len(rows) for rows in judged] == [2, 2, 2, 2]
    verdicts = [[row["symbolic_correct"] for row in rows] for rows in judged]
    assert verdicts == [[True, True], [True, True], [True, False], [False, True]]


def test_a_wrong_majority_is_counted_against_label_accuracy():
    problems = [{"id": "a", "problem": "20+22"}, {"id": "b", "problem": "a word problem"}]
    seeds = solver_rows([{"a": "41", "b": "3"}, {"a": "41", "b": "3"}, {"a": "42", "b": "3"}])
    labelled, _, counts = label_problems(
        problems,
        seeds,
        judge=judge_section("exact"),
        min_agreement=0.5,
        num_workers=1,
        exact_answer=arithmetic_answer,
    )
    assert [(row["expected_answer"], row["label_correct"]) for row in labelled] == [("41", False), ("3", None)]
    assert counts["label_checked"] == 1 and counts["label_accuracy"] == 0.0, "only problems it can check count"


def test_every_seed_must_answer_every_problem():
    problems = [{"id": "a", "problem": "1+1"}, {"id": "b", "problem": "2+2"}]
    seeds = solver_rows([{"a": "2", "b": "4"}, {"a": "2"}])
    with pytest.raises(SnakeskillsError, match="lack a sample"):
        label_problems(problems, seeds, judge=judge_section(), min_agreement=0.5, num_workers=1)
