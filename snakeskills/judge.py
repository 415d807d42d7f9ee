"""Rule-based judging: extract the predicted answer, compare it with the expected one.

Adds NeMo-Skills' fields to each generated record: ``predicted_answer`` (``None`` when nothing
could be extracted) and ``symbolic_correct``.
"""

from __future__ import annotations

import re
from fractions import Fraction

from snakeskills.errors import SnakeskillsError

BOXED_MARKERS = ("\\boxed", "\\fbox")


def extract_boxed(text: str) -> str | None:
    """Content of the last ``\\boxed{...}`` (braces matched, so nesting works); ``None`` if absent or unclosed."""
    start, marker = max((text.rfind(marker), marker) for marker in BOXED_MARKERS)
    if start < 0:
        return None
    rest = text[start + len(marker) :]
    if rest[:1].isspace():  # "\boxed 5": the answer runs to the next whitespace or "$"
        match = re.match(r"\s+([^\s$]+)", rest)
        return match.group(1) if match else None
    if not rest.startswith("{"):
        return None
    depth = 0
    for position, character in enumerate(rest):
        if character == "{":
            depth += 1
        elif character == "}":
            depth -= 1
            if depth == 0:
                return rest[1:position]
    return None


def extract_answer(text: str, *, method: str, regex: str | None) -> str | None:
    """The predicted answer of one generation.

    ``method: boxed`` takes the last ``\\boxed{}``, then falls back to ``regex`` (its last match,
    first group if it has one) when given; ``method: regex`` uses only the regex.
    """
    answer = None
    if method == "boxed":
        answer = extract_boxed(text)
    elif method != "regex":
        raise SnakeskillsError(f"judge.extraction: unknown method {method!r}; known: boxed, regex")
    if answer is None and regex:
        matches = list(re.finditer(regex, text))
        if matches:
            last = matches[-1]
            answer = last.group(1) if last.groups() else last.group(0)
    if answer is None:
        return None
    answer = answer.strip()
    return answer if answer else None


_NUMBER = re.compile(r"^[+-]?(\d+(\.\d*)?|\.\d+)$")
_FRACTION = re.compile(r"^([+-]?\d+)\s*/\s*([+-]?\d+)$")


def normalize_answer(answer: str) -> str:
    text = answer.strip().strip("$").strip()
    text = re.sub(r"\\text\{\s*([^}]*)\}", r"\1", text)
    text = text.replace("\\!", "").replace("\\,", "").replace("\\ ", "")
    text = re.sub(r"(?<=\d),(?=\d{3}\b)", "", text)  # 1,000 -> 1000
    text = re.sub(r"\\[dt]?frac\{([^{}]+)\}\{([^{}]+)\}", r"\1/\2", text)
    return text.rstrip(".").strip()


def as_number(text: str) -> Fraction | None:
    if _NUMBER.match(text):
        return Fraction(text)
    fraction = _FRACTION.match(text)
    if fraction and int(fraction.group(2)) != 0:
        return Fraction(int(fraction.group(1)), int(fraction.group(2)))
    return None


def answers_match(predicted: str | None, expected: str) -> bool:
    """Exact match after light normalisation, or equal as exact rational numbers (``0.5`` == ``1/2``)."""
    if predicted is None:
        return False
    predicted_text, expected_text = normalize_answer(predicted), normalize_answer(str(expected))
    if predicted_text == expected_text:
        return True
    predicted_number, expected_number = as_number(predicted_text), as_number(expected_text)
    return predicted_number is not None and predicted_number == expected_number


def judge_record(record: dict, *, method: str, regex: str | None) -> dict:
    """The record with ``predicted_answer`` and ``symbolic_correct`` added."""
    predicted = extract_answer(record["generation"], method=method, regex=regex)
    return {
        **record,
        "predicted_answer": predicted,
        "symbolic_correct": answers_match(predicted, record["expected_answer"]),
    }
