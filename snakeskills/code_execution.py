"""Running a generated program against its tests: the verdict of a code benchmark (``judge.extraction: code``).

A code benchmark's prepared row carries its tests in one of two forms:

- ``tests``: a Python program that exits with status 0 when the solution is right (a chain of ``assert``s, or
  HumanEval's ``check`` function and its call), and optionally ``starter_code``, the code the answer continues
  (HumanEval's signature and docstring). The program run is ``starter_code + answer + tests``: a full function
  definition in the answer replaces the starter's stub, and a bare function body continues it, so both answer
  styles are judged.
- ``test_cases``: a list of ``{"input", "output"}`` texts (APPS, CodeContests, LiveCodeBench's stdin problems). The
  answer is a whole program, run once per case with the case's input on its standard input; it passes a case when
  its standard output matches the expected output token by token (whitespace and line breaks aside; numbers equal
  within 1e-6, so ``0.5`` matches ``0.500000``). Cases run in order; the first failing one decides.

The answer is the last fenced code block of the generation (```` ```python ```` preferred; the text itself when it
has no fence and parses as Python).

Each run is a fresh ``python3 -I`` process in its own empty working folder and session, its output discarded (or,
for a case, kept in a file there) and these limits (set inside the child before the program is compiled, soft =
hard, so it cannot raise them): wall clock ``timeout_seconds`` (per case; the whole process group is killed past
it), CPU time, address space ``memory_limit_mb``, files (and a case's output) of at most 16 MB, no core dumps. This
bounds mistakes, not malice: the program runs as the job's user, with the job's file system and network. Run code
benchmarks where that is acceptable (a throwaway container or cluster node), as with any execution-based harness.
"""

from __future__ import annotations

import ast
import contextlib
import json
import logging
import math
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from snakeskills.sandbox import bwrap_command, check_sandbox

logger = logging.getLogger(__name__)

PASSED, FAILED, TIMED_OUT, NO_CODE = "passed", "failed", "timed out", "no code"
OUTPUT_LIMIT_BYTES = 16 * 1024 * 1024
ERROR_TAIL_CHARS = 300

_FENCE_LINE = re.compile(r"^[ \t]*```[ \t]*([^\s`]*)[^`]*$")
_DEFINITION = re.compile(r"^\s*(?:async\s+def|def|class)\s+\w+", re.MULTILINE)
_PYTHON_TAGS = ("python", "py", "python3")

# Runs in the child: limits first; then the nonce is read from its pipe (and the pipe closed), the program file
# read and removed (a program cannot read its tests back through __file__) and run as __main__; only when it
# returns does the nonce go to the proof pipe: a program that exits early (sys.exit(0), os._exit(0)) or
# raises leaves no proof, and exit status 0 without the proof is not a pass.
_BOOTSTRAP = """\
import os, resource, sys


def _run():
    cpu_seconds, memory_bytes, output_bytes, processes, nonce_fd, proof_fd = (int(value) for value in sys.argv[1:7])
    resource.setrlimit(resource.RLIMIT_CPU, (cpu_seconds, cpu_seconds))
    resource.setrlimit(resource.RLIMIT_FSIZE, (output_bytes, output_bytes))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if memory_bytes:
        resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
    if processes:
        resource.setrlimit(resource.RLIMIT_NPROC, (processes, processes))
    nonce = os.read(nonce_fd, 64)
    os.close(nonce_fd)
    path = sys.argv[7]
    with open(path, encoding="utf-8") as file:
        source = file.read()
    os.remove(path)
    sys.argv = sys.argv[7:]
    code = compile(source, path, "exec")
    del source
    module = {"__name__": "__main__", "__file__": path, "__builtins__": __builtins__}
    exec(code, module)
    os.write(proof_fd, nonce)


_run()
"""
# processes a sandboxed program may have at once (its own included); counted in its own user namespace
SANDBOX_PROCESSES = 64
STDERR_TAIL_BYTES = 64 * 1024


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
    blocks = code_blocks(text)
    python_blocks = [code for tag, code in blocks if tag in _PYTHON_TAGS]
    candidates = python_blocks or [code for _, code in blocks]
    if candidates:
        defining = [code for code in candidates if _defines(code)]
        chosen = (defining or candidates)[-1]
    elif _looks_like_code(text):
        chosen = text
    else:
        return None
    chosen = chosen.strip("\n")
    return chosen if chosen.strip() else None


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


_CALL_TESTS = """\
import json as _json


def _normalized(value):
    try:
        return _json.loads(_json.dumps(value))  # tuples as lists, as the expected values were stored
    except (TypeError, ValueError):
        return value


def _same(got, expected):
    got = _normalized(got)
    return got == expected or (isinstance(expected, list) and len(expected) == 1 and got == expected[0])


_CASES = _json.loads({cases!r})
_NAME = {name!r}
if "Solution" in globals() and hasattr(Solution, _NAME):
    _function = getattr(Solution(), _NAME)
else:
    _function = globals()[_NAME]
for _number, (_arguments, _expected) in enumerate(_CASES, start=1):
    _got = _function(*_arguments)
    assert _same(_got, _expected), (
        f"case {{_number}} of {{len(_CASES)}}: {{_NAME}}(...) returned {{_got!r:.60}}, expected {{_expected!r:.60}}"
    )
"""


def call_tests(function_name: str, arguments: list[list], expected: list) -> str:
    """A test program for call-based cases (APPS' ``fn_name`` rows): each case calls the answer's function (a
    method of its ``Solution`` class, LeetCode style, or a top-level function) with its arguments, and the result
    must equal the expected value (a tuple as a list; APPS stores some expected values wrapped in a list, which
    also match)."""
    cases = json.dumps([[list(case), result] for case, result in zip(arguments, expected, strict=True)])
    return _CALL_TESTS.format(cases=cases, name=function_name)


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
    input), or, when there are none, the tests inside the program itself (``program_under_test``)."""

    program: str
    cases: tuple[tuple[str, str], ...] = ()


def row_check(answer: str, row: dict) -> ProgramCheck:
    """What an answer (or a reference solution) to a prepared code row is run as: the row's ``imports`` (when it
    has them), the answer after its starter (``continued``), then either the row's ``tests`` in the same file or,
    for a row with ``test_cases``, the cases on its standard input."""
    code = {"starter_code": row.get("starter_code"), "imports": row.get("imports")}
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


@dataclass(frozen=True)
class _Outcome:
    """One run of a program: its exit status (``None``: killed at the wall-clock limit), the tail of its stderr,
    its stdout (when it was kept), and whether it left the harness's proof that it ran to its end."""

    returncode: int | None
    stderr: str
    stdout: str | None = None
    finished: bool = False


def _run_once(program: str, *, stdin: str | None, timeout_seconds: float, memory_limit_mb, sandbox: str) -> _Outcome:
    """Run ``program`` once in a fresh folder of its own under the limits, in ``sandbox``; with ``stdin``, feed it
    that text and keep its standard output.

    Everything the judge reads comes through handles it opened itself, outside the program's reach: standard
    input, output and error are files in a folder the sandbox does not show (bounded by the file size limit; only
    the tail of stderr is read), the nonce and the proof go through pipes. Every wait is bounded by the wall-clock
    limit; a program past it is killed with everything it started; removing its folders cannot fail the judge."""
    memory_bytes = memory_limit_mb * 1024 * 1024 if memory_limit_mb else 0
    run_folder = tempfile.mkdtemp(prefix="snakeskills-run-")
    io_folder = tempfile.mkdtemp(prefix="snakeskills-io-")
    nonce = secrets.token_hex(16).encode()
    nonce_read, nonce_write = os.pipe()
    proof_read, proof_write = os.pipe()
    try:
        os.write(nonce_write, nonce)
        os.close(nonce_write)
        nonce_write = -1  # closed: never closed twice (another thread may have its number by then)
        with open(os.path.join(run_folder, "solution.py"), "w", encoding="utf-8") as file:
            file.write(program)
        processes = SANDBOX_PROCESSES if sandbox == "bwrap" else 0
        arguments = [str(math.ceil(timeout_seconds) + 1), str(memory_bytes), str(OUTPUT_LIMIT_BYTES), str(processes)]
        arguments += [str(nonce_read), str(proof_write)]
        if sandbox == "bwrap":
            command = bwrap_command(run_folder, [sys.executable, "-I", "-c", _BOOTSTRAP, *arguments, "solution.py"])
            environment = None
        else:
            command = [sys.executable, "-I", "-c", _BOOTSTRAP, *arguments, os.path.join(run_folder, "solution.py")]
            environment = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": run_folder}
            environment.update(OMP_NUM_THREADS="1", PYTHONHASHSEED="0")
        stdout_path, stderr_path = os.path.join(io_folder, "stdout"), os.path.join(io_folder, "stderr")
        input_path = os.path.join(io_folder, "stdin")
        with open(input_path, "wb") as file:
            file.write((stdin or "").encode("utf-8"))
        with open(input_path, "rb") as input_file, open(stdout_path, "wb") as output, open(stderr_path, "wb") as error:
            process = subprocess.Popen(
                command,
                cwd=run_folder,
                env=environment,
                stdin=input_file if stdin is not None else subprocess.DEVNULL,
                stdout=output if stdin is not None else subprocess.DEVNULL,
                stderr=error,
                pass_fds=(nonce_read, proof_write),
                start_new_session=True,
            )
        os.close(nonce_read)
        os.close(proof_write)
        nonce_read = proof_write = -1
        try:
            returncode = process.wait(timeout=timeout_seconds)
        except subprocess.TimeoutExpired:
            returncode = None
        _kill_group(process)  # whatever it left running (in the sandbox, everything died with it already)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=5)
        if returncode is None:
            return _Outcome(None, "")
        os.set_blocking(proof_read, False)
        try:
            proof = os.read(proof_read, 64)
        except BlockingIOError:
            proof = b""
        stdout = _read_text(stdout_path, OUTPUT_LIMIT_BYTES) if stdin is not None else None
        return _Outcome(returncode, _read_text(stderr_path, STDERR_TAIL_BYTES, tail=True), stdout, proof == nonce)
    finally:
        for descriptor in (nonce_read, nonce_write, proof_read, proof_write):
            if descriptor >= 0:
                os.close(descriptor)
        for folder in (run_folder, io_folder):
            _remove(folder)


def _read_text(path: str, limit: int, *, tail: bool = False) -> str:
    """At most ``limit`` bytes of a file the judge opened (its end with ``tail``), as text."""
    with open(path, "rb") as file:
        if tail:
            file.seek(max(0, os.fstat(file.fileno()).st_size - limit))
        return file.read(limit).decode("utf-8", "replace")


def _remove(folder: str) -> None:
    """Remove a run's folder, whatever the program left in it (unreadable or unwritable folders included)."""

    def allow(function, path, _):
        with contextlib.suppress(OSError):
            os.chmod(os.path.dirname(path), 0o700)
            os.chmod(path, 0o700)
            function(path)

    with contextlib.suppress(OSError):
        shutil.rmtree(folder, onerror=allow)
    shutil.rmtree(folder, ignore_errors=True)


def _failure(outcome: _Outcome, timeout_seconds: float, where: str = "") -> ProgramRun:
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
    if not check.cases:
        outcome = _run_once(check.program, stdin=None, **limits)
        if outcome.returncode == 0 and not outcome.finished:
            return ProgramRun(FAILED, "exited before its tests finished (status 0 without the harness's proof)")
        return ProgramRun(PASSED) if outcome.returncode == 0 else _failure(outcome, timeout_seconds)
    for number, (case_input, expected) in enumerate(check.cases, start=1):
        where = f"case {number} of {len(check.cases)}: "
        outcome = _run_once(check.program, stdin=case_input, **limits)
        if outcome.returncode != 0:
            return _failure(outcome, timeout_seconds, where)
        if not outputs_match(outcome.stdout, expected):
            shown = f"expected {_shortened(expected.strip(), 60)!r}, got {_shortened(outcome.stdout.strip(), 60)!r}"
            return ProgramRun(FAILED, f"{where}wrong output ({shown})")
    return ProgramRun(PASSED)


def _kill_group(process: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)


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
