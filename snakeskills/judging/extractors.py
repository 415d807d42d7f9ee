"""Reading the predicted answer from a generation (``judge.extraction``): ``EXTRACTORS`` by name, or a user's own
``module:function`` (text, regex) -> the answer or ``None`` (``snakeskills.registry``), each with the route it was
found by (``extraction_routes.ROUTES``: boxed, the configured regex, a fallback, none).

Every extractor returns its answer with its route, and the multiple-choice readers (six ways a model names a letter)
sit beside the readers they fall back from, so a route's meaning is read in one place.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from snakeskills.judging.code_execution import program_and_route
from snakeskills.judging.extraction_routes import NO_ANSWER, OWN_FUNCTION
from snakeskills.registry import Row, choose

# judge.extraction's multiple-choice readers: an option letter, judged by letter equality
MULTICHOICE = ("multichoice", "multichoice-strict")

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


# "Answer: C", "**Answer:** (C)", "answer: c": the answer line multiple-choice prompts ask for
_ANSWER_LINE = re.compile(r"(?i)[*_]{0,2}answer[*_]{0,2}\s*:[\s*_]{0,2}\s*\(?([A-Z])(?![a-zA-Z0-9])")
# a capital letter standing alone: "C", "(C)", "C. 42", "\text{C}"
_LONE_LETTER = re.compile(r"(?<![A-Za-z0-9])[A-Z](?![A-Za-z0-9])")
# "The answer is (D)", "the correct answer is **D**", "The best option is D.", "my final choice would be: (d)":
# a capital letter, or any letter in brackets or bold ("the answer is a" reads no letter: it is an article)
_ANSWER_PHRASE = re.compile(
    r"(?i:\b(?:answer|option|choice)\s+(?:is|would\s+be|should\s+be|will\s+be)\s*:?)\s*"
    r"(?:[(\[]\s*([A-Za-z])\s*[)\]]|\*\*\s*\(?([A-Za-z])\)?[.)]?\s*\*\*|\**([A-Z])\**(?![A-Za-z0-9]))"
)
# "A is correct", "B is the correct answer", "(C) is right"
_LETTER_IS_CORRECT = re.compile(r"(?<![A-Za-z0-9])\(?([A-Z])\)?\s+is\s+(?:the\s+)?(?i:correct|right)\b")
# "**D**", "**(D)**", "**D.**": a bold letter alone
_BOLD_LETTER = re.compile(r"\*\*\s*\(?([A-Z])\)?[.):]?\s*\*\*")
# a last line that is only a letter: "D", "(D)", "D.", "**D**"
_LETTER_LINE = re.compile(r"^[\s*_(\[]*([A-Z])[\s*_)\].:]*$")
# a line that opens with an option: "B. Ag", "(B) Ag", "B) Ag"
_OPTION_LINE = re.compile(r"^[\s*_]*\(?([A-Z])[.)]\s+\S")


def _last_regex_match(text: str, regex: str | None) -> str | None:
    if not regex:
        return None
    matches = list(re.finditer(regex, text))
    if not matches:
        return None
    last = matches[-1]
    return last.group(1) if last.groups() else last.group(0)


def _letter_in(answer: str | None) -> str | None:
    """The last capital letter standing alone in a boxed or regex answer ("\\text{B}", "\\mathrm{B}": B)."""
    if answer is None:
        return None
    letters = _LONE_LETTER.findall(re.sub(r"\\[a-zA-Z]+", " ", answer))
    return letters[-1] if letters else None


def _last_group(pattern: re.Pattern, text: str) -> str | None:
    matches = list(pattern.finditer(text))
    if not matches:
        return None
    return next(group for group in matches[-1].groups() if group).upper()


def _letter_line(text: str) -> str | None:
    lines = [line for line in text.splitlines() if line.strip()]
    match = _LETTER_LINE.match(lines[-1]) if lines else None
    return match.group(1) if match else None


def _one_option_line(text: str) -> str | None:
    """The letter of the one line that opens with an option ("B. Ag", "A. Mars is a planet ..."), when no other
    line opens with one (a response that lists the options answers none)."""
    options = [match.group(1) for line in text.splitlines() if (match := _OPTION_LINE.match(line))]
    return options[0] if len(options) == 1 else None


def _normalized_value(value: str) -> str:
    return re.sub(r"\s+", " ", value.strip().strip("$").strip().rstrip(".").strip()).lower()


def option_named_by_value(row: dict, text: str, regex: str | None) -> str | None:
    """The option whose text is the response's final value, for a prepared multiple-choice row (its
    ``option_letters`` and one field per letter): the last ``\\boxed{}``, else ``regex``'s last match, else what
    follows the last "=" or ":" on the last line ("24 + 19 = 43", "The answer is: 98."). Exactly one option must
    match it (case, spacing and a final period aside)."""
    letters = [letter.strip() for letter in str(row.get("option_letters") or "").split(",") if letter.strip()]
    if not letters:
        return None
    value = extract_boxed(text)
    if value is None:
        value = _last_regex_match(text, regex)
    if value is None:
        lines = [line for line in text.splitlines() if line.strip()]
        value = re.split(r"[=:]", lines[-1])[-1] if lines and re.search(r"[=:]", lines[-1]) else None
    if value is None or not _normalized_value(value):
        return None
    named = [letter for letter in letters if _normalized_value(str(row.get(letter, ""))) == _normalized_value(value)]
    return named[0] if len(named) == 1 else None


def extract_choice(text: str, *, regex: str | None) -> str | None:
    """The option letter a multiple-choice generation answers (``multichoice``), upper case; ``None`` when it
    names none. The first of these that gives a letter, in order:

    1. the last capital letter standing alone in the last ``\\boxed{}`` (without one: in ``regex``'s last match);
    2. the last ``Answer: X`` line (any case, markdown emphasis allowed);
    3. the last "answer/option/choice is X" ("The answer is (D)"), else the last "X is correct" ("B is the correct
       answer");
    4. the last bold letter: "**D**", "**(D)**";
    5. a last line that is only a letter: "D", "(D)", "D.";
    6. the one line that opens with an option, when no other line does: "B. Ag", "15 + 21 = 36\\n\\nA. 36".

    Failing all, ``judge_records`` takes the option whose text is the final value (``option_named_by_value``). 1 and 2
    are ``multichoice-strict`` (``extract_choice_strict``, NeMo-Skills' reading); the rest are fallback routes
    (``choice_and_route``) for models that ignore the asked format."""
    return choice_and_route(text, regex)[0]


def extract_choice_strict(text: str, *, regex: str | None) -> str | None:
    """``multichoice-strict``: the letter of the last ``\\boxed{}`` (or ``regex`` match), else of the last
    ``Answer: X`` line."""
    return strict_choice_and_route(text, regex)[0]


def strict_choice_and_route(text: str, regex: str | None) -> tuple[str | None, str]:
    """``extract_choice_strict``'s letter and its route: boxed, regex (no ``\\boxed{}``), answer line or none."""
    boxed = extract_boxed(text)
    letter, route = (
        (_letter_in(boxed), "boxed") if boxed is not None else (_letter_in(_last_regex_match(text, regex)), "regex")
    )
    if letter is not None:
        return letter, route
    lines = _ANSWER_LINE.findall(text)
    return (lines[-1].upper(), "answer line") if lines else (None, NO_ANSWER)


# what multichoice reads after the strict reader, in order, by route: the letter or None
_CHOICE_FALLBACKS: dict[str, Callable[[str], str | None]] = {
    "answer phrase": lambda text: _last_group(_ANSWER_PHRASE, text),
    "letter is correct": lambda text: _last_group(_LETTER_IS_CORRECT, text),
    "bold letter": lambda text: _last_group(_BOLD_LETTER, text),
    "letter line": _letter_line,
    "option line": _one_option_line,
}


def choice_and_route(text: str, regex: str | None) -> tuple[str | None, str]:
    """``extract_choice``'s letter and its route: the strict reader's, else the first of ``_CHOICE_FALLBACKS`` that
    gives a letter, else none."""
    letter, route = strict_choice_and_route(text, regex)
    if letter is not None:
        return letter, route
    for route, read in _CHOICE_FALLBACKS.items():
        letter = read(text)
        if letter:
            return letter, route
    return None, NO_ANSWER


def extract_boxed_or_regex(text: str, regex: str | None) -> str | None:
    """``boxed``: the last ``\\boxed{}``, else the last match of ``regex`` (its first group if it has one)."""
    return boxed_or_regex_and_route(text, regex)[0]


def boxed_or_regex_and_route(text: str, regex: str | None) -> tuple[str | None, str]:
    """``extract_boxed_or_regex``'s answer and its route: boxed, regex fallback or none."""
    answer = extract_boxed(text)
    if answer is not None:
        return answer, "boxed"
    answer = _last_regex_match(text, regex)
    return (answer, "regex fallback") if answer is not None else (None, NO_ANSWER)


def _regex_and_route(text: str, regex: str | None) -> tuple[str | None, str]:
    answer = _last_regex_match(text, regex)
    return (answer, "regex") if answer is not None else (None, NO_ANSWER)


# judge.extraction: how an answer is read from a text, by name, with the route it was found by
# (extraction_routes.ROUTES)
ROUTED_EXTRACTORS: dict[str, Callable[[str, str | None], tuple[str | None, str]]] = {
    "boxed": boxed_or_regex_and_route,
    "regex": _regex_and_route,
    "multichoice": choice_and_route,
    "multichoice-strict": strict_choice_and_route,
    "code": lambda text, regex: program_and_route(text),
}


def _answer_of(read: Callable[[str, str | None], tuple[str | None, str]]) -> Callable[[str, str | None], str | None]:
    return lambda text, regex: read(text, regex)[0]


# judge.extraction: the answer alone, by name; a user's own is ``module:function`` (text, regex) -> the answer
EXTRACTORS: dict[str, Callable[[str, str | None], str | None]] = {
    name: _answer_of(read) for name, read in ROUTED_EXTRACTORS.items()
}


def extract_answer(text: str, *, method: str, regex: str | None, row: Row = None) -> str | None:
    """The predicted answer of one generation, by ``EXTRACTORS[method]`` or a user's ``module:function`` (what it
    raises stops the job naming the key and ``row``: ``registry.Chosen.call``).

    ``boxed`` takes the last ``\\boxed{}``, then falls back to ``regex`` (its last match, first group if it has
    one) when given; ``regex`` uses only the regex; ``multichoice`` an option letter (``extract_choice``); ``code``
    a program (``code_execution.extract_program``). An open answer (every method but those two) is stripped, and
    an empty one is no answer.
    """
    return answer_reader(method)(row, text, regex)[0]


def answer_reader(method: str) -> Callable[[Row, str, str | None], tuple[str | None, str]]:
    """How ``judge.extraction`` ``method`` reads a generation: (row, text, regex) -> (answer, route), the answer
    cleaned as ``extract_answer`` says and the route from ``ROUTED_EXTRACTORS`` (a user's function: own function);
    no answer is route none. A user's function is imported here, once."""
    chosen = choose(EXTRACTORS, method, "judge.extraction")

    def read(row: Row, text: str, regex: str | None) -> tuple[str | None, str]:
        if chosen.own:
            answer, route = chosen.call(row, text, regex), OWN_FUNCTION
        else:
            answer, route = ROUTED_EXTRACTORS[method](text, regex)
        answer = _cleaned(method, answer)
        return (answer, route) if answer is not None else (None, NO_ANSWER)

    return read


def _cleaned(method: str, answer) -> str | None:
    if method in (*MULTICHOICE, "code") or answer is None:
        return answer
    answer = str(answer).strip()
    return answer if answer else None
