"""Running a generated program against its tests: the verdict of a code benchmark (``judge.extraction: code``).

A prepared code row carries its tests in one of three forms:

- ``tests``: a Python program that exits 0 when the solution is right, run as ``starter_code + answer + tests``
  (a full definition in the answer replaces the starter's stub; a bare body continues it).
- ``test_cases``: ``{"input", "output"}`` texts; the answer is a whole program run once per case on its standard
  input, passing when its output matches token by token (whitespace aside; numbers within 1e-6). Cases run in
  order; the first failure decides.
- ``call_cases``: a function name, each call's arguments and expected return value; a harness reports each value
  as JSON and the judge compares them outside.

The answer is the generation's last fenced code block (```` ```python ```` preferred), or the text itself when it
has no fence and parses as Python.

Each run (``sandbox.program_runner``) is a fresh ``python3 -I`` in its own folder, by default in bubblewrap
(``sandbox.containment``), under limits the child cannot raise: ``timeout_seconds`` per case, CPU time,
``memory_limit_mb``, 16 MB files and output, no core dumps, and in the sandbox 64 processes and a cgroup memory
limit. Tests pass only with the harness's nonce, written when the program returns, so an early exit 0 fails. What
remains forgeable: docs/benchmarks.md (the sandbox section)."""

from __future__ import annotations

import ast
import json
import logging
import math
import re
import signal
import textwrap
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from snakeskills.judging.extraction_routes import NO_ANSWER
from snakeskills.sandbox.containment import check_sandbox
from snakeskills.sandbox.program_runner import Outcome, run_once

logger = logging.getLogger(__name__)

PASSED, FAILED, TIMED_OUT, NO_CODE = "passed", "failed", "timed out", "no code"
ERROR_TAIL_CHARS = 300

_FENCE_LINE = re.compile(r"^[ \t]*```[ \t]*([^\s`]*)[^`]*$")
_DEFINITION = re.compile(r"^\s*(?:async\s+def|def|class)\s+\w+", re.MULTILINE)
_PYTHON_TAGS = ("python", "py", "python3")


def code_blocks(text: str) -> list[tuple[str, str]]:
    """The fenced code blocks of a markdown text, as (language tag, code), in order. Fences are lines starting
    with three backticks; a tagged fence met inside a bare one means the bare one was stray (a model's lone
    "```" before its prose), so the block starts again there; a block cut off by the end of the text counts."""
    blocks, tag, lines, inside = [], "", [], False
    for line in text.splitlines():
        fence = _FENCE_LINE.match(line)
        if fence is None:
            if inside:
                lines.append(line)
            continue
        info = fence.group(1).lower()
        if not inside:
            inside, tag, lines = True, info, []
        elif not info:
            blocks.append((tag, "\n".join(lines)))
            inside = False
        else:  # a tagged fence inside a block: that block was stray (bare) or ends here (tagged)
            if tag:
                blocks.append((tag, "\n".join(lines)))
            tag, lines = info, []
    if inside:
        blocks.append((tag, "\n".join(lines)))
    return blocks


def _defines(code: str) -> bool:
    """Whether code defines a function or class (a solution, not a usage example)."""
    try:
        return any(
            isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
            for node in ast.walk(ast.parse(code))
        )
    except (SyntaxError, ValueError):
        return bool(_DEFINITION.search(code))


def extract_program(text: str) -> str | None:
    """The code a generation answers with. Among its fenced blocks (```` ```python ```` ones when it has any),
    the last that defines a function or class, else the last; without fences, the whole text when it is Python
    statements (a base model's completion of the starter); ``None`` when there is none. A usage example after the
    solution (```` ```python print(f(3)) ````) is thus not taken for it."""
    return program_and_route(text)[0]


def program_and_route(text: str) -> tuple[str | None, str]:
    """``extract_program``'s code and the route it was found by (``extraction_routes.ROUTES``): python block, code
    block (fenced, in a text without python blocks), unfenced code, or none."""
    blocks = code_blocks(text)
    python_blocks = [code for tag, code in blocks if tag in _PYTHON_TAGS]
    candidates = python_blocks or [code for _, code in blocks]
    if candidates:
        defining = [code for code in candidates if _defines(code)]
        chosen, route = (defining or candidates)[-1], "python block" if python_blocks else "code block"
    elif _looks_like_code(text):
        chosen, route = text, "unfenced code"
    else:
        return None, NO_ANSWER
    chosen = chosen.strip("\n")
    return (chosen, route) if chosen.strip() else (None, NO_ANSWER)


def _looks_like_code(text: str) -> bool:
    """Unfenced text is an answer when it parses as Python statements (a whole program, or a function body that
    continues a starter), other than one lone expression: "42" or "Hello" are not programs."""
    body = textwrap.indent(textwrap.dedent(text.strip("\n")), "    ")
    try:
        tree = ast.parse(f"def _():\n{body}\n")
    except (SyntaxError, ValueError):
        return False
    statements = tree.body[0].body
    return not (len(statements) == 1 and isinstance(statements[0], ast.Expr))


def _compiles(code: str) -> bool:
    try:
        compile(code, "<answer>", "exec")
    except (SyntaxError, ValueError):
        return False
    return True


def continued(answer: str, starter_code: str | None) -> str:
    """The answer after the code it continues: the starter, then the answer (a bare function body continues the
    starter's signature; a whole definition after HumanEval's docstring stub replaces it). When that does not
    compile but the answer alone does, the answer repeated the starter whole (a stub without a body, as APPS'
    ``class Solution: def f(self, x):``), and is run alone; a body written without its indentation is indented
    to continue the starter."""
    answer = answer.rstrip("\n")
    if not starter_code:
        return answer
    starter = starter_code.rstrip("\n")
    combined = f"{starter}\n{answer}"
    if _compiles(combined):
        return combined
    if _compiles(answer):
        return answer
    body = f"{starter}\n{textwrap.indent(textwrap.dedent(answer), _body_indent(starter))}"
    return body if _compiles(body) else combined


def _body_indent(starter: str) -> str:
    """The indentation a body continuing the starter takes: the starter's last line when it is only spaces
    (APPS' stubs end so), else its last line's (a docstring), one level deeper after a line ending in a colon."""
    last = starter.splitlines()[-1] if starter.strip() else ""
    if not last.strip():
        return last
    indent = last[: len(last) - len(last.lstrip())]
    return indent + "    " if last.rstrip().endswith(":") else indent


def answer_program(answer: str, *, starter_code: str | None, imports: str | None = None) -> str:
    """The program an answer makes: the benchmark's ``imports`` (when it has them), then the answer after its
    starter (``continued``)."""
    program = continued(answer, starter_code)
    return f"{imports.rstrip()}\n{program}" if imports else program


def program_under_test(answer: str, *, starter_code: str | None, tests: str, imports: str | None = None) -> str:
    """The file run for one answer: its ``answer_program``, then the tests."""
    program = answer_program(answer, starter_code=starter_code, imports=imports)
    return "\n".join([program, "", "", tests.rstrip("\n"), ""])


# Appended to a call-based answer: calls its function with each case's arguments and reports each return value as
# strict JSON (a line per case) to the report file the judge opened; the expected values never enter the sandbox,
# and an object that is not plain data (one whose __eq__ lies) is not JSON, so it cannot pass.
_CALL_HARNESS = """

import json as _json
import os as _os

_NAME = {name!r}
if "Solution" in globals() and hasattr(Solution, _NAME):
    _function = getattr(Solution(), _NAME)
else:
    _function = globals()[_NAME]
for _arguments in _json.loads({arguments!r}):
    _os.write(__report_fd__, (_json.dumps(_function(*_arguments), allow_nan=False) + "\\n").encode("utf-8"))
"""


def call_cases(function_name: str, arguments: list[list], expected: list) -> dict:
    """A call-based row's cases (APPS' ``fn_name`` rows), as its ``call_cases`` field: the function to call (a
    method of the answer's ``Solution`` class, LeetCode style, or a top-level function), each call's arguments and
    its expected return value."""
    return {"function": function_name, "arguments": arguments, "expected": expected}


def _same_value(got, expected) -> bool:
    """A returned value (parsed from JSON: a tuple reads as a list) equals the expected one; APPS stores some
    expected values wrapped in a list, which also match."""
    return got == expected or (isinstance(expected, list) and len(expected) == 1 and got == expected[0])


@dataclass(frozen=True)
class ProgramRun:
    """How one program ran against its tests: ``status`` is passed, failed or timed out; ``error`` the last line
    of what a failing program wrote to stderr (its exception), or which case it failed and how, shortened."""

    status: str
    error: str | None = None

    @property
    def passed(self) -> bool:
        return self.status == PASSED


@dataclass(frozen=True)
class ProgramCheck:
    """One program and what it is checked against: ``cases`` ((input, expected output) pairs, run on its standard
    input); ``calls`` (the JSON text of each call's expected return value, which the program reports); or, when
    there are neither, the tests inside the program itself (``program_under_test``)."""

    program: str
    cases: tuple[tuple[str, str], ...] = ()
    calls: tuple[str, ...] = ()


def row_check(answer: str, row: dict) -> ProgramCheck:
    """What an answer (or a reference solution) to a prepared code row is run as: the row's ``imports`` (when it
    has them), the answer after its starter (``continued``), then either the row's ``tests`` in the same file, for
    a row with ``test_cases`` the cases on its standard input, or for a row with ``call_cases`` a harness calling
    its function, whose return values the judge compares outside the sandbox."""
    code = {"starter_code": row.get("starter_code"), "imports": row.get("imports")}
    if row.get("call_cases"):
        calls = row["call_cases"]
        harness = _CALL_HARNESS.format(name=calls["function"], arguments=json.dumps(calls["arguments"]))
        expected = tuple(json.dumps(value) for value in calls["expected"])
        return ProgramCheck(answer_program(answer, **code) + "\n" + harness, calls=expected)
    if row.get("test_cases"):
        cases = tuple((case["input"], case["output"]) for case in row["test_cases"])
        return ProgramCheck(answer_program(answer, **code) + "\n", cases)
    return ProgramCheck(program_under_test(answer, tests=row["tests"], **code))


def _shortened(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _error_line(stderr: str) -> str | None:
    lines = [line.strip() for line in stderr.strip().splitlines() if line.strip()]
    return _shortened(lines[-1], ERROR_TAIL_CHARS) if lines else None


def _numbers_close(actual: str, expected: str) -> bool:
    try:
        return math.isclose(float(actual), float(expected), rel_tol=1e-6, abs_tol=1e-6)
    except ValueError:
        return False


def outputs_match(actual: str, expected: str) -> bool:
    """Whether a program's standard output is the expected one: the same whitespace-separated tokens in order,
    two numbers counting as the same token when within 1e-6 (absolute or relative)."""
    produced, wanted = actual.split(), expected.split()
    if produced == wanted:
        return True
    return len(produced) == len(wanted) and all(
        token == other or _numbers_close(token, other) for token, other in zip(produced, wanted, strict=True)
    )


def _failure(outcome: Outcome, timeout_seconds: float, where: str = "") -> ProgramRun:
    """The verdict of a run that did not pass (``where``: which case, as a prefix)."""
    if outcome.returncode is None:
        return ProgramRun(TIMED_OUT, f"{where}ran past {timeout_seconds:g} s")
    error = _error_line(outcome.stderr)
    if outcome.returncode < 0:
        name = signal.Signals(-outcome.returncode).name
        reason = f"killed by {name}" + (" (CPU time limit)" if name == "SIGXCPU" else "")
        error = f"{reason}: {error}" if error else reason
    return ProgramRun(FAILED, where + (error or f"exit status {outcome.returncode}"))


def run_check(
    check: ProgramCheck, *, timeout_seconds: float, memory_limit_mb: int | None, sandbox: str = "bwrap"
) -> ProgramRun:
    """Run one program against its tests or its cases under the limits, in ``sandbox``; see the module doc. Each
    case runs in a fresh folder: nothing a run leaves there (a file, a cache) reaches the next case. Tests pass
    only with the harness's proof that the program ran to its end (status 0 alone is not a pass)."""
    limits = {"timeout_seconds": timeout_seconds, "memory_limit_mb": memory_limit_mb, "sandbox": sandbox}
    if check.calls:
        return _judge_calls(run_once(check.program, stdin=None, report=True, **limits), check.calls, timeout_seconds)
    if not check.cases:
        outcome = run_once(check.program, stdin=None, **limits)
        if outcome.returncode == 0 and not outcome.finished:
            return ProgramRun(FAILED, "exited before its tests finished (status 0 without the harness's proof)")
        return ProgramRun(PASSED) if outcome.returncode == 0 else _failure(outcome, timeout_seconds)
    for number, (case_input, expected) in enumerate(check.cases, start=1):
        where = f"case {number} of {len(check.cases)}: "
        outcome = run_once(check.program, stdin=case_input, **limits)
        if outcome.returncode != 0:
            return _failure(outcome, timeout_seconds, where)
        if not outputs_match(outcome.stdout, expected):
            shown = f"expected {_shortened(expected.strip(), 60)!r}, got {_shortened(outcome.stdout.strip(), 60)!r}"
            return ProgramRun(FAILED, f"{where}wrong output ({shown})")
    return ProgramRun(PASSED)


def _judge_calls(outcome: Outcome, calls: tuple[str, ...], timeout_seconds: float) -> ProgramRun:
    """The verdict of a call-based run: every call's reported value (JSON) equals the expected one, in order."""
    if outcome.returncode != 0:
        return _failure(outcome, timeout_seconds)
    if not outcome.finished:
        return ProgramRun(FAILED, "exited before its calls finished (status 0 without the harness's proof)")
    lines = outcome.report.splitlines()
    for number, expected in enumerate(calls, start=1):
        where = f"case {number} of {len(calls)}: "
        if number > len(lines):
            return ProgramRun(FAILED, f"{where}no value reported")
        try:
            got = json.loads(lines[number - 1])
        except ValueError:
            return ProgramRun(FAILED, f"{where}reported {_shortened(lines[number - 1], 60)!r}, not JSON")
        if not _same_value(got, json.loads(expected)):
            shown = f"returned {_shortened(json.dumps(got), 60)}, expected {_shortened(expected, 60)}"
            return ProgramRun(FAILED, where + shown)
    return ProgramRun(PASSED)


def run_many(
    checks: Iterable[ProgramCheck],
    *,
    num_workers: int,
    timeout_seconds: float,
    memory_limit_mb: int | None,
    sandbox: str = "bwrap",
) -> list[ProgramRun]:
    """``run_check`` for each check, ``num_workers`` at a time; identical checks run once. The sandbox is checked
    first (``sandbox.check_sandbox``): a node where it cannot start stops the job, not each row."""
    checks = list(checks)
    distinct = list(dict.fromkeys(checks))
    if not distinct:
        return []

    check_sandbox(sandbox)

    def run(check: ProgramCheck) -> ProgramRun:
        return run_check(check, timeout_seconds=timeout_seconds, memory_limit_mb=memory_limit_mb, sandbox=sandbox)

    with ThreadPoolExecutor(max_workers=max(1, min(num_workers, len(distinct)))) as pool:
        runs = dict(zip(distinct, pool.map(run, distinct), strict=True))
    return [runs[check] for check in checks]
