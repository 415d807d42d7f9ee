"""How a judged answer was found: the route of each judged row's ``predicted_answer`` (its ``extraction_route``
field), the one table of routes, how many verdicts each route gave (metrics.json's
``"<benchmark>/extraction_routes"``, a round's stats.json), and the warnings when too many correct verdicts rest on
a fallback.

A fallback reads something other than its method's named format: ``judge.regex``'s last match in a text without
``\\boxed{}`` (``boxed``), or what ``multichoice`` reads beyond ``\\boxed{}`` and ``Answer: X``. It credits any
text ending on the right answer, wrong statements included ("221 is larger than 427" answers 427). Code answers have
no fallback: their tests decide.

A row without ``extraction_route`` (older results) counts as ``unknown``, never as a fallback."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

# the judged row's field
EXTRACTION_ROUTE = "extraction_route"
# metrics.json's key of a benchmark's route counts: "<benchmark>/extraction_routes"
ROUTES_METRIC = "extraction_routes"
NO_ANSWER = "none"
OWN_FUNCTION = "own function"
# a row without a route (older results, or another tool)
UNKNOWN = "unknown"

# the fixes of the fallbacks; {regex} and {extraction} stand for the config keys of the benchmark's judge settings
_INSTEAD_OF_REGEX = (
    "ask for \\boxed{{}} in the prompt and drop {regex}, or ask for a final answer line and read only it: "
    "{extraction} regex with a {regex} anchored to that line (e.g. 'answer is (-?\\d+)\\.?\\s*$')"
)
_INSTEAD_OF_MULTICHOICE = (
    "ask for an 'Answer: X' line in the prompt and judge with {extraction} multichoice-strict, which reads only "
    "\\boxed{{}} and that line"
)


@dataclass(frozen=True)
class Route:
    """One way an answer is found: what it reads, the ``judge.extraction`` methods that take it, and whether it is a
    fallback (then the judge setting that turns it on, ``regex`` or ``extraction``, and what to do instead, with
    ``{regex}`` and ``{extraction}`` for their config keys)."""

    meaning: str
    methods: str
    fallback: bool = False
    setting: str | None = None
    instead: str | None = None


def _multichoice_fallback(meaning: str) -> Route:
    return Route(meaning, "multichoice", True, "extraction", _INSTEAD_OF_MULTICHOICE)


# every route the judge writes, in the order summaries list them
ROUTES: dict[str, Route] = {
    "boxed": Route("the last \\boxed{} or \\fbox{}", "boxed, multichoice, multichoice-strict"),
    "regex": Route("judge.regex's last match, as the method's own format", "regex; multichoice without a \\boxed{}"),
    "regex fallback": Route(
        "judge.regex's last match in a text without \\boxed{}", "boxed", True, "regex", _INSTEAD_OF_REGEX
    ),
    "answer line": Route("the last 'Answer: X' line", "multichoice, multichoice-strict"),
    "answer phrase": _multichoice_fallback("the last 'the answer is X' phrase"),
    "letter is correct": _multichoice_fallback("the last 'X is correct'"),
    "bold letter": _multichoice_fallback("the last bold letter, **X**"),
    "letter line": _multichoice_fallback("a last line that is only a letter"),
    "option line": _multichoice_fallback("the one line that opens with an option, 'B. Ag'"),
    "option value": _multichoice_fallback("the option whose text is the final value, '24 + 19 = 43'"),
    "python block": Route("the last fenced ```python block (one defining a function or class first)", "code"),
    "code block": Route("the last fenced code block, in a text without ```python blocks", "code"),
    "unfenced code": Route("the whole text, Python without fences (a base model's completion)", "code"),
    OWN_FUNCTION: Route("the answer of a user's module:function", "a user's own"),
    NO_ANSWER: Route("no answer: predicted_answer is null", "any"),
}


def is_fallback(route: str | None) -> bool:
    """Whether an answer found by ``route`` rests on a fallback (an unknown or missing route does not)."""
    entry = ROUTES.get(route) if route is not None else None
    return entry is not None and entry.fallback


def routes_summary(routes: Iterable[str | None], correct: Iterable[bool]) -> dict:
    """A benchmark's ``"<benchmark>/extraction_routes"`` in metrics.json, from each sample's route (``None``:
    unknown) and verdict (``symbolic_correct``) over all seeds: ``correct_by_fallback`` (percent of the correct
    verdicts whose route is a fallback), ``samples_by_fallback`` (percent of the samples), and per route, in
    ``ROUTES``' order (unknown ones after), how many samples took it and how many of them are correct."""
    samples, credited = Counter(), Counter()
    for route, verdict in zip(routes, correct, strict=True):
        route = UNKNOWN if route is None else route
        samples[route] += 1
        credited[route] += bool(verdict)
    order = [route for route in ROUTES if route in samples] + [route for route in samples if route not in ROUTES]
    return {
        "correct_by_fallback": _percent(sum(credited[r] for r in order if is_fallback(r)), sum(credited.values())),
        "samples_by_fallback": _percent(sum(samples[r] for r in order if is_fallback(r)), sum(samples.values())),
        "routes": {route: {"samples": samples[route], "correct": credited[route]} for route in order},
    }


def _percent(part: int, whole: int) -> float:
    return 100.0 * part / whole if whole else 0.0


def format_routes(summary: dict) -> str:
    """metrics.txt's lines of a ``routes_summary``: each route's share of the samples and of the correct verdicts
    (a fallback marked ``*``), then the share of the correct verdicts that rest on a fallback."""
    routes = summary["routes"]
    samples = sum(counts["samples"] for counts in routes.values())
    correct = sum(counts["correct"] for counts in routes.values())
    shares = ", ".join(
        f"{route}{'*' if is_fallback(route) else ''} {_percent(counts['samples'], samples):.1f}% "
        f"({_percent(counts['correct'], correct):.1f}%)"
        for route, counts in routes.items()
    )
    return (
        f"extraction routes, share of samples (of correct verdicts): {shares}\n"
        f"correct verdicts by a fallback (*): {summary['correct_by_fallback']:.2f}%\n"
    )


def credited_counts(routes: Iterable[str | None]) -> dict:
    """The counts a round's stats.json keeps of its credited examples (those judged correct that it trains on: SFT
    examples, DPO's chosen answers, KTO's desirable samples), given each one's route (``None``: unknown): ``credited``,
    ``fallback_credited`` (how many rest on a fallback route) and ``fallback_credited_by_route``; none where no route
    is known (older samples)."""
    routes = list(routes)
    if all(route is None for route in routes):
        return {}
    routes = [UNKNOWN if route is None else route for route in routes]
    by_route = Counter(route for route in routes if is_fallback(route))
    return {
        "credited": len(routes),
        "fallback_credited": sum(by_route.values()),
        "fallback_credited_by_route": {route: by_route[route] for route in ROUTES if route in by_route},
    }
