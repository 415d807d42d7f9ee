"""Running a generated program against its tests: the verdict of a code benchmark (``judge.extraction: code``).

A code benchmark's prepared row carries ``tests``: a Python program that exits with status 0 when the solution
is right (a chain of ``assert``s, or HumanEval's ``check`` function and its call), and optionally
``starter_code``, the code the answer continues (HumanEval's signature and docstring). The answer is the last
fenced code block of the generation (```` ```python ```` preferred; the text itself when it has no fence and
parses as Python). The program run is ``starter_code + answer + tests``: a full function definition in the
answer replaces the starter's stub, and a bare function body continues it, so both answer styles are judged.

Each program runs in a fresh ``python3 -I`` process in its own empty working folder and session, with no input,
its output discarded and these limits (set inside the child before the program is compiled, soft = hard, so it
cannot raise them): wall clock ``timeout_seconds`` (the whole process group is killed past it), CPU time, address
space ``memory_limit_mb``, files it writes of at most 16 MB, no core dumps. This bounds mistakes, not malice: the
program runs as the job's user, with the job's file system and network. Run code benchmarks where that is
acceptable (a throwaway container or cluster node), as with any execution-based benchmark harness.
"""

from __future__ import annotations

import ast
import contextlib
import logging
import math
import os
import re
import signal
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

logger = logging.getLogger(__name__)

PASSED, FAILED, TIMED_OUT, NO_CODE = "passed", "failed", "timed out", "no code"
OUTPUT_LIMIT_BYTES = 16 * 1024 * 1024
ERROR_TAIL_CHARS = 300

_FENCE_LINE = re.compile(r"^[ \t]*```[ \t]*([^\s`]*)[^`]*$")
_DEFINITION = re.compile(r"^\s*(?:async\s+def|def|class)\s+\w+", re.MULTILINE)
_PYTHON_TAGS = ("python", "py", "python3")

# Runs in the child: limits first, then the program as __main__ (its own file name in tracebacks).
_BOOTSTRAP = """\
import resource, runpy, sys
cpu_seconds, memory_bytes, output_bytes = (int(value) for value in sys.argv[1:4])
resource.setrlimit(resource.RLIMIT_CPU, (cpu_seconds, cpu_seconds))
resource.setrlimit(resource.RLIMIT_FSIZE, (output_bytes, output_bytes))
resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
if memory_bytes:
    resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
sys.argv = sys.argv[4:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


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


def program_under_test(answer: str, *, starter_code: str | None, tests: str) -> str:
    """The file run for one answer: the starter (when the benchmark has one), the answer, then the tests."""
    parts = [starter_code.rstrip("\n")] if starter_code else []
    return "\n".join([*parts, answer.rstrip("\n"), "", "", tests.rstrip("\n"), ""])


@dataclass(frozen=True)
class ProgramRun:
    """How one program ran against its tests: ``status`` is passed, failed or timed out; ``error`` the last line
    of what a failing program wrote to stderr (its exception), shortened."""

    status: str
    error: str | None = None

    @property
    def passed(self) -> bool:
        return self.status == PASSED


def _error_line(stderr: str) -> str | None:
    lines = [line.strip() for line in stderr.strip().splitlines() if line.strip()]
    if not lines:
        return None
    line = lines[-1]
    return line if len(line) <= ERROR_TAIL_CHARS else line[: ERROR_TAIL_CHARS - 3] + "..."


def run_tests(program: str, *, timeout_seconds: float, memory_limit_mb: int | None) -> ProgramRun:
    """Run one program (``program_under_test``) in a fresh interpreter under the limits; see the module doc."""
    with tempfile.TemporaryDirectory(prefix="snakeskills-run-") as folder:
        path = os.path.join(folder, "solution.py")
        with open(path, "w", encoding="utf-8") as file:
            file.write(program)
        memory_bytes = memory_limit_mb * 1024 * 1024 if memory_limit_mb else 0
        command = [
            sys.executable,
            "-I",
            "-c",
            _BOOTSTRAP,
            str(math.ceil(timeout_seconds) + 1),
            str(memory_bytes),
            str(OUTPUT_LIMIT_BYTES),
            path,
        ]
        environment = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": folder, "OMP_NUM_THREADS": "1"}
        environment["PYTHONHASHSEED"] = "0"
        process = subprocess.Popen(
            command,
            cwd=folder,
            env=environment,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        try:
            _, stderr = process.communicate(timeout=timeout_seconds)
        except subprocess.TimeoutExpired:
            _kill_group(process)
            process.communicate()
            return ProgramRun(TIMED_OUT, f"ran past {timeout_seconds:g} s")
        _kill_group(process)  # whatever the program left running in its session
    if process.returncode == 0:
        return ProgramRun(PASSED)
    error = _error_line(stderr.decode("utf-8", "replace"))
    if process.returncode < 0:
        name = signal.Signals(-process.returncode).name
        reason = f"killed by {name}" + (" (CPU time limit)" if name == "SIGXCPU" else "")
        error = f"{reason}: {error}" if error else reason
    return ProgramRun(FAILED, error or f"exit status {process.returncode}")


def _kill_group(process: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)


def run_many(
    programs: Iterable[str], *, num_workers: int, timeout_seconds: float, memory_limit_mb: int | None
) -> list[ProgramRun]:
    """``run_tests`` for each program, ``num_workers`` at a time; identical programs run once."""
    programs = list(programs)
    distinct = list(dict.fromkeys(programs))
    if not distinct:
        return []

    def run(program: str) -> ProgramRun:
        return run_tests(program, timeout_seconds=timeout_seconds, memory_limit_mb=memory_limit_mb)

    with ThreadPoolExecutor(max_workers=max(1, min(num_workers, len(distinct)))) as pool:
        runs = dict(zip(distinct, pool.map(run, distinct), strict=True))
    return [runs[program] for program in programs]
