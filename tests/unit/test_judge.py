"""Answer extraction, exact matching, math-verify equivalence with a hard time limit, LLM-judge parsing."""

from __future__ import annotations

import time

import pytest
from conftest import rule_judge

from snakeskills.errors import SnakeskillsError
from snakeskills.judging.extractors import extract_answer, extract_boxed
from snakeskills.judging.judge import exact_match, judge_records, quick_verdict

# ---------------------------------------------------------------- extract_boxed


def test_extract_boxed_nested_braces():
    assert extract_boxed(r"so the answer is \boxed{\frac{1}{2}}.") == r"\frac{1}{2}"
    assert extract_boxed(r"\boxed{\{1, 2\} \cup {3}}") == r"\{1, 2\} \cup {3}"


def test_extract_boxed_takes_the_last_box():
    assert extract_boxed(r"first \boxed{1}, then \boxed{2}, finally \boxed{3}") == "3"


def test_extract_boxed_fbox_and_boxed_whichever_is_last():
    assert extract_boxed(r"\fbox{3} and \boxed{4}") == "4"
    assert extract_boxed(r"\boxed{4} and \fbox{3}") == "3"


def test_extract_boxed_unclosed_or_absent():
    assert extract_boxed(r"\boxed{1") is None
    assert extract_boxed(r"\boxed{\frac{1}{2}") is None
    # the last box decides, even if an earlier one was complete
    assert extract_boxed(r"\boxed{1} and \boxed{2") is None
    assert extract_boxed("no box here: 42") is None
    assert extract_boxed(r"\boxed") is None
    assert extract_boxed(r"\boxed[5]") is None


def test_extract_boxed_space_form():
    assert extract_boxed(r"the answer is $\boxed 5$") == "5"
    assert extract_boxed(r"\boxed 17 apples") == "17"


def test_extract_boxed_empty_box():
    assert extract_boxed(r"\boxed{}") == ""
    assert extract_answer(r"\boxed{}", method="boxed", regex=None) is None
    assert extract_answer(r"\boxed{   }", method="boxed", regex=None) is None


# ---------------------------------------------------------------- extract_answer


def test_extract_answer_boxed_strips_whitespace():
    assert extract_answer(r"\boxed{ 42 }", method="boxed", regex=None) == "42"


def test_extract_answer_boxed_falls_back_to_regex():
    regex = r"[Aa]nswer:\s*(-?\d+)"
    assert extract_answer("Answer: 12", method="boxed", regex=regex) == "12"
    # the last match wins
    assert extract_answer("answer: 1 ... answer: 2", method="boxed", regex=regex) == "2"
    # a box takes precedence over the regex
    assert extract_answer(r"answer: 1 \boxed{9}", method="boxed", regex=regex) == "9"
    # an unclosed box counts as no box
    assert extract_answer(r"answer: 3 \boxed{9", method="boxed", regex=regex) == "3"
    # no box and no regex -> None
    assert extract_answer("Answer: 12", method="boxed", regex=None) is None


def test_extract_answer_regex_method():
    # first group of the last match
    assert extract_answer("x=1; x=2; x=3", method="regex", regex=r"x=(\d)") == "3"
    # boxes are ignored with method regex
    assert extract_answer(r"\boxed{7} answer: 8", method="regex", regex=r"answer: (\d+)") == "8"
    # no group -> the whole match
    assert extract_answer("values 10 and 20", method="regex", regex=r"\d+") == "20"
    assert extract_answer("nothing numeric", method="regex", regex=r"\d+") is None


def test_extract_answer_unknown_method():
    with pytest.raises(
        SnakeskillsError,
        match="judge.extraction: unknown 'box'; known: boxed, regex, multichoice, multichoice-strict, code",
    ):
        extract_answer(r"\boxed{1}", method="box", regex=None)


# ---------------------------------------------------------------- exact_match


@pytest.mark.parametrize(
    ("predicted", "expected"),
    [
        ("0.5", "1/2"),
        (r"\frac{1}{2}", "0.5"),
        (r"\dfrac{3}{4}", "0.75"),
        ("016", "16"),
        ("1,000", "1000"),
        ("12,345,678", "12345678"),
        (r"\text{5}", "5"),
        (r"\text{ 5 apples}", "5 apples"),
        ("$5$", "5"),
        ("-3", "-3.0"),
        ("85.", "85"),
        ("  85 ", "85"),
        ("x^2+1", "x^2+1"),
    ],
)
def test_exact_match_equivalent(predicted, expected):
    assert exact_match(predicted, expected) is True


@pytest.mark.parametrize(
    ("predicted", "expected"),
    [
        ("85", "86"),
        ("0.5", "1/3"),
        ("-3", "3"),
        ("1,0000", "10000"),  # not a thousands separator
        ("x", "X"),
        ("", "0"),
    ],
)
def test_exact_match_different(predicted, expected):
    assert exact_match(predicted, expected) is False


def test_exact_match_none_is_never_correct():
    assert exact_match(None, "1") is False
    assert exact_match(None, "None") is False


def test_exact_match_non_string_expected():
    assert exact_match("85", 85) is True
    assert exact_match("0.25", 0.25) is True


# ---------------------------------------------------------------- judge_records (math-verify, time limit)

JUDGE = {
    "extraction": "boxed",
    "regex": None,
    "equivalence": "math-verify",
    "timeout_seconds": 5,
    "memory_limit_mb": 4096,
}


def judge_answers(pairs, **overrides):
    """Judge (expected, generation) pairs with the real worker pool; returns the judged records."""
    records = [
        {"id": f"r{index}", "expected_answer": expected, "generation": generation}
        for index, (expected, generation) in enumerate(pairs)
    ]
    return judge_records(records, rule_judge(JUDGE, **overrides), num_workers=2)


# (expected, predicted inside \boxed{}, verdict): NeMo-Skills' order of checks, math-verify gold first
TRICKY_ANSWERS = [
    ("1/2", "0.5", True),  # fraction vs decimal
    ("0.75", r"\dfrac{3}{4}", True),
    (r"\frac{1}{2}", "1/2", True),  # \frac vs /
    (r"\frac{1}{3}", "0.33", False),  # a rounded decimal is not the fraction
    (r"\frac{\sqrt{2}}{2}", r"\frac{1}{\sqrt{2}}", True),  # nested braces, rationalised
    ("(1,2]", "(1,2]", True),  # intervals
    ("(1,2]", "[1,2)", False),
    (r"(-\infty, 3)", r"(-\infty,3)", True),
    (r"\{1,2\}", r"\{2,1\}", True),  # sets: order does not matter
    ("2, 3", "3, 2", True),
    (r"\{1,2\}", r"\{1,2,3\}", False),
    ("16", "016", True),  # AIME-style leading zero
    ("016", "16", True),
    ("5", r"5 \text{ cm}", True),  # units
    ("5", r"5\,\mathrm{cm}", True),
    ("10", r"10\%", True),  # percent
    ("1000", "1,000", True),
    ("3", "3.0", True),
    ("x^2+1", "1+x^2", True),  # expressions
    ("x^2+1", "x^2-1", False),
    ("85", "86", False),
    ("-3", "3", False),
    (r"\text{(B)}", r"\text{(B)}", True),
]


def test_tricky_answers_with_math_verify():
    judged = judge_answers([(expected, rf"so \boxed{{{predicted}}}.") for expected, predicted, _ in TRICKY_ANSWERS])
    mistakes = [
        (expected, predicted, verdict)
        for (expected, predicted, verdict), row in zip(TRICKY_ANSWERS, judged, strict=True)
        if row["symbolic_correct"] is not verdict
    ]
    assert mistakes == []
    assert [row["predicted_answer"] for row in judged] == [predicted for _, predicted, _ in TRICKY_ANSWERS]


def test_empty_boxed_and_no_answer_are_no_answer_not_errors():
    judged = judge_answers([("5", r"\boxed{}"), ("5", r"\boxed{ }"), ("5", "I do not know"), ("5", r"\boxed{5")])
    assert [row["predicted_answer"] for row in judged] == [None, None, None, None]
    assert [row["symbolic_correct"] for row in judged] == [False] * 4


def test_pathological_expression_is_bounded_in_time():
    """10^10^10^10 never finishes in sympy; the worker is killed at the limit and the sample is incorrect."""
    started = time.monotonic()
    judged = judge_answers(
        [("5", r"\boxed{10^{10^{10^{10}}}}"), ("1/2", r"\boxed{0.5}"), ("7", r"\boxed{7}")], timeout_seconds=2
    )
    elapsed = time.monotonic() - started
    assert [row["symbolic_correct"] for row in judged] == [False, True, True]
    assert elapsed < 15, f"judging took {elapsed:.1f}s"


def test_quick_verdict_skips_sympy_only_when_certain():
    assert quick_verdict("85", None) is False
    assert quick_verdict("85", " 85 ") is True
    assert quick_verdict("16", "016") is True
    assert quick_verdict("85", "86") is False
    assert quick_verdict("1/2", "0.5") is None  # needs math-verify


def test_exact_equivalence_needs_no_workers():
    judged = judge_answers([("1/2", r"\boxed{0.5}"), ("(1,2]", r"\boxed{(1, 2]}")], equivalence="exact")
    assert [row["symbolic_correct"] for row in judged] == [True, False]


def test_judge_records_keeps_records_and_uses_regex_fallback():
    record = {"id": "t-1", "problem": "37+48", "expected_answer": "85", "generation": "Final answer: 85"}
    judged = judge_records([record], rule_judge(JUDGE, regex=r"Final answer: (\S+)"), num_workers=1)
    assert judged == [
        {**record, "predicted_answer": "85", "symbolic_correct": True, "extraction_route": "regex fallback"}
    ]
    assert "predicted_answer" not in record  # input left untouched


def test_unknown_equivalence_names_the_key():
    with pytest.raises(SnakeskillsError, match="judge.equivalence"):
        judge_answers([("1", r"\boxed{0.5}")], equivalence="sympy")


# ---------------------------------------------------------------- a user's own extraction and equivalence

USER_JUDGE = '''
import re


def last_number(text, regex):
    """The last number in the text, however it is written."""
    numbers = re.findall(r"-?\\d+", text)
    return numbers[-1] if numbers else None


def same_parity(expected, predicted):
    return int(expected) % 2 == int(predicted) % 2
'''


@pytest.fixture
def user_judge(tmp_path, monkeypatch):
    """A user's module of judge functions, importable as `my_judge` (on sys.path, as a working directory is)."""
    (tmp_path / "my_judge.py").write_text(USER_JUDGE)
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


def test_a_users_extraction_and_equivalence_are_chosen_by_module_and_function(user_judge):
    judged = judge_answers(
        [("7", "so 3 + 4 gives 7."), ("8", "no digits here"), ("8", "it is 10")],
        extraction="my_judge:last_number",
        equivalence="my_judge:same_parity",
    )
    assert [record["predicted_answer"] for record in judged] == ["7", None, "10"]
    assert [record["symbolic_correct"] for record in judged] == [True, False, True]
    # a built-in equivalence after a user's extraction
    judged = judge_answers([("7", "the answer: 7"), ("7", "the answer: 8")], extraction="my_judge:last_number")
    assert [record["symbolic_correct"] for record in judged] == [True, False]


def test_a_users_judge_function_that_does_not_import_stops_the_plan_naming_the_key(user_judge):
    import yaml
    from conftest import DEFAULT_CONFIG, checked_config

    def plan(**judge):
        config = yaml.safe_load(DEFAULT_CONFIG.read_text())
        config["judge"] = judge.pop("judge", {})
        config["benchmarks"]["arithmetic"]["judge"] = judge
        return checked_config(config)

    assert plan(judge={"equivalence": "my_judge:same_parity"})["judge"]["equivalence"] == "my_judge:same_parity"
    with pytest.raises(SnakeskillsError, match="config key judge.extraction: 'my_judge:lastnumber'.*no function"):
        plan(judge={"extraction": "my_judge:lastnumber"})
    with pytest.raises(SnakeskillsError, match="config key benchmarks.arithmetic.judge.equivalence: 'nowhere:same'"):
        plan(equivalence="nowhere:same")
    with pytest.raises(
        SnakeskillsError,
        match="'boxd' is not one of boxed, regex, multichoice, multichoice-strict, code, or your own",
    ):
        plan(judge={"extraction": "boxd"})
    with pytest.raises(SnakeskillsError, match="unknown 'sympy'; known: math-verify, exact, or your own"):
        judge_answers([("1", r"\boxed{1}")], equivalence="sympy")
