"""Answer extraction and matching in snakeskills.judge."""

from __future__ import annotations

import pytest

from snakeskills.errors import SnakeskillsError
from snakeskills.judge import answers_match, extract_answer, extract_boxed, judge_record

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
    with pytest.raises(SnakeskillsError, match="unknown method 'box'"):
        extract_answer(r"\boxed{1}", method="box", regex=None)


# ---------------------------------------------------------------- answers_match


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
def test_answers_match_equivalent(predicted, expected):
    assert answers_match(predicted, expected) is True


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
def test_answers_match_different(predicted, expected):
    assert answers_match(predicted, expected) is False


def test_answers_match_none_is_never_correct():
    assert answers_match(None, "1") is False
    assert answers_match(None, "None") is False


def test_answers_match_non_string_expected():
    assert answers_match("85", 85) is True
    assert answers_match("0.25", 0.25) is True


# ---------------------------------------------------------------- judge_record


def test_judge_record_adds_fields_and_keeps_record():
    record = {"id": "t-1", "problem": "37+48", "expected_answer": "85", "generation": r"37+48=\boxed{85}"}
    judged = judge_record(record, method="boxed", regex=None)
    assert judged == {**record, "predicted_answer": "85", "symbolic_correct": True}
    assert "predicted_answer" not in record  # input left untouched


def test_judge_record_wrong_and_missing_answers():
    wrong = judge_record({"expected_answer": "85", "generation": r"\boxed{86}"}, method="boxed", regex=None)
    assert wrong["predicted_answer"] == "86"
    assert wrong["symbolic_correct"] is False
    missing = judge_record({"expected_answer": "85", "generation": "I give up"}, method="boxed", regex=None)
    assert missing["predicted_answer"] is None
    assert missing["symbolic_correct"] is False


def test_judge_record_with_regex_fallback_and_fraction():
    judged = judge_record(
        {"expected_answer": "1/2", "generation": "Final answer: 0.5"}, method="boxed", regex=r"Final answer: (\S+)"
    )
    assert judged["predicted_answer"] == "0.5"
    assert judged["symbolic_correct"] is True
