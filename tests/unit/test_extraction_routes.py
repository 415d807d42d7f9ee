"""How a judged answer was found (snakeskills.judging.extraction_routes): every route of the table has a text that
takes it and the judge writes no other, summarize counts the routes per benchmark (rows judged before routes were
recorded: unknown, never a crash), the training data counts the examples a fallback credited, and the warnings fire
when a fallback credits too many correct verdicts, on a task whose wrong statements end on the right number, and
fall silent when the prompt's format is read instead."""

from __future__ import annotations

import json

import pytest
from conftest import resolved_prompt, rule_judge

from snakeskills.io import write_jsonl
from snakeskills.judging.extraction_routes import ROUTES, credited_counts, format_routes, is_fallback, routes_summary
from snakeskills.judging.extractors import extract_answer
from snakeskills.judging.judge import judge_records
from snakeskills.results.run_warnings import WARNING, metrics_fallback_warnings, training_data_fallback_warnings
from snakeskills.results.summarize import summarize_benchmark, write_benchmark_summary
from snakeskills.training.kto_samples import select_kto_samples
from snakeskills.training.preference_pairs import select_pairs
from snakeskills.training.sft_data import select_sft_records

THRESHOLDS = {"max_fallback_share": 10}  # config/schema.yaml's default

LAST_NUMBER = r"(-?\d+)"  # the shipped SmolLM2 examples' judge.regex
# the shipped SmolLM2 examples' judge section (exact comparison: no math-verify workers)
BOXED = {
    "extraction": "boxed",
    "regex": LAST_NUMBER,
    "equivalence": "exact",
    "timeout_seconds": 5,
    "memory_limit_mb": 1,
}
MC_ROW = {"option_letters": "A, B, C, D", "A": "87", "B": "97", "C": "86", "D": "106", "expected_answer": "A"}

# (judge section, record fields, route): a text for every route of the table
ROUTE_EXAMPLES = [
    (BOXED, {"generation": "so \\boxed{4}", "expected_answer": "4"}, "boxed"),
    (BOXED, {"generation": "2 + 2 is 4", "expected_answer": "4"}, "regex fallback"),
    (BOXED, {"generation": "I do not know", "expected_answer": "4"}, "none"),
    ({**BOXED, "extraction": "regex", "regex": r"answer is (\d+)"}, {"generation": "The answer is 4"}, "regex"),
    ({"extraction": "multichoice", "regex": None}, {**MC_ROW, "generation": "\\boxed{A}"}, "boxed"),
    ({"extraction": "multichoice-strict", "regex": r"Choice (\w)"}, {**MC_ROW, "generation": "Choice A"}, "regex"),
    ({"extraction": "multichoice", "regex": None}, {**MC_ROW, "generation": "Answer: A"}, "answer line"),
    ({"extraction": "multichoice", "regex": None}, {**MC_ROW, "generation": "So the answer is A."}, "answer phrase"),
    ({"extraction": "multichoice", "regex": None}, {**MC_ROW, "generation": "A is correct."}, "letter is correct"),
    ({"extraction": "multichoice", "regex": None}, {**MC_ROW, "generation": "I pick **A** here."}, "bold letter"),
    ({"extraction": "multichoice", "regex": None}, {**MC_ROW, "generation": "Reasoning...\n(A)."}, "letter line"),
    ({"extraction": "multichoice", "regex": None}, {**MC_ROW, "generation": "A. 87"}, "option line"),
    ({"extraction": "multichoice", "regex": None}, {**MC_ROW, "generation": "53 + 34 = 87"}, "option value"),
    ({"extraction": "multichoice", "regex": None}, {**MC_ROW, "generation": "A. 6\nB. 8"}, "none"),
    (
        {**BOXED, "extraction": "my_routes:last_word"},
        {"generation": "it is four", "expected_answer": "four"},
        "own function",
    ),
]
CODE_EXAMPLES = [
    ("```python\ndef f():\n    return 1\n```", "python block"),
    ("```\ndef f():\n    return 1\n```", "code block"),
    ("def f():\n    return 1\n", "unfenced code"),
    ("I cannot write it.", "none"),
]


@pytest.fixture
def own_extraction(tmp_path, monkeypatch):
    (tmp_path / "my_routes.py").write_text("def last_word(text, regex):\n    return text.split()[-1]\n")
    monkeypatch.syspath_prepend(str(tmp_path))


def test_every_route_has_a_text_that_takes_it_and_the_judge_writes_no_other(own_extraction):
    from snakeskills.judging.code_execution import program_and_route

    taken = set()
    for judge, fields, route in ROUTE_EXAMPLES:
        (judged,) = judge_records([{"id": "q", "expected_answer": "A", **fields}], rule_judge(judge), num_workers=1)
        assert judged["extraction_route"] == route, (fields["generation"], judged["extraction_route"])
        assert (judged["predicted_answer"] is None) == (route == "none")
        # the answer is the one extract_answer gives (option value is judge_records' own last step)
        if route != "option value":
            answer = extract_answer(fields["generation"], method=judge["extraction"], regex=judge["regex"])
            assert judged["predicted_answer"] == answer
        taken.add(route)
    for text, route in CODE_EXAMPLES:
        assert program_and_route(text)[1] == route
        taken.add(route)
    assert taken == set(ROUTES)


def test_fallbacks_are_the_routes_beyond_the_methods_own_format():
    fallbacks = {route for route in ROUTES if is_fallback(route)}
    assert fallbacks == {
        "regex fallback",
        "answer phrase",
        "letter is correct",
        "bold letter",
        "letter line",
        "option line",
        "option value",
    }
    assert all(ROUTES[route].setting in ("regex", "extraction") and ROUTES[route].instead for route in fallbacks)
    assert not is_fallback("unknown") and not is_fallback(None) and not is_fallback("a route of another tool")


def test_code_answers_record_their_route():
    from snakeskills.judging.judge import judge_programs

    records = [
        {"id": "a", "generation": text, "tests": "assert f() == 1"} for text, _ in CODE_EXAMPLES[:2] + CODE_EXAMPLES[3:]
    ]
    judge = {"extraction": "code", "timeout_seconds": 10, "memory_limit_mb": 1024, "sandbox": "none"}
    judged = judge_programs(records, rule_judge(judge), num_workers=1)
    assert [row["extraction_route"] for row in judged] == ["python block", "code block", "none"]
    assert [row["symbolic_correct"] for row in judged] == [True, True, False]


# ---------------------------------------------------------------- a task whose wrong statements end on the right number

# "which is larger?": the expected answer is the larger number; the model's sentence names both, its claim first
COMPARISONS = [("221", "427"), ("318", "96"), ("55", "505"), ("74", "47")]


def comparison_rows(texts: list[str], seed: int = 0) -> list[dict]:
    """One judged-to-be row per comparison: the generation ``texts[i]`` formatted with (first, second, larger)."""
    rows = []
    for index, ((first, second), text) in enumerate(zip(COMPARISONS, texts, strict=True)):
        larger = max(first, second, key=int)
        rows.append(
            {
                "id": f"c{index}",
                "problem": f"Which is larger, {first} or {second}?",
                "expected_answer": larger,
                "generation": text.format(first=first, second=second, larger=larger),
                "finish_reason": "stop",
                "num_generated_tokens": 8,
                "random_seed": seed,
            }
        )
    return rows


# seed 0: boxed answers, two of them wrong; seed 1: sentences without a box, two claiming the smaller number larger
SEED_TEXTS = [
    ["\\boxed{{{first}}}", "\\boxed{{{larger}}}", "\\boxed{{{first}}}", "\\boxed{{{larger}}}"],
    [
        "{first} is larger than {second}",  # 221 is larger than 427: wrong, read as 427
        "{second} is larger than {first}",  # 96 is larger than 318: wrong, read as 318
        "{second} is larger than {first}",  # right, read as 55: incorrect
        "{first} is larger than {second}",  # right, read as 47: incorrect
    ],
]


def judged_seed_files(tmp_path, judge) -> list:
    paths = []
    for seed, texts in enumerate(SEED_TEXTS):
        paths.append(tmp_path / f"output-rs{seed}.jsonl")
        write_jsonl(paths[-1], judge_records(comparison_rows(texts, seed), rule_judge(judge), num_workers=1))
    return paths


def test_a_last_number_fallback_credits_wrong_statements_and_the_summary_counts_them(tmp_path):
    paths = judged_seed_files(tmp_path, BOXED)
    _, table = summary_of(tmp_path, paths)
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert list(metrics) == ["compare", "compare/extraction_routes"]
    assert metrics["compare/extraction_routes"] == {
        "correct_by_fallback": 50.0,  # 2 of the 4 correct verdicts: both wrong statements
        "samples_by_fallback": 50.0,
        "routes": {"boxed": {"samples": 4, "correct": 2}, "regex fallback": {"samples": 4, "correct": 2}},
    }
    # the NeMo-Skills modes are what they were without routes
    assert metrics["compare"] == summarize_benchmark("compare", paths)["compare"]
    shares = "extraction routes, share of samples (of correct verdicts): boxed 50.0% (50.0%), regex fallback* 50.0% "
    assert shares + "(50.0%)\ncorrect verdicts by a fallback (*): 50.00%\n" in table


def test_the_warning_names_the_route_key_share_and_fix_and_following_it_silences_it(tmp_path):
    summary = routes_summary(*_routes_and_verdicts(judged_seed_files(tmp_path / "last-number", BOXED)))
    (line,) = metrics_fallback_warnings("base", "compare", "test", summary, THRESHOLDS, own_judge={})
    assert line.startswith(
        f"{WARNING}base on compare (test): 50.0% of the correct verdicts (2 of 4) rest on a fallback extraction "
        f"(warnings.max_fallback_share {THRESHOLDS['max_fallback_share']}%): 2 by regex fallback (judge.regex's last "
        "match in a "
        "text without \\boxed{}, set by judge.regex). "
    )
    assert "ask for \\boxed{} in the prompt and drop judge.regex" in line and "judge.extraction regex" in line
    assert "docs/benchmarks.md" in line
    # a benchmark's own judge.regex is the key named
    (own,) = metrics_fallback_warnings("base", "compare", "test", summary, THRESHOLDS, own_judge={"regex": LAST_NUMBER})
    assert "set by benchmarks.compare.judge.regex" in own and "drop benchmarks.compare.judge.regex" in own
    # the threshold: over it warns, at it does not
    assert metrics_fallback_warnings("base", "compare", "test", summary, {"max_fallback_share": 50.0}, {}) == []
    assert metrics_fallback_warnings("base", "compare", "test", summary, {"max_fallback_share": 49.9}, {})
    assert metrics_fallback_warnings("base", "compare", "test", None, THRESHOLDS, {}) == [], "rows without routes"
    # the advice followed: no judge.regex (the sentences give no answer), or only an anchored final line read
    for name, judge in (
        ("boxed-only", {**BOXED, "regex": None}),
        ("anchored", {**BOXED, "extraction": "regex", "regex": r"answer is (-?\d+)\.?\s*$"}),
    ):
        routes, verdicts = _routes_and_verdicts(judged_seed_files(tmp_path / name, judge))
        assert not any(is_fallback(route) for route in routes), name
        assert (
            metrics_fallback_warnings("base", "compare", "test", routes_summary(routes, verdicts), THRESHOLDS, {}) == []
        )


def _routes_and_verdicts(paths) -> tuple[list, list]:
    rows = [json.loads(line) for path in paths for line in path.read_text().splitlines()]
    return [row["extraction_route"] for row in rows], [row["symbolic_correct"] for row in rows]


# ---------------------------------------------------------------- rows judged before routes were recorded


def test_rows_without_routes_are_unknown_and_files_without_any_get_no_route_counts(tmp_path):
    from snakeskills.results import summarize

    paths = judged_seed_files(tmp_path, BOXED)
    seeds = [[json.loads(line) for line in path.read_text().splitlines()] for path in paths]
    unrouted = [
        [{key: value for key, value in row.items() if key != "extraction_route"} for row in rows] for rows in seeds
    ]
    write_jsonl(paths[1], unrouted[1])  # seed 1 judged before routes were recorded, seed 0 after
    routes, table = summary_of(tmp_path, paths)
    assert routes["routes"] == {"boxed": {"samples": 4, "correct": 2}, "unknown": {"samples": 4, "correct": 2}}
    assert routes["correct_by_fallback"] == 0.0 and "unknown 50.0% (50.0%)" in table
    # one row without its route in a file whose first row has one: unknown, still read by polars
    write_jsonl(paths[0], [seeds[0][0], unrouted[0][1], *seeds[0][2:]])
    assert summarize._read_seed_fast(paths[0]) is not None
    assert summary_of(tmp_path, paths)[0]["routes"]["unknown"] == {"samples": 5, "correct": 3}
    # no route anywhere: no route counts
    write_jsonl(paths[0], unrouted[0])
    routes, table = summary_of(tmp_path, paths)
    assert routes is None and "extraction routes" not in table
    assert list(json.loads((tmp_path / "metrics.json").read_text())) == ["compare"]


def summary_of(tmp_path, paths) -> tuple[dict | None, str]:
    """(metrics.json's extraction routes, metrics.txt) of summarizing ``paths`` as benchmark compare."""
    table = write_benchmark_summary(
        "compare",
        paths,
        {},
        metrics_path=tmp_path / "metrics.json",
        table_path=tmp_path / "metrics.txt",
        problems_path=tmp_path / "problems.jsonl",
    )
    return json.loads((tmp_path / "metrics.json").read_text()).get("compare/extraction_routes"), table


def test_the_per_row_reader_reads_routes_as_the_fast_one(tmp_path, monkeypatch):
    from snakeskills.results import summarize

    paths = judged_seed_files(tmp_path, BOXED)
    fast = summarize._routes_entry("compare", summarize._load_seeds(paths)[1])
    monkeypatch.setattr(summarize, "_read_seed_fast", lambda path: None)
    assert summarize._routes_entry("compare", summarize._load_seeds(paths)[1]) == fast
    assert fast["compare/extraction_routes"]["correct_by_fallback"] == 50.0


def test_routes_summary_and_its_lines():
    summary = routes_summary(["none", "regex fallback", "boxed", None, "boxed"], [False, True, True, True, False])
    assert summary == {
        "correct_by_fallback": pytest.approx(100 / 3),
        "samples_by_fallback": 20.0,
        "routes": {
            "boxed": {"samples": 2, "correct": 1},
            "regex fallback": {"samples": 1, "correct": 1},
            "none": {"samples": 1, "correct": 0},
            "unknown": {"samples": 1, "correct": 1},
        },
    }
    assert format_routes(summary) == (
        "extraction routes, share of samples (of correct verdicts): boxed 40.0% (33.3%), regex fallback* 20.0% "
        "(33.3%), none 20.0% (0.0%), unknown 20.0% (33.3%)\ncorrect verdicts by a fallback (*): 33.33%\n"
    )
    assert routes_summary([], [])["correct_by_fallback"] == 0.0


# ---------------------------------------------------------------- the training data a fallback credited

PROMPT = resolved_prompt(user="{problem}")


def test_sft_dpo_and_kto_data_count_the_examples_a_fallback_credited(tmp_path):
    paths = judged_seed_files(tmp_path, BOXED)
    filters = {"correct_only": True, "score": "symbolic_correct", "max_generation_tokens": None, "dedup": True}
    _, sft = select_sft_records(paths, ["base"] * 2, [PROMPT] * 2, {**filters, "max_per_problem": None})
    assert (sft["kept"], sft["credited"], sft["fallback_credited"]) == (4, 4, 2)
    assert sft["fallback_credited_by_route"] == {"regex fallback": 2}
    # DPO pairs 221 or 427 (chosen: "221 is larger than 427", a wrong statement) and 74 or 47 (chosen: \boxed{74})
    pairs = {"max_per_problem": None, "score": "symbolic_correct", "include_truncated": True}
    records, dpo = select_pairs(paths, ["compare"] * 2, [PROMPT] * 2, pairs, {"min": 0.0, "max": 1.0})
    assert [record["chosen"][0]["content"] for record in records] == ["221 is larger than 427", "\\boxed{74}"]
    assert (dpo["credited"], dpo["fallback_credited"]) == (2, 1)
    samples = {"score": "symbolic_correct", "max_per_problem": None, "include_truncated": True}
    _, kto = select_kto_samples(paths, ["compare"] * 2, [PROMPT] * 2, samples, {"min": 0.0, "max": 1.0})
    assert (kto["desirable"], kto["credited"], kto["fallback_credited"]) == (4, 4, 2)
    # the rounds' warnings
    (line,) = training_data_fallback_warnings("dpo-round1", "dpo", dpo, THRESHOLDS)
    assert line.startswith(
        f"{WARNING}dpo-round1: 1 of 2 chosen answers (50.0%) were credited by a fallback extraction "
        f"(warnings.max_fallback_share {THRESHOLDS['max_fallback_share']}%): 1 by regex fallback ("
    )
    assert "set by judge.regex (or benchmarks.<name>.judge.regex)" in line and "the round learns them" in line
    assert "2 of 4 desirable samples" in training_data_fallback_warnings("kto-round1", "kto", kto, THRESHOLDS)[0]
    assert training_data_fallback_warnings("sft-round1", "sft", sft, {"max_fallback_share": 50}) == []
    assert training_data_fallback_warnings("sft-round1", "sft", {"kept": 3}, THRESHOLDS) == [], (
        "stats written before the counts"
    )


def test_credited_counts_of_rows_without_routes_are_none():
    assert credited_counts([None, None]) == {}
    assert credited_counts([]) == {}
    assert credited_counts(["boxed", None, "option line", "regex fallback", "option line"]) == {
        "credited": 5,
        "fallback_credited": 3,
        "fallback_credited_by_route": {"regex fallback": 1, "option line": 2},
    }
