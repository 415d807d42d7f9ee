"""Code benchmark rows: a row's ``tests`` program (or its input/output ``test_cases``, in the layouts of APPS,
CodeContests and LiveCodeBench), ``starter_code`` and ``reference_solution``, and the reference solutions run
against their own tests while preparing."""

from __future__ import annotations

import json

from snakeskills.data.specs import CODE_COLUMN_KEYS, run_columns
from snakeskills.errors import SnakeskillsError

CODE_FIELDS = (
    "id",
    "problem",
    "tests",
    "test_cases",
    "call_cases",
    "imports",
    "starter_code",
    "reference_solution",
)


def code_columns(code: dict, key: str) -> dict[str, str]:
    """The columns a ``code`` section reads, by the config key that names them (``key`` is the section's)."""
    named = {f"{key}.{name}": code[name] for name in CODE_COLUMN_KEYS if code.get(name) is not None}
    if code.get("run") is not None:
        named.update({f"{key}.run {{{column}}}": column for column in run_columns(code["run"], f"{key}.run")})
    return named


def code_text(value, *, name: str, where: str) -> str:
    """A code column's value as program text: a string, or a list of lines (MBPP's test_list)."""
    if value is None:
        return ""
    if isinstance(value, list | tuple) and all(isinstance(line, str) for line in value):
        return "\n".join(value)
    if isinstance(value, str):
        return value
    raise SnakeskillsError(f"{where}: config key {name} reads a {type(value).__name__}, not code (a string or lines)")


def apply_code(record: dict, code: dict, *, key: str, where: str) -> dict:
    """A code row: ``tests`` (setup, the tests, the run line) or ``test_cases``, ``starter_code`` and
    ``reference_solution`` when the spec names them, and with ``show_tests`` the tests (or the first cases) appended
    to ``problem``."""
    key = f"{key}.code"
    if record.get("problem") is None:
        raise SnakeskillsError(f"{where}: no problem (map one with field_map.problem)")
    for config_key, column in code_columns(code, key).items():  # a JSONL row's columns are only known here
        if column not in record:
            raise SnakeskillsError(f"{where}: config key {config_key} names column {column!r}, which the row lacks")
    if code.get("cases") is not None:
        prepared = {**record, **case_fields(record[code["cases"]], name=f"{key}.cases", where=where)}
        shown = "\n\n".join(
            f"Input:\n{case['input'].rstrip()}\nOutput:\n{case['output'].rstrip()}"
            for case in prepared.get("test_cases", [])[:SHOWN_CASES]
        )  # a call-based row's test program is not shown
        shown_heading = "Your program should give these outputs for these inputs:"
    else:
        tests = code_text(record[code["tests"]], name=f"{key}.tests", where=where)
        if not tests.strip():
            raise SnakeskillsError(
                f"{where}: config key {key}.tests names column {code['tests']!r}, which is empty here"
            )
        parts = []
        if code.get("setup") is not None:
            parts.append(code_text(record[code["setup"]], name=f"{key}.setup", where=where))
        parts.append(tests)
        if code.get("run") is not None:
            parts.append(code["run"].format_map(record))
        prepared = {**record, "tests": "\n".join(part.rstrip("\n") for part in parts if part.strip()) + "\n"}
        shown, shown_heading = tests.strip(), "Your code should pass these tests:"
    if code.get("show_tests") and shown:
        prepared["problem"] = f"{record['problem']}\n{shown_heading}\n\n{shown}"
    if code.get("imports") is not None:
        prepared["imports"] = code["imports"]
    if code.get("starter") is not None:
        prepared["starter_code"] = code_text(record[code["starter"]], name=f"{key}.starter", where=where)
    if code.get("reference") is not None:
        reference = reference_solution(record[code["reference"]], name=f"{key}.reference", where=where)
        if reference is not None:
            prepared["reference_solution"] = reference
    # the columns read above now live in the row's own fields; every sample of the row carries the row, and APPS'
    # solutions and cases run to megabytes per problem
    for name in CODE_COLUMN_KEYS:
        if code.get(name) is not None and code[name] not in CODE_FIELDS:
            prepared.pop(code[name], None)
    return prepared


SHOWN_CASES = 2  # show_tests with cases: how many cases the problem shows


def _decoded(value, *, name: str, where: str):
    """A column value that may be JSON text (APPS keeps its cases and solutions so) as its decoded value."""
    if isinstance(value, str) and value.lstrip()[:1] in ("[", "{"):
        try:
            return json.loads(value)
        except json.JSONDecodeError as error:
            raise SnakeskillsError(
                f"{where}: config key {name} reads JSON text that does not parse ({error})"
            ) from None
    return value


def _case_text(value, *, name: str, where: str) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(line, str) for line in value):  # some APPS outputs are lines
        return "\n".join(value) + "\n"
    raise SnakeskillsError(
        f"{where}: config key {name}: a case's input or output is a {type(value).__name__}, not text"
    )


def case_fields(value, *, name: str, where: str) -> dict:
    """The fields a ``cases`` column's value gives its row: ``test_cases`` (``[{"input", "output"}]``) from a
    list of ``{input, output}`` objects (LiveCodeBench), or ``{inputs: [...], outputs: [...]}`` (APPS) /
    ``{input: [...], output: [...]}`` (CodeContests), each possibly JSON text; or, for APPS' call-based cases (with
    ``fn_name``: each input is the arguments of a call), ``call_cases`` (the function, each call's arguments and
    expected value). LiveCodeBench's functional cases are refused (their function's name is not in the cases)."""
    from snakeskills.judging.code_execution import call_cases

    value = _decoded(value, name=name, where=where)
    function_name = None
    if isinstance(value, dict):
        layouts = (("inputs", "outputs"), ("input", "output"))
        pair = next(((i, o) for i, o in layouts if i in value and o in value), None)
        if pair is None or not isinstance(value[pair[0]], list) or not isinstance(value[pair[1]], list):
            raise SnakeskillsError(
                f"{where}: config key {name}: an object of cases needs lists 'inputs' and 'outputs' (APPS) or "
                f"'input' and 'output' (CodeContests); it has keys {', '.join(map(str, value)) or 'none'}"
            )
        inputs, outputs = value[pair[0]], value[pair[1]]
        if len(inputs) != len(outputs):
            raise SnakeskillsError(
                f"{where}: config key {name}: {len(inputs)} inputs but {len(outputs)} outputs; each input needs "
                "its output"
            )
        pairs = list(zip(inputs, outputs, strict=True))
        function_name = value.get("fn_name")
    elif isinstance(value, list):
        pairs = []
        for case in value:
            if not isinstance(case, dict) or "input" not in case or "output" not in case:
                raise SnakeskillsError(
                    f"{where}: config key {name}: a list of cases holds objects with 'input' and 'output'; one is "
                    f"{shortened_repr(case)}"
                )
            if case.get("testtype", "stdin") != "stdin":
                raise SnakeskillsError(
                    f"{where}: config key {name}: a case of testtype {case['testtype']!r} calls a function instead "
                    "of feeding standard input; keep such rows out (LiveCodeBench's functional problems), or write "
                    "their tests as assert statements (code.tests)"
                )
            pairs.append((case["input"], case["output"]))
    else:
        raise SnakeskillsError(
            f"{where}: config key {name} reads a {type(value).__name__}, not input/output cases (a list of "
            "{input, output} objects or an object of inputs and outputs, or their JSON text)"
        )
    if not pairs:
        raise SnakeskillsError(f"{where}: config key {name}: the row has no cases")
    if function_name:
        if not all(isinstance(arguments, list) for arguments, _ in pairs):
            raise SnakeskillsError(
                f"{where}: config key {name}: call-based cases (fn_name {function_name!r}) need each input to be "
                "the list of a call's arguments"
            )
        return {"call_cases": call_cases(str(function_name), *map(list, zip(*pairs, strict=True)))}
    cases = [
        {"input": _case_text(i, name=name, where=where), "output": _case_text(o, name=name, where=where)}
        for i, o in pairs
    ]
    return {"test_cases": cases}


def shortened_repr(value) -> str:
    shown = repr(value)
    return shown if len(shown) <= 80 else shown[:77] + "..."


def reference_solution(value, *, name: str, where: str) -> str | None:
    """A ``reference`` column's value: one solution, or a list of solutions (or its JSON text, as APPS'
    ``solutions``), of which the first is the reference; ``None`` when the list is empty (APPS lacks some)."""
    if isinstance(value, str) and value.lstrip().startswith("["):
        value = _decoded(value, name=name, where=where)
    if isinstance(value, list):
        if not all(isinstance(solution, str) for solution in value):
            raise SnakeskillsError(f"{where}: config key {name} reads a list that is not of solutions (strings)")
        return value[0] if value else None
    return code_text(value, name=name, where=where) or None


def check_reference_solutions(records: list[dict], *, key: str, where: str, threads: int) -> None:
    """Each row's reference solution must pass its own tests (run as answers are): a tests, setup or run key
    reading the wrong column, or a broken row, stops preparing instead of scoring every answer wrong. They come
    with the dataset, not from a model: they run in the sandbox where bubblewrap can start, else without one."""
    from snakeskills.judging.code_execution import row_check, run_many
    from snakeskills.sandbox.containment import sandbox_problem

    checked = [record for record in records if record.get("reference_solution")]
    checks = [row_check(record["reference_solution"], record) for record in checked]
    sandbox = "bwrap" if sandbox_problem("bwrap") is None else "none"
    runs = run_many(checks, num_workers=threads, timeout_seconds=30, memory_limit_mb=None, sandbox=sandbox)
    failed = [(record["id"], run) for record, run in zip(checked, runs, strict=True) if not run.passed]
    if failed:
        shown = "; ".join(f"row {row_id}: {run.status}, {run.error}" for row_id, run in failed[:3])
        raise SnakeskillsError(
            f"{where}: {len(failed)} of {len(checked)} reference solutions fail their own tests ({shown}). Check "
            f"{key}.code (tests or cases, setup, run, starter read the right columns), or set "
            f"{key}.code.check_reference: false to prepare the rows as they are"
        )
