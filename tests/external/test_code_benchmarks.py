"""Code benchmarks: answers are programs, judged by running each row's tests.

Preparing (``code``: tests from a program or a list of asserts, setup, a run line, a starter, reference solutions
run while preparing), extracting the program a generation answers with, running it under limits (a wall clock
that kills the whole process group, an address-space cap, an exit status), the judge's fields, SFT examples from
code rows, and the plan's checks. Programs reading standard input (``code.cases``): output matching, one run per
case, the output file limit, APPS' rows (stdin and call-based, JSON text), LiveCodeBench's and CodeContests' case
layouts, and their errors. The presets on their real Hub layouts are in test_prepare_data.py; the last test runs
HumanEval's and MBPP's layouts and an APPS-layout JSONL through Snakemake on the real SmolLM2, up to its SFT data.
"""

from __future__ import annotations

import copy
import json
import re
import time
from pathlib import Path

import pytest
import yaml
from conftest import (
    DEFAULT_CONFIG,
    checked_config,
    planned_jobs,
    resolved_prompt,
    rule_judge,
    run_snakemake,
    write_config,
)
from dataset_fixtures import HUMANEVAL_TEST, MBPP_TRAIN

from snakeskills.data.prepare import prepare_split
from snakeskills.data.specs import preparing_spec, resolve_benchmark_spec
from snakeskills.errors import SnakeskillsError
from snakeskills.io import read_jsonl, write_jsonl
from snakeskills.judging.code_execution import (
    FAILED,
    NO_CODE,
    PASSED,
    TIMED_OUT,
    ProgramCheck,
    code_blocks,
    continued,
    extract_program,
    outputs_match,
    program_under_test,
    row_check,
    run_check,
    run_many,
)
from snakeskills.judging.judge import judge_records, judge_verdicts
from snakeskills.plan.layout import Layout
from snakeskills.plan.run import Plan
from snakeskills.plan.sections import benchmark_judge, llm_judged
from snakeskills.training.sft_data import select_sft_records

pytestmark = pytest.mark.usefixtures("bubblewrap")  # programs run in the sandbox (judge.sandbox's default)

DEFAULT = yaml.safe_load(DEFAULT_CONFIG.read_text())
LIMITS = {"timeout_seconds": 10, "memory_limit_mb": 1024, "sandbox": "bwrap"}
CODE_ROWS = [
    {
        "uid": "p1",
        "task": "Write a function add(a, b) returning the sum.",
        "asserts": ["assert add(1, 2) == 3", "assert add(-1, 1) == 0"],
        "setup": "import math",
        "solution": "def add(a, b):\n    return a + b",
        "stub": 'def add(a, b):\n    """Sum."""\n',
        "name": "add",
    }
]


def run(program: str, **limits) -> object:
    return run_check(ProgramCheck(program), **{**LIMITS, **limits})


# ---------------------------------------------------------------- the program an answer gives


def test_the_last_defining_python_block_is_the_answer():
    text = (
        "```\n\nHere is the code:\n\n```python\ndef f(x):\n    return x + 1\n```\n"
        "Try it:\n```python\nprint(f(3))\n```\nAnd in bash:\n```bash\necho hi\n```"
    )
    assert code_blocks(text) == [
        ("python", "def f(x):\n    return x + 1"),
        ("python", "print(f(3))"),
        ("bash", "echo hi"),
    ], "a stray bare fence before a tagged one starts no block"
    assert extract_program(text) == "def f(x):\n    return x + 1", "the usage example is not the answer"
    assert extract_program("```python\ndef a():\n    return 1\n```\n```python\ndef a():\n    return 2\n```") == (
        "def a():\n    return 2"
    ), "a corrected second solution wins"
    assert extract_program("```\ndef g():\n    pass\n```") == "def g():\n    pass", "an untagged block counts"
    assert extract_program("Sure:\n```python\ndef h():\n    return [") == "def h():\n    return [", (
        "a block cut off by the token limit is still the answer (and fails when run)"
    )


@pytest.mark.parametrize(
    ("text", "program"),
    [
        ("    return a + b\n", "    return a + b"),  # a base model continuing the starter
        ("x = 1\nassert x == 1", "x = 1\nassert x == 1"),
        ("The answer is 5.", None),
        ("42", None),
        ("Hello", None),
        ('"""only a docstring"""', None),
        ("```python\n\n```", None),
    ],
)
def test_unfenced_text_is_an_answer_only_when_it_is_python_statements(text, program):
    assert extract_program(text) == program


# ---------------------------------------------------------------- running it


def test_a_passing_and_a_failing_program():
    assert run("def f():\n    return 1\nassert f() == 1\n").status == PASSED
    failing = run("def f():\n    return 2\nassert f() == 1, 'f() is not 1'\n")
    assert (failing.status, failing.error) == (FAILED, "AssertionError: f() is not 1")
    assert run("import sys\nsys.exit(3)\n").error == "exit status 3"
    assert run("def f(:\n").error.startswith("SyntaxError")


def running_with_argument(argument: str) -> list[int]:
    """Live (not zombie) processes whose command line holds ``argument``, seen from outside any sandbox."""
    found = []
    for folder in Path("/proc").iterdir():
        try:
            alive = (folder / "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
            if alive and argument.encode() in (folder / "cmdline").read_bytes().split(b"\0"):
                found.append(int(folder.name))
        except (OSError, ValueError, IndexError):
            continue
    return found


@pytest.mark.parametrize("sandbox", ["bwrap", "none"])
def test_a_program_past_the_time_limit_is_killed_with_what_it_started(sandbox):
    marker = f"{time.time_ns() % 10**9}.5"  # sleep's argument: a command line no other process has
    program = (
        f"import subprocess, time\nchild = subprocess.Popen(['sleep', {marker!r}])\nwhile True:\n    time.sleep(0.05)\n"
    )
    started = time.monotonic()
    outcome = run(program, timeout_seconds=1.5, sandbox=sandbox)
    assert (outcome.status, outcome.error) == (TIMED_OUT, "ran past 1.5 s")
    assert time.monotonic() - started < 5
    time.sleep(0.2)
    assert running_with_argument(marker) == [], "the program's own child dies with it"


def test_memory_and_cpu_limits_stop_a_runaway_program():
    assert run("block = bytearray(3 * 1024 ** 3)\n", memory_limit_mb=512).error == "MemoryError"
    assert run("block = bytearray(300 * 1024 ** 2)\n", memory_limit_mb=1024).status == PASSED
    busy = run("while True:\n    pass\n", timeout_seconds=1)
    assert busy.status == TIMED_OUT


def test_a_program_runs_alone_in_an_empty_folder_with_no_input():
    program = "import os, sys\nassert os.listdir('.') == [], os.listdir('.')\nassert sys.stdin.read() == ''\n"
    assert run(program).status == PASSED
    assert run("input()\n").error == "EOFError: EOF when reading a line"


def test_the_starter_takes_a_whole_function_or_only_its_body():
    starter, tests = (
        'from typing import List\n\n\ndef total(xs: List[int]) -> int:\n    """Sum."""\n',
        ("assert total([1, 2]) == 3"),
    )
    body, whole = "    return sum(xs)", "def total(xs: List[int]) -> int:\n    return sum(xs)"
    for answer in (body, whole):
        assert run(program_under_test(answer, starter_code=starter, tests=tests)).status == PASSED, answer
    assert run(program_under_test(whole, starter_code=None, tests=tests)).error.startswith(
        "NameError: name 'List' is not defined"
    )


def test_identical_programs_run_once(tmp_path):
    marker = tmp_path / "runs"
    program = f"open({str(marker)!r}, 'a').write('x')\n"
    checks = [ProgramCheck(program), ProgramCheck("assert False\n"), ProgramCheck(program)]
    outcomes = run_many(checks, num_workers=2, **{**LIMITS, "sandbox": "none"})  # the count is written outside
    assert [outcome.status for outcome in outcomes] == [PASSED, FAILED, PASSED]
    assert marker.read_text() == "x"


# ---------------------------------------------------------------- judging


def code_record(generation: str, **fields) -> dict:
    tests = "assert add(1, 2) == 3\n"
    return {"id": "p1", "problem": "add", "tests": tests, "generation": generation, **fields}


def test_judged_code_records_carry_the_program_and_how_it_ran():
    config = rule_judge(LIMITS, extraction="code")
    records = [
        code_record("```python\ndef add(a, b):\n    return a + b\n```"),
        code_record("```python\ndef add(a, b):\n    return a - b\n```"),
        code_record("I cannot write code."),
        code_record("    return a + b", starter_code="def add(a, b):\n    pass\n"),
    ]
    judged = judge_records(records, config, num_workers=2)
    assert [(row["execution_status"], row["symbolic_correct"]) for row in judged] == [
        (PASSED, True),
        (FAILED, False),
        (NO_CODE, False),
        (PASSED, True),
    ]
    assert judged[0]["predicted_answer"] == "def add(a, b):\n    return a + b"
    assert judged[1]["execution_error"] == "AssertionError"
    assert (judged[2]["predicted_answer"], judged[2]["execution_error"]) == (None, None)
    with pytest.raises(
        SnakeskillsError, match="record 'q' has no tests: judge.extraction code judges a code benchmark"
    ):
        judge_records([{"id": "q", "generation": "x = 1\ny = 2"}], config, num_workers=1)
    with pytest.raises(SnakeskillsError, match="judged by running their tests"):
        judge_verdicts([("3", "3")], config, num_workers=1)


def test_sft_keeps_passing_programs_of_code_rows(tmp_path):
    rows = [
        {**code_record("```python\ndef add(a, b):\n    return a + b\n```"), "symbolic_correct": True},
        {**code_record("```python\ndef add(a, b):\n    return 0\n```"), "symbolic_correct": False},
    ]
    write_jsonl(
        tmp_path / "judged.jsonl", [{**row, "finish_reason": "stop", "num_generated_tokens": 9} for row in rows]
    )
    prompt = resolved_prompt(template="code")
    filters = {"correct_only": True, "dedup": True, "score": "symbolic_correct", "max_generation_tokens": None}
    filters["max_per_problem"] = None
    records, counts = select_sft_records([tmp_path / "judged.jsonl"], ["base"], [prompt], filters)
    assert counts["kept"] == 1 and "expected_answer" not in records[0]
    assert records[0]["messages"][-1]["content"].startswith("```python\ndef add(a, b):\n    return a + b")


# ---------------------------------------------------------------- preparing


def code_spec(path, **code) -> dict:
    return {
        "source": "jsonl",
        "jsonl": {"paths": {"test": str(path)}},
        "field_map": {"id": "uid", "problem": "task"},
        "code": {"tests": "asserts", **code},
    }


def prepared(tmp_path, rows=CODE_ROWS, **code) -> list[dict]:
    write_jsonl(tmp_path / "code.jsonl", rows)
    return prepare_split("mycode", resolve_benchmark_spec("mycode", code_spec(tmp_path / "code.jsonl", **code)), "test")


def test_a_code_row_gets_its_tests_starter_and_reference(tmp_path):
    row = prepared(tmp_path, setup="setup", starter="stub", reference="solution", show_tests=True)[0]
    assert list(row)[:2] == ["id", "problem"] and "expected_answer" not in row
    assert row["tests"] == "import math\nassert add(1, 2) == 3\nassert add(-1, 1) == 0\n"
    assert row["problem"] == (
        "Write a function add(a, b) returning the sum.\nYour code should pass these tests:\n\n"
        "assert add(1, 2) == 3\nassert add(-1, 1) == 0"
    )
    assert (row["starter_code"], row["reference_solution"]) == (CODE_ROWS[0]["stub"], CODE_ROWS[0]["solution"])


def test_a_run_line_reads_the_rows_columns(tmp_path):
    rows = [{**CODE_ROWS[0], "asserts": "def check(candidate):\n    assert candidate(2, 2) == 4\n"}]
    row = prepared(tmp_path, rows, run="check({name})", reference="solution")[0]
    assert row["tests"].endswith("assert candidate(2, 2) == 4\ncheck(add)\n")


@pytest.mark.parametrize(
    ("code", "rows", "message"),
    [
        (
            {"tests": "task", "reference": "solution"},
            CODE_ROWS,
            r"1 of 1 reference solutions fail their own tests \(row p1: failed, SyntaxError: invalid syntax\)\. Check "
            r"benchmarks\.mycode\.code \(tests or cases, setup, run, starter read the right columns\)",
        ),
        (
            {"tests": "missing"},
            CODE_ROWS,
            r"code\.jsonl: row 1: config key benchmarks\.mycode\.code\.tests names column 'missing', which the row "
            r"lacks",
        ),
        ({}, [{**CODE_ROWS[0], "asserts": []}], r"row 1: config key benchmarks\.mycode\.code\.tests names column "),
        ({"run": "check({entry_point})"}, CODE_ROWS, r"code\.run \{entry_point\} names column 'entry_point'"),
        ({"run": "check({0})"}, CODE_ROWS, r"config key benchmarks\.mycode\.code\.run: \{0\} is not a column name"),
        (
            {"run": "check({name"},
            CODE_ROWS,
            r"config key benchmarks\.mycode\.code\.run: 'check\(\{name' does not parse",
        ),
        ({"setup": "asserts", "tests": "uid"}, [{**CODE_ROWS[0], "uid": 7}], r"code\.tests reads a int, not code"),
    ],
)
def test_bad_code_data_stops_preparing_naming_the_key(tmp_path, code, rows, message):
    if "tests" not in code:
        code = {"tests": "asserts", **code}
    write_jsonl(tmp_path / "code.jsonl", rows)
    spec = {**code_spec(tmp_path / "code.jsonl"), "code": code}
    with pytest.raises(SnakeskillsError, match=message):
        prepare_split("mycode", resolve_benchmark_spec("mycode", spec), "test")


def test_a_failing_reference_is_kept_when_the_check_is_off(tmp_path):
    rows = [{**CODE_ROWS[0], "solution": "def add(a, b):\n    return 0"}]
    with pytest.raises(SnakeskillsError, match="fail their own tests"):
        prepared(tmp_path, rows, reference="solution")
    assert prepared(tmp_path, rows, reference="solution", check_reference=False)[0]["reference_solution"]


def test_code_and_multiple_choice_exclude_each_other_and_old_specs_keep_their_params(tmp_path):
    spec = {
        **code_spec(tmp_path / "c.jsonl"),
        "multiple_choice": {"options": "a", "correct": {"column": "b", "is": "index"}},
    }
    with pytest.raises(SnakeskillsError, match=r"config key benchmarks\.x\.code: a benchmark is a code benchmark or"):
        resolve_benchmark_spec("x", spec)
    math_spec = {"source": "jsonl", "jsonl": {"paths": {}}, "code": None, "multiple_choice": None, "prompt": {}}
    assert preparing_spec(math_spec) == {"source": "jsonl", "jsonl": {"paths": {}}}, (
        "specs without code prepare with the params earlier runs were made with"
    )


# ---------------------------------------------------------------- programs reading standard input (code.cases)

DOUBLE = "n = int(input())\nprint(2 * n)\n"


def cases_check(program: str, *cases: tuple[str, str]) -> ProgramCheck:
    return ProgramCheck(program, tuple(cases))


@pytest.mark.parametrize(
    ("actual", "expected", "same"),
    [
        ("1 2\n3\n", "1 2 3", True),  # whitespace and line breaks aside
        ("  7\n\n", "7\n", True),
        ("0.5000001\n", "0.5", True),  # numbers within 1e-6
        ("1.0", "1", True),
        ("0.51", "0.5", False),
        ("1 2", "1", False),
        ("Yes", "YES", False),
        ("", "", True),
        ("nan", "nan", True),
    ],
)
def test_output_matches_token_by_token(actual, expected, same):
    assert outputs_match(actual, expected) is same


def test_a_stdin_program_runs_once_per_case_and_the_first_failing_case_is_named():
    passing = run_check(cases_check(DOUBLE, ("3\n", "6\n"), ("-4", "-8")), **LIMITS)
    assert passing.status == PASSED
    wrong = run_check(cases_check(DOUBLE, ("3\n", "6\n"), ("4\n", "9\n"), ("5\n", "0\n")), **LIMITS)
    assert (wrong.status, wrong.error) == (FAILED, "case 2 of 3: wrong output (expected '9', got '8')")
    crash = run_check(cases_check(DOUBLE, ("3\n", "6\n"), ("x\n", "0\n")), **LIMITS)
    assert crash.error == "case 2 of 2: ValueError: invalid literal for int() with base 10: 'x'"
    stuck = run_check(cases_check("import time\ntime.sleep(60)\n", ("1\n", "1\n")), **{**LIMITS, "timeout_seconds": 1})
    assert (stuck.status, stuck.error) == (TIMED_OUT, "case 1 of 1: ran past 1 s")


def test_a_program_printing_without_end_is_stopped_by_the_output_file_limit():
    """A case's output goes to a file in the run's folder, under the 16 MB file limit: a program that prints
    forever fails at the limit (Python ignores SIGXFSZ, so its write raises) long before the wall clock, and the
    judge never holds its output."""
    started = time.monotonic()
    flood = run_check(
        cases_check("while True:\n    print('x' * 4096)\n", ("", "x")), **{**LIMITS, "timeout_seconds": 60}
    )
    assert (flood.status, flood.error) == (FAILED, "case 1 of 1: OSError: [Errno 27] File too large")
    assert time.monotonic() - started < 30


def test_each_case_runs_in_a_fresh_folder():
    """A program that leaves a file behind finds none in its next case: each case starts in a new folder."""
    marker = "import os\nprint('seen' if os.path.exists('marker') else 'fresh')\nopen('marker', 'w').write(input())\n"
    check = cases_check(marker, ("1", "fresh"), ("2", "fresh"), ("3", "fresh"))
    assert run_check(check, **LIMITS).status == PASSED


def test_an_answer_after_a_stub_without_a_body():
    """APPS' call-based starters end inside the method (``def f(self, x):`` and its indentation): a whole class
    replaces the stub, and a body, indented or not, continues it. HumanEval's stubs end with a docstring."""
    stub = "class Solution:\n    def twice(self, x):\n        "
    tests = "assert Solution().twice(4) == 8\n"
    whole = "class Solution:\n    def twice(self, x):\n        return 2 * x"
    for answer in (whole, "return 2 * x", "        return 2 * x"):
        assert run(program_under_test(answer, starter_code=stub, tests=tests)).status == PASSED, answer
    docstring_stub = 'def twice(x):\n    """Double."""\n'
    assert continued("return 2 * x", docstring_stub) == 'def twice(x):\n    """Double."""\n    return 2 * x'


def apps_spec(folder: Path, **code) -> dict:
    """APPS from its repository's JSONL files, as the README configures it."""
    return {
        "source": "jsonl",
        "jsonl": {"paths": {"test": str(folder / "test.jsonl")}},
        "field_map": {"id": "problem_id", "problem": "question"},
        "code": {
            "cases": "input_output",
            "starter": "starter_code",
            "reference": "solutions",
            "imports": "from typing import List",
            **code,
        },
        "prompt": {"template": "code-stdin"},
        "judge": {"extraction": "code", "timeout_seconds": 10},
    }


def test_apps_rows_become_stdin_cases_or_a_call_test(tmp_path):
    """APPS' JSON-text columns: a stdin problem's input_output becomes its test_cases; a call-based one (fn_name)
    call cases (the function, each call's arguments and expected value), whose values the program reports and the
    judge compares outside the sandbox; the first of its solutions is the reference, and each reference passed its
    own cases while preparing (a wrong key would have stopped it)."""
    from dataset_fixtures import APPS_TEST, write_apps

    rows = prepare_split("apps", resolve_benchmark_spec("apps", apps_spec(write_apps(tmp_path / "apps"))), "test")
    assert [row["id"] for row in rows] == ["4001", "4002", "4003"]
    assert rows[0]["test_cases"] == [
        {"input": "2 3\n", "output": "5\n"},
        {"input": "10 -4\n", "output": "6\n"},
        {"input": "0 0\n", "output": "0\n"},
    ]
    assert "tests" not in rows[0] and "expected_answer" not in rows[0]
    assert "input_output" not in rows[0] and "solutions" not in rows[0], "what the code keys read is in the fields"
    assert rows[0]["difficulty"] == "introductory", "the other source columns are kept"
    assert rows[0]["reference_solution"] == json.loads(APPS_TEST[0]["solutions"])[0]
    assert "test_cases" not in rows[2] and "tests" not in rows[2]
    assert rows[2]["call_cases"]["function"] == "sumEven" and len(rows[2]["call_cases"]["expected"]) == 3
    assert rows[2]["imports"] == "from typing import List"

    def judged(answer: str, row: dict) -> tuple[str, str | None]:
        outcome = run_check(row_check(answer, row), **LIMITS)
        return outcome.status, outcome.error

    assert judged("print(sum(map(int, input().split())))", rows[0]) == (PASSED, None)
    assert judged("print(5)", rows[0]) == (FAILED, "case 2 of 3: wrong output (expected '6', got '5')")
    body = "return sum(x for x in nums if x % 2 == 0)"  # continues the starter, whose List the imports give
    assert judged(body, rows[2]) == (PASSED, None)
    wrong = "def sumEven(nums):\n    return sum(nums)"  # a top-level function is called when there is no class
    assert judged(wrong, rows[2]) == (
        FAILED,
        "case 1 of 3: returned 10, expected [6]",
    )
    liar = "class Equal:\n    def __eq__(self, other):\n        return True\n\n\ndef sumEven(nums):\n    return Equal()"
    status, error = judged(liar, rows[2])
    assert status == FAILED and error.startswith("TypeError: Object of type Equal is not JSON serializable"), (
        "an object whose __eq__ always agrees is not a value: it cannot pass"
    )
    early = "import sys\n\n\ndef sumEven(nums):\n    sys.exit(0)"
    assert judged(early, rows[2]) == (FAILED, "exited before its calls finished (status 0 without the harness's proof)")
    shown = prepare_split(
        "apps", resolve_benchmark_spec("apps", apps_spec(tmp_path / "apps", show_tests=True)), "test"
    )[1]["problem"]
    assert shown.endswith(
        "Your program should give these outputs for these inputs:\n\nInput:\n4\n1 7 3 7\nOutput:\n7\n2\n\n"
        "Input:\n1\n-5\nOutput:\n-5\n1"
    )


@pytest.mark.parametrize(
    ("layout", "cases"),
    [
        ("livecodebench", json.dumps([{"input": "3\n", "output": "6\n", "testtype": "stdin"}])),
        ("codecontests", {"input": ["3\n"], "output": ["6\n"]}),
        ("apps outputs as lines", json.dumps({"inputs": ["3\n"], "outputs": [["6"]]})),
    ],
)
def test_other_layouts_of_cases(tmp_path, layout, cases):
    row = {"uid": "d", "task": "Double n.", "cases": cases, "solution": DOUBLE}
    write_jsonl(tmp_path / "c.jsonl", [row])
    spec = {**code_spec(tmp_path / "c.jsonl"), "code": {"cases": "cases", "reference": "solution"}}
    (prepared,) = prepare_split("d", resolve_benchmark_spec("d", spec), "test")
    assert [case["input"] for case in prepared["test_cases"]] == ["3\n"], layout
    assert outputs_match(prepared["test_cases"][0]["output"], "6")


@pytest.mark.parametrize(
    ("code", "cases", "message"),
    [
        (
            {"cases": "cases", "tests": "asserts"},
            [],
            r"config key benchmarks\.d\.code: name the column .* one of the two",
        ),
        ({"cases": "cases", "setup": "setup"}, [], r"config key benchmarks\.d\.code\.setup: a benchmark with "),
        (
            {"cases": "cases"},
            '[{"input": "1", "output": "2", "testtype": "functional"}]',
            r"row 1: config key benchmarks\.d\.code\.cases: a case of testtype 'functional' calls a function",
        ),
        ({"cases": "cases"}, '{"inputs": ["1"], "outputs": []}', r"1 inputs but 0 outputs"),
        ({"cases": "cases"}, '{"inputs": [1]', r"code\.cases reads JSON text that does not parse"),
        ({"cases": "cases"}, {"stdin": ["1"]}, r"needs lists 'inputs' and 'outputs' \(APPS\) .* it has keys stdin"),
        ({"cases": "cases"}, [], r"code\.cases: the row has no cases"),
        ({"cases": "cases"}, "3", r"code\.cases reads a str, not input/output cases"),
        (
            {"cases": "cases", "reference": "solution"},
            [{"input": "3", "output": "7"}],
            r"1 of 1 reference solutions fail their own tests \(row d: failed, case 1 of 1: wrong output \(expected "
            r"'7', got '6'\)\)",
        ),
    ],
)
def test_bad_cases_stop_preparing_naming_the_key(tmp_path, code, cases, message):
    row = {"uid": "d", "task": "Double n.", "cases": cases, "asserts": [], "setup": "", "solution": DOUBLE}
    write_jsonl(tmp_path / "c.jsonl", [row])
    spec = {**code_spec(tmp_path / "c.jsonl"), "code": code}
    with pytest.raises(SnakeskillsError, match=message):
        prepare_split("d", resolve_benchmark_spec("d", spec), "test")


def test_judged_stdin_records_and_their_sft_examples(tmp_path):
    config = rule_judge(LIMITS, extraction="code")
    row = {"id": "d", "problem": "Double n.", "test_cases": [{"input": "3\n", "output": "6\n"}]}
    records = [
        {**row, "generation": f"```python\n{DOUBLE}```"},
        {**row, "generation": "```python\nprint(input())\n```"},
    ]
    judged = judge_records(records, config, num_workers=2)
    assert [(r["execution_status"], r["symbolic_correct"]) for r in judged] == [(PASSED, True), (FAILED, False)]
    assert judged[1]["execution_error"] == "case 1 of 1: wrong output (expected '6', got '3')"
    write_jsonl(tmp_path / "judged.jsonl", [{**r, "finish_reason": "stop", "num_generated_tokens": 9} for r in judged])
    filters = {"correct_only": True, "dedup": True, "score": "symbolic_correct", "max_generation_tokens": None}
    prompt = resolved_prompt(template="code-stdin")
    kept, _ = select_sft_records([tmp_path / "judged.jsonl"], ["base"], [prompt], {**filters, "max_per_problem": None})
    assert [record["messages"][-1]["content"] for record in kept] == [records[0]["generation"]]
    assert "reads the input from standard input" in kept[0]["messages"][-2]["content"]


# ---------------------------------------------------------------- the plan


def code_config(**humaneval) -> dict:
    """The default (arithmetic, tiny model) with a HumanEval eval benchmark beside it."""
    config = copy.deepcopy(DEFAULT)
    config["benchmarks"]["humaneval"] = {"preset": "humaneval", "hf": {"path": "/data/humaneval"}, **humaneval}
    config["benchmarks"]["mbpp"] = {"preset": "mbpp", "hf": {"path": "/data/mbpp"}}
    return config


def test_a_code_benchmark_is_asked_with_the_code_prompt_and_judged_by_its_tests():
    config = checked_config(code_config(judge={"timeout_seconds": 3}))
    plan = Plan(config, Layout.under("results/x"))
    assert plan.generation_job("base", "humaneval", "test")["prompt"]["template"] == "code"
    assert benchmark_judge(config, "humaneval") == {
        "extraction": "code",
        "timeout_seconds": 3,
        "memory_limit_mb": 4096,
        "sandbox": "bwrap",
    }
    assert benchmark_judge(config, "mbpp")["timeout_seconds"] == 10, "the preset's own limit"
    config["judge"]["llm"] = {"stand-in": True}
    assert (llm_judged(config, "humaneval"), llm_judged(config, "arithmetic")) == (False, True), (
        "the LLM judge reads answers, not programs: a code benchmark's chunks skip it"
    )


def test_a_stdin_benchmark_is_checked_when_the_plan_is_made(tmp_path):
    """The schema takes code.cases and code.imports in place of tests; cases with setup, or both tests and cases,
    stop the plan (not the prepare job) naming the key."""
    config = copy.deepcopy(DEFAULT)
    config["benchmarks"]["apps"] = apps_spec(tmp_path)
    plan = Plan(checked_config(config), Layout.under("results/x"))
    assert plan.generation_job("base", "apps", "test")["prompt"]["template"] == "code-stdin"
    assert benchmark_judge(config, "apps") == {
        "extraction": "code",
        "timeout_seconds": 10,
        "memory_limit_mb": 4096,
        "sandbox": "bwrap",
    }
    for mistake, message in (
        ({"setup": "imports_column"}, r"config key benchmarks\.apps\.code\.setup: a benchmark with"),
        ({"tests": "asserts"}, r"config key benchmarks\.apps\.code: name the column .* one of the two"),
    ):
        config = copy.deepcopy(DEFAULT)
        config["benchmarks"]["apps"] = apps_spec(tmp_path, **mistake)
        with pytest.raises(SnakeskillsError, match=message):
            checked_config(config)


def test_the_llm_judge_reads_the_answer_benchmarks_chunks_and_code_chunks_skip_it(tmp_path, tiny_checkpoint):
    """A dry run of the default with HumanEval beside arithmetic and an LLM judge: one llm_judge job per arithmetic
    chunk, none for HumanEval, whose merged seed files take the rule-based judge's chunks."""
    from dataset_fixtures import write_humaneval

    config = copy.deepcopy(DEFAULT)
    config["benchmarks"]["humaneval"] = {"preset": "humaneval", "hf": {"path": str(write_humaneval(tmp_path / "he"))}}
    config["judge"]["llm"] = {
        "model": {"path": str(tiny_checkpoint)},
        "prompt": {"user": "{expected_answer}?{predicted_answer}:"},
        "generation": {"backend": "hf", "sampling": {"max_new_tokens": 4}},
    }
    jobs = planned_jobs(tmp_path, write_config(tmp_path / "config.yaml", config))
    llm_judged_benchmarks = {job["wildcards"]["benchmark"] for job in jobs if job["rule"] == "llm_judge"}
    assert llm_judged_benchmarks == {"arithmetic"}
    merged = {
        benchmark: [
            path
            for job in jobs
            if job["rule"] == "merge_judged" and job["wildcards"]["benchmark"] == benchmark
            for path in job["input"]
        ]
        for benchmark in ("arithmetic", "humaneval")
    }
    assert merged["arithmetic"] and all("judge-llm/" in path for path in merged["arithmetic"])
    assert merged["humaneval"] and not any("judge-llm/" in path for path in merged["humaneval"])
    assert any(job["rule"] == "judge" and job["wildcards"]["benchmark"] == "humaneval" for job in jobs)


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (
            lambda config: config["benchmarks"]["humaneval"].update(judge={"extraction": "boxed"}),
            r"benchmarks\.humaneval\.judge\.extraction: benchmark 'humaneval' is a code benchmark .* set "
            r"benchmarks\.humaneval\.judge: \{extraction: code\}",
        ),
        (
            lambda config: config["benchmarks"]["arithmetic"].update(judge={"extraction": "code"}),
            r"config key benchmarks\.arithmetic\.judge\.extraction is code .* benchmark 'arithmetic' has no tests",
        ),
        (
            lambda config: config.update(
                train_benchmarks=["arithmetic", "mbpp"], synthesis={"writer": "student", "label": {"solver": "student"}}
            ),
            r"config key synthesis: train benchmark 'mbpp' is a code benchmark",
        ),
        (
            lambda config: config["tiny_model"].update(bootstrap_benchmark="mbpp"),
            r"config key tiny_model\.bootstrap_benchmark names a code benchmark",
        ),
        (
            lambda config: (
                config.update(train_benchmarks=["mbpp"]),
                config["sft"].update(filters={"score": "both"}),
                config["judge"].update(
                    llm={
                        "model": {"path": "judge-model"},
                        "generation": {"sampling": {"max_new_tokens": 4}},
                        "prompt": {"user": "{problem} {generation}"},
                    }
                ),
            ),
            r"config key sft\.filters\.score is 'both', but train benchmark 'mbpp' is a code benchmark",
        ),
    ],
)
def test_code_mistakes_stop_the_plan_naming_the_key(mutate, message):
    config = code_config()
    mutate(config)
    with pytest.raises(SnakeskillsError, match=message):
        checked_config(config)


# ---------------------------------------------------------------- HumanEval and MBPP on the real SmolLM2


@pytest.mark.slow
def test_a_real_model_writes_programs_that_the_tests_judge(tmp_path, smollm2):
    """SmolLM2-135M-Instruct on HumanEval's and MBPP's layouts (the presets on local copies) and APPS' JSONL
    (stdin cases and a call-based row), through Snakemake: the code question in the model's chat template, each
    sample's program run against its tests or cases (HumanEval's and APPS' test splits, MBPP's train split), metrics,
    and the SFT data of a round built from the train programs that passed."""
    from dataset_fixtures import APPS_TEST, write_apps, write_humaneval, write_mbpp

    write_humaneval(tmp_path / "humaneval")
    write_mbpp(tmp_path / "mbpp")
    config = yaml.safe_load((DEFAULT_CONFIG.parent / "examples/smollm2-135m-instruct-arithmetic.yaml").read_text())
    config["model"]["path"] = str(smollm2)
    config["benchmarks"] = {
        "humaneval": {"preset": "humaneval", "hf": {"path": str(tmp_path / "humaneval")}},
        "mbpp": {"preset": "mbpp", "hf": {"path": str(tmp_path / "mbpp")}},
        "apps": apps_spec(write_apps(tmp_path / "apps")),
    }
    config["train_benchmarks"] = ["mbpp"]
    config["generation"]["sampling"]["max_new_tokens"] = 128
    config.update(num_seeds=1, train_num_seeds=2)
    configfile = write_config(tmp_path / "code.yaml", config)
    results = tmp_path / "results" / config["experiment"]
    model = "smollm2-135m-instruct"
    targets = [
        f"results/{config['experiment']}/metrics/{model}/humaneval/test/metrics.json",
        f"results/{config['experiment']}/metrics/{model}/apps/test/metrics.json",
        f"results/{config['experiment']}/sft/sft-round1/data.jsonl",  # MBPP's train split, 2 seeds
    ]
    process = run_snakemake(tmp_path, "--cores", "2", *targets, configfile=configfile, timeout=900)
    assert process.returncode == 0, process.stdout[-4000:] + process.stderr[-4000:]

    log = next((results / "logs/generate" / model / "humaneval/test").rglob("*.log")).read_text()
    first_input = json.loads(re.search(r"model input of the first row .*?: (.*)$", log, re.M).group(1))
    assert first_input.startswith("<|im_start|>system\n") and first_input.endswith("<|im_start|>assistant\n")
    assert f"one ```python code block.\n\n{HUMANEVAL_TEST[0]['prompt']}<|im_end|>" in first_input
    statuses = []
    judged = {
        split: [
            row for seed in seeds for row in read_jsonl(results / "judge" / model / f"{split}/output-rs{seed}.jsonl")
        ]
        for split, seeds in (("humaneval/test", (0,)), ("mbpp/train", (0, 1)), ("apps/test", (0,)))
    }
    assert len(judged["humaneval/test"]) == len(HUMANEVAL_TEST) and len(judged["mbpp/train"]) == 2 * len(MBPP_TRAIN)
    assert [row["id"] for row in judged["apps/test"]] == [str(row["problem_id"]) for row in APPS_TEST]
    apps_log = next((results / "logs/generate" / model / "apps/test").rglob("*.log")).read_text()
    assert "reads the input from standard input" in apps_log, "APPS is asked with the code-stdin template"
    for row in judged["humaneval/test"] + judged["mbpp/train"] + judged["apps/test"]:
        statuses.append(row["execution_status"])
        if row["predicted_answer"] is None:
            assert (row["execution_status"], row["symbolic_correct"]) == (NO_CODE, False)
            continue
        rerun = run_check(row_check(row["predicted_answer"], row), **LIMITS)
        assert (row["execution_status"], row["symbolic_correct"]) == (rerun.status, rerun.passed), row["id"]
    metrics = json.loads((results / "metrics" / model / "humaneval/test/metrics.json").read_text())["humaneval"]
    assert metrics["pass@1"]["num_entries"] == len(HUMANEVAL_TEST)
    assert PASSED in statuses, "the model solves HumanEval/53 (add) as sampled here"
    sft_rows = read_jsonl(results / "sft/sft-round1/data.jsonl")
    assert sft_rows, "a train program passed (sft_data stops when none does)"
    assert {row["id"] for row in sft_rows} <= {row["id"] for row in judged["mbpp/train"] if row["symbolic_correct"]}
    for row in sft_rows:
        assert "Your code should pass these tests:" in row["messages"][-2]["content"]
