"""Rule-based judging: extract the predicted answer, compare it with the expected one.

Adds NeMo-Skills' ``predicted_answer`` (``None`` when nothing was extracted) and ``symbolic_correct`` to each record.

Equivalence (``judge.equivalence``):
- ``math-verify`` (default): NeMo-Skills' order: light normalisation and string equality, then math-verify's
  symbolic comparison (gold first) in worker processes with a hard per-sample time limit (``sandbox.timed_pool``);
  a sample over the limit is incorrect and logged.
- ``exact``: normalised string equality or equal exact rationals (``0.5`` == ``1/2``); no sympy.
- a user's ``module:function`` (expected, predicted) -> bool, run in the job's process.

Extraction (``judge.extraction``, read by ``extractors``): ``EXTRACTORS`` by name, or a user's ``module:function``
(text, regex) -> the answer or ``None``; ``extraction_route`` records how (``extraction_routes.ROUTES``).

Multiple choice (``judge.extraction: multichoice``): one letter from the last ``\\boxed{}`` (or ``judge.regex``),
else the last ``Answer: X`` line, correct when it is the expected letter; ``judge.equivalence`` is not used."""

from __future__ import annotations

import logging
import re
from collections import Counter
from collections.abc import Callable
from fractions import Fraction

from snakeskills.errors import SnakeskillsError
from snakeskills.judging.code_execution import NO_CODE, program_and_route, row_check, run_many
from snakeskills.judging.extraction_routes import EXTRACTION_ROUTE, NO_ANSWER
from snakeskills.judging.extractors import MULTICHOICE, answer_reader, option_named_by_value
from snakeskills.registry import RowsOf, choose, row_at
from snakeskills.sandbox.containment import sandbox_limits
from snakeskills.settings.judging import RuleJudge

logger = logging.getLogger(__name__)


def choice_match(predicted: str | None, expected: str) -> bool:
    """A multiple-choice verdict: the predicted option letter is the expected one (either case)."""
    return predicted is not None and predicted.upper() == str(expected).strip().upper()


_NUMBER = re.compile(r"^[+-]?(\d+(\.\d*)?|\.\d+)$")
_INTEGER = re.compile(r"^[+-]?\d+$")
_FRACTION = re.compile(r"^([+-]?\d+)\s*/\s*([+-]?\d+)$")
_PERCENT = re.compile(r"^(\d+\.?\d*)(?:\\%|%)$")
_TEXT_LITERAL = re.compile(r"[a-zA-Z ,]+")
_LATEX_ENVIRONMENT = re.compile(r"\$.*\$|\\\(.*\\\)|\\\[.*\\\]|\\boxed\{", re.DOTALL)


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


def exact_match(predicted: str | None, expected: str) -> bool:
    """Exact match after light normalisation, or equal as exact rational numbers (``0.5`` == ``1/2``)."""
    if predicted is None:
        return False
    predicted_text, expected_text = normalize_answer(predicted), normalize_answer(str(expected))
    if predicted_text == expected_text:
        return True
    predicted_number, expected_number = as_number(predicted_text), as_number(expected_text)
    return predicted_number is not None and predicted_number == expected_number


def _strip_percent_and_period(text: str) -> str:
    match = _PERCENT.fullmatch(text)
    if match:
        text = match.group(1)
    return text.rstrip(".\\")


def quick_verdict(expected: str, predicted: str | None) -> bool | None:
    """The verdict when it needs no symbolic comparison, else ``None`` (then ``math_verify_equal`` decides)."""
    if predicted is None:
        return False
    expected_text = _strip_percent_and_period(str(expected).strip())
    predicted_text = _strip_percent_and_period(predicted.strip())
    if expected_text.replace(" ", "") == predicted_text.replace(" ", ""):
        return True
    if _INTEGER.match(expected_text) and _INTEGER.match(predicted_text):
        return int(expected_text) == int(predicted_text)  # "016" == "16", as math-verify has it
    return None


def math_verify_equal(expected: str, predicted: str) -> bool:
    """math-verify's verdict, gold first; runs without math-verify's signal timeouts (the caller bounds time)."""
    from latex2sympy2_extended import NormalizationConfig, normalize_latex
    from math_verify import LatexExtractionConfig, parse, verify

    expected_text = _strip_percent_and_period(str(expected).strip())
    predicted_text = _strip_percent_and_period(predicted.strip())
    normalized_expected = normalize_latex(expected_text, NormalizationConfig).replace(" ", "")
    normalized_predicted = normalize_latex(predicted_text, NormalizationConfig).replace(" ", "")
    if normalized_expected == normalized_predicted:
        return True
    if _TEXT_LITERAL.fullmatch(normalized_expected) and _TEXT_LITERAL.fullmatch(normalized_predicted):
        return False  # plain words: the string comparison above is the verdict
    if not _LATEX_ENVIRONMENT.search(expected_text):
        expected_text = f"${expected_text}$"
    if not _LATEX_ENVIRONMENT.search(predicted_text):
        predicted_text = f"${predicted_text}$"
    gold = parse(expected_text, [LatexExtractionConfig()], parsing_timeout=None)
    target = parse(predicted_text, [LatexExtractionConfig()], parsing_timeout=None)
    return bool(verify(gold, target, timeout_seconds=None))


def _silence_math_verify():
    # math-verify warns on every call that its own (signal-based) timeout is off; ours is in force
    for name in ("math_verify", "math_verify.parser", "math_verify.grader", "math_verify.utils"):
        logging.getLogger(name).setLevel(logging.ERROR)


# judge.equivalence: whether a predicted answer is the expected one, by name; a user's own is ``module:function``
# (expected, predicted); math-verify runs in timed worker processes (``symbolic_verdicts``)
EQUIVALENCES: dict[str, Callable[[str, str], bool]] = {
    "math-verify": math_verify_equal,
    "exact": lambda expected, predicted: exact_match(predicted, expected),
}


def _math_verify_task(expected: str, predicted: str) -> bool:
    _silence_math_verify()
    return math_verify_equal(expected, predicted)


def symbolic_verdicts(
    pairs: list[tuple[str, str | None]],
    *,
    equivalence: str,
    num_workers: int,
    timeout_seconds: float,
    memory_limit_mb: int | None,
    rows: RowsOf | None = None,
) -> list[bool]:
    """``symbolic_correct`` for each (expected, predicted) pair; counts of each path are logged. ``rows``: the
    records the pairs are of, in order, named in an error of a user's equivalence (else it shows the pair)."""
    if equivalence != "math-verify":  # compared in this process
        same = choose(EQUIVALENCES, equivalence, "judge.equivalence")
        return [
            predicted is not None and bool(same.call(row_at(rows, index) if same.own else None, expected, predicted))
            for index, (expected, predicted) in enumerate(pairs)
        ]
    verdicts = [quick_verdict(expected, predicted) for expected, predicted in pairs]
    undecided = [index for index, verdict in enumerate(verdicts) if verdict is None]
    # many samples repeat an answer: compare each distinct (expected, predicted) pair once
    unique_pairs = list(dict.fromkeys(pairs[index] for index in undecided))
    if unique_pairs:
        import math_verify  # noqa: F401 - imported before the workers fork, so they share it

        from snakeskills.sandbox.timed_pool import TimedProcessPool

        workers = min(num_workers, len(unique_pairs))
        with TimedProcessPool(
            _math_verify_task, num_workers=workers, timeout_seconds=timeout_seconds, memory_limit_mb=memory_limit_mb
        ) as pool:
            outcomes = dict(zip(unique_pairs, pool.map(unique_pairs), strict=True))
        timed_out = errors = 0
        for pair, outcome in outcomes.items():
            if outcome.timed_out:
                timed_out += 1
                logger.warning(
                    "%r vs expected %r: comparison ran past %ss; counted incorrect", pair[1], pair[0], timeout_seconds
                )
            elif outcome.error is not None:
                errors += 1
                logger.warning(
                    "%r vs expected %r: comparison failed (%s); counted incorrect", pair[1], pair[0], outcome.error
                )
        for index in undecided:
            outcome = outcomes[pairs[index]]
            verdicts[index] = outcome.error is None and not outcome.timed_out and bool(outcome.value)
        logger.info(
            "%d samples: %d decided without sympy, %d compared with math-verify as %d distinct pairs on %d workers "
            "(%d pairs past the time limit, %d errors)",
            len(pairs),
            len(pairs) - len(undecided),
            len(undecided),
            len(unique_pairs),
            workers,
            timed_out,
            errors,
        )
    return verdicts


def judge_verdicts(
    pairs: list[tuple[str, str | None]], judge: RuleJudge, *, num_workers: int, rows: RowsOf | None = None
) -> list[bool]:
    """Whether each (expected, predicted) answer pair agrees under a judge section's settings: letter equality for
    ``multichoice``, else ``symbolic_verdicts`` with its equivalence and limits (``rows``: the pairs' records, for
    errors). Code answers have tests, not an expected answer: ``judge_records`` runs them."""
    if judge.extraction == "code":
        raise SnakeskillsError("code answers are judged by running their tests (judge_records), not by comparison")
    if judge.extraction in MULTICHOICE:
        return [choice_match(predicted, expected) for expected, predicted in pairs]
    return symbolic_verdicts(
        pairs,
        equivalence=judge.equivalence,
        num_workers=num_workers,
        timeout_seconds=judge.timeout_seconds,
        memory_limit_mb=judge.memory_limit_mb,
        rows=rows,
    )


def judged_text(record: dict) -> str:
    """The part of a generation the judge reads: all of it, or with tools, what the model wrote after its last tool
    output (``tool_output_spans``: the spans the tool loop appended), so an answer a tool printed is never credited
    as the model's."""
    spans = record.get("tool_output_spans") or []
    if not spans:
        return record["generation"]
    full = record.get("_full_generation")
    if full is None:
        return record["generation"][spans[-1][1] :]
    # parse_reasoning: the spans are the whole text's, ``generation`` the answer after the thinking; a tool output
    # inside the thinking leaves the answer as it is, one inside the answer cuts it
    after = full[spans[-1][1] :]
    return record["generation"] if record["generation"] and record["generation"] in after else after


def judge_records(records: list[dict], judge: RuleJudge, *, num_workers: int, source=None) -> list[dict]:
    """The records with ``predicted_answer`` and ``symbolic_correct`` added (and, for code, how the tests ran).
    ``source``: the file the records were read from, named with the row in an error of a user's function."""
    if judge.extraction == "code":
        return judge_programs(records, judge, num_workers=num_workers)
    method, regex, rows = judge.extraction, judge.regex, RowsOf(records, source)
    read = answer_reader(method)
    found = [read(rows.at(index), judged_text(record), regex) for index, record in enumerate(records)]
    if method == "multichoice":  # an answer given as an option's text names that option
        found = [
            _named_option(record, regex, answer, route) for record, (answer, route) in zip(records, found, strict=True)
        ]
    pairs = [(str(record["expected_answer"]), answer) for record, (answer, _) in zip(records, found, strict=True)]
    verdicts = judge_verdicts(pairs, judge, num_workers=num_workers, rows=rows)
    judged = [
        {**record, "predicted_answer": answer, "symbolic_correct": verdict, EXTRACTION_ROUTE: route}
        for record, (answer, route), verdict in zip(records, found, verdicts, strict=True)
    ]
    _log_routes(judged)
    return judged


def _named_option(record: dict, regex: str | None, answer: str | None, route: str) -> tuple[str | None, str]:
    """A multichoice answer, or where it has none, the option its final value names (route option value)."""
    if answer is not None:
        return answer, route
    named = option_named_by_value(record, judged_text(record), regex)
    return (named, "option value") if named is not None else (None, NO_ANSWER)


def _log_routes(judged: list[dict]) -> None:
    routes = Counter(record[EXTRACTION_ROUTE] for record in judged)
    logger.info("%d samples' answers found by: %s", len(judged), ", ".join(f"{n} {r}" for r, n in routes.items()))


def judge_programs(records: list[dict], judge: RuleJudge, *, num_workers: int) -> list[dict]:
    """Code records judged by running their tests or test cases (``code_execution``): ``predicted_answer`` is the
    program the generation answers with, ``symbolic_correct`` whether it passes, ``execution_status`` passed,
    failed, timed out or no code, and ``execution_error`` the failing program's last error line (or the case it
    failed)."""
    for record in records:
        if not any(record.get(field) for field in ("tests", "test_cases", "call_cases")):
            raise SnakeskillsError(
                f"record {record.get('id')!r} has no tests: judge.extraction code judges a code benchmark's rows "
                "(prepared with benchmarks.<name>.code), whose 'tests', 'test_cases' or 'call_cases' field its "
                "programs run against"
            )
    found = [program_and_route(judged_text(record)) for record in records]
    answers = [answer for answer, _ in found]
    checks = {
        index: row_check(answer, record)
        for index, (record, answer) in enumerate(zip(records, answers, strict=True))
        if answer is not None
    }
    runs = dict(
        zip(
            checks,
            run_many(
                checks.values(),
                num_workers=num_workers,
                timeout_seconds=judge.timeout_seconds,
                memory_limit_mb=judge.memory_limit_mb,
                sandbox=judge.sandbox,
            ),
            strict=True,
        )
    )
    judged = []
    for index, (record, (answer, route)) in enumerate(zip(records, found, strict=True)):
        run = runs.get(index)
        judged.append(
            {
                **record,
                "predicted_answer": answer,
                "symbolic_correct": run is not None and run.passed,
                "execution_status": run.status if run is not None else NO_CODE,
                "execution_error": run.error if run is not None else None,
                EXTRACTION_ROUTE: route,
            }
        )
    statuses = [record["execution_status"] for record in judged]
    logger.info(
        "%d samples: %s (%d distinct programs run on up to %d workers, %ss and %s MB each; %s)",
        len(judged),
        ", ".join(f"{statuses.count(status)} {status}" for status in dict.fromkeys(statuses)),
        len(set(checks.values())),
        num_workers,
        judge.timeout_seconds,
        judge.memory_limit_mb,
        sandbox_limits(judge.sandbox, judge.memory_limit_mb),
    )
    return judged
