"""prepare_data: turn a benchmark spec into ``data/{benchmark}/{split}.jsonl``.

A spec (``config["benchmarks"][name]``) names a ``source``:

- ``synthetic``: the built-in arithmetic skill;
- ``jsonl`` / ``parquet``: a local file per split (``paths: {split: file}``);
- ``hf``: a Hugging Face dataset, loaded with ``datasets.load_dataset(path, name, split=..., revision=...)``
  from the Hub (through the local cache) or from a local folder in the Hub's repository layout.

``field_map`` then builds NeMo-Skills' fields from the source columns: ``{problem: question}`` copies a
column; ``{expected_answer: {column: answer, regex: '####\\s*(.+?)\\s*$', remove: [","]}}`` extracts the
regex's first group (or whole match) and deletes the listed substrings. Source columns are kept.

``multiple_choice`` turns a multiple-choice row into NeMo-Skills' form: the options (one list column, or one
column per option), optionally shuffled with a seed, are lettered A, B, ... and appended to ``problem``
(``options`` holds that block, ``option_letters`` "A, B, C, D", and each letter its option's text);
``expected_answer`` is the correct option's letter (``correct``: its index, letter or text in a column).

``code`` makes a code benchmark: ``tests`` (a column holding a test program, or a list of test statements), with
optional ``setup`` code before them and a ``run`` line after them (formatted with the row's columns:
``check({entry_point})``), becomes the row's ``tests`` program; ``starter`` the ``starter_code`` an answer
continues; ``reference`` the ``reference_solution``, which is run against the tests while preparing
(``check_reference``). In place of ``tests``, ``cases`` names a column of input/output cases (APPS'
``input_output``, LiveCodeBench's ``public_test_cases``, CodeContests' tests; JSON text or its value), prepared as
``test_cases``: the answer is then a program reading standard input, run once per case. Code rows need no
``expected_answer``: their answers are judged by running the tests. The columns a ``code`` section reads are
left out of its rows (their content is in those fields; every sample carries its row).

Every prepared row has a stable, unique ``id`` (the ``id`` field if the source or ``field_map`` gives
one, else ``{benchmark}-{split}-{index:06d}``), a ``problem`` and an ``expected_answer`` (a string).

``preset: <name>`` loads a spec shipped in ``snakeskills/data/benchmarks/<name>.yaml``; keys given
next to it override the preset's (deep merge). The workflow applies presets at start, before validating
the config (``apply_presets``), then runs ``check_benchmark_specs``.
"""

from __future__ import annotations

import copy
import json
import numbers
import os
import random
import re
import string
from pathlib import Path

import yaml

from snakeskills.data.synthetic import arithmetic_splits
from snakeskills.errors import SnakeskillsError
from snakeskills.io import read_jsonl

REQUIRED_FIELDS = ("problem", "expected_answer")
CODE_COLUMN_KEYS = ("tests", "cases", "setup", "starter", "reference")  # the code keys that name a column
CODE_FIELDS = ("id", "problem", "tests", "test_cases", "imports", "starter_code", "reference_solution")
SOURCES = ("synthetic", "jsonl", "parquet", "hf")
PRESETS_DIR = Path(__file__).resolve().parent / "benchmarks"


# ---------------------------------------------------------------- specs and presets


def known_presets() -> list[str]:
    return sorted(path.stem for path in PRESETS_DIR.glob("*.yaml"))


def load_preset(preset: str) -> dict:
    return yaml.safe_load((PRESETS_DIR / f"{preset}.yaml").read_text(encoding="utf-8"))


def deep_merge(base: dict, override: dict) -> dict:
    """``base`` with ``override``'s keys; nested dicts merge, anything else is replaced."""
    merged = copy.deepcopy(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def apply_preset(benchmark: str, spec):
    """``spec`` on top of its preset (deep merge; ``preset`` is kept); a spec without one is returned as is.

    Runs before schema validation, so that the schema checks (and fills the defaults of) the full spec;
    anything malformed is left for the schema to report.
    """
    if not isinstance(spec, dict) or "preset" not in spec:
        return spec
    preset = spec["preset"]
    if preset not in known_presets():
        raise SnakeskillsError(
            f"config key benchmarks.{benchmark}.preset: unknown preset {preset!r}; "
            f"known presets: {', '.join(known_presets())}"
        )
    return deep_merge(load_preset(preset), spec)


def apply_presets(benchmarks):
    """``config["benchmarks"]`` with every preset applied (see ``apply_preset``)."""
    if not isinstance(benchmarks, dict):
        return benchmarks
    return {benchmark: apply_preset(benchmark, spec) for benchmark, spec in benchmarks.items()}


def resolve_benchmark_spec(benchmark: str, spec: dict) -> dict:
    """The full, checked spec of ``benchmarks.<benchmark>``: its preset (if any) overridden by its own keys."""
    spec = apply_preset(benchmark, spec)
    check_benchmark_spec(benchmark, spec)
    return spec


def check_benchmark_spec(benchmark: str, spec: dict) -> None:
    """Cross-key checks the schema cannot express; each error names the config key at fault."""
    key = f"benchmarks.{benchmark}"
    source = spec.get("source")
    if source not in SOURCES:
        raise SnakeskillsError(f"config key {key}.source: unknown source {source!r}; known: {', '.join(SOURCES)}")
    if source not in spec:
        raise SnakeskillsError(f"config key {key}.{source} is required when source is {source!r}")
    for field, rule in (spec.get("field_map") or {}).items():
        if isinstance(rule, dict) and rule.get("regex") is not None:
            try:
                re.compile(rule["regex"])
            except re.error as error:
                raise SnakeskillsError(f"config key {key}.field_map.{field}.regex: invalid pattern ({error})") from None

    if spec.get("multiple_choice") is not None and "expected_answer" in (spec.get("field_map") or {}):
        raise SnakeskillsError(
            f"config key {key}.field_map.expected_answer: the answer of a multiple-choice benchmark is the letter of "
            f"its correct option ({key}.multiple_choice.correct); remove one of the two"
        )

    code = spec.get("code")
    if code is not None:
        if spec.get("multiple_choice") is not None:
            raise SnakeskillsError(
                f"config key {key}.code: a benchmark is a code benchmark or a multiple-choice one, not both; remove "
                f"{key}.code or {key}.multiple_choice"
            )
        if (code.get("tests") is None) == (code.get("cases") is None):
            raise SnakeskillsError(
                f"config key {key}.code: name the column of each row's tests with {key}.code.tests (a test program "
                f"or test statements) or {key}.code.cases (input/output cases for a program reading stdin), one of "
                "the two"
            )
        if code.get("cases") is not None:
            for name in ("setup", "run"):
                if code.get(name) is not None:
                    raise SnakeskillsError(
                        f"config key {key}.code.{name}: a benchmark with {key}.code.cases runs the answer as a whole "
                        f"program on each case's input; {name} belongs to test programs ({key}.code.tests)"
                    )
        if code.get("run") is not None:
            run_columns(code["run"], f"{key}.code.run")


def run_columns(run: str, key: str) -> list[str]:
    """The columns a ``code.run`` line reads (its ``{column}`` fields); a line that does not parse stops."""
    try:
        fields = [field for _, field, _, _ in string.Formatter().parse(run) if field is not None]
    except ValueError as error:
        raise SnakeskillsError(
            f"config key {key}: {run!r} does not parse ({error}); double literal braces: {{{{ }}}}"
        ) from None
    for field in fields:
        if not field.isidentifier():
            raise SnakeskillsError(f"config key {key}: {{{field}}} is not a column name; name one column in braces")
    return fields


def preparing_spec(spec: dict) -> dict:
    """The part of a benchmark spec that decides its prepared rows (prepare_data's params, so its rerun trigger):
    how the benchmark is asked and judged (``prompt``, ``judge``) is left out, and ``multiple_choice`` and ``code``
    when not set, so that neither those keys nor their defaults rerun preparing and everything after it."""
    return {
        key: value
        for key, value in spec.items()
        if key not in ("prompt", "judge") and not (key in ("multiple_choice", "code") and value is None)
    }


def check_benchmark_specs(benchmarks: dict) -> None:
    for benchmark, spec in benchmarks.items():
        check_benchmark_spec(benchmark, spec)


def declared_splits(spec: dict) -> list[str]:
    """The split names a (resolved) benchmark spec provides."""
    source = spec["source"]
    if source == "synthetic":
        return list(spec["synthetic"]["split_sizes"])
    if source == "hf":
        return list(spec["hf"]["splits"])
    return list(spec[source]["paths"])


def check_splits(benchmarks: dict, required: dict[str, list[tuple[str, str]]]) -> None:
    """Each benchmark must provide the splits the run needs: ``required[benchmark] = [(split, config key)]``."""
    for benchmark, needs in required.items():
        splits = declared_splits(benchmarks[benchmark])
        for split, key in needs:
            if split not in splits:
                raise SnakeskillsError(
                    f"config key {key}: benchmark {benchmark!r} has no split {split!r} "
                    f"(it has: {', '.join(splits)}); see benchmarks.{benchmark}"
                )


def local_source_files(spec: dict, split: str) -> list[str]:
    """Local files one split is read from (Snakemake inputs, so that editing them reruns prepare_data).

    Nothing for ``synthetic`` or a Hub dataset id; every non-hidden file of an ``hf.path`` folder; a
    local-looking ``hf.path`` that does not exist is returned as is, so Snakemake reports it missing.
    """
    source = spec["source"]
    if source in ("jsonl", "parquet"):
        paths = spec[source]["paths"]
        return [paths[split]] if split in paths else []
    if source == "hf":
        path = Path(os.path.expanduser(spec["hf"]["path"]))
        if path.is_dir():
            return sorted(
                str(file)
                for file in path.rglob("*")
                if file.is_file() and not any(part.startswith(".") for part in file.relative_to(path).parts)
            )
        return [str(path)] if looks_local(spec["hf"]["path"]) else []
    return []


def looks_local(path: str) -> bool:
    """A filesystem path rather than a Hub id (``openai/gsm8k``): absolute, or starting with ``.`` or ``~``."""
    return os.path.isabs(path) or path.startswith((".", "~")) or os.path.isdir(os.path.expanduser(path))


# ---------------------------------------------------------------- field map


def field_rule(rule: str | dict) -> dict:
    """``"question"`` or ``{column, regex, remove}`` -> ``{column, regex, remove}``."""
    if isinstance(rule, str):
        return {"column": rule, "regex": None, "remove": []}
    return {"column": rule["column"], "regex": rule.get("regex"), "remove": rule.get("remove") or []}


def field_map_key(key: str, field: str, rule: str | dict) -> str:
    return f"{key}.field_map.{field}" + (".column" if isinstance(rule, dict) else "")


def read_columns(spec: dict, key: str) -> dict[str, str]:
    """Every source column a spec reads, by the config key that names it."""
    named = {field_map_key(key, field, rule): field_rule(rule)["column"] for field, rule in spec["field_map"].items()}
    choice = spec["multiple_choice"]
    if choice is not None:
        options = choice["options"]
        if isinstance(options, str):
            named[f"{key}.multiple_choice.options"] = options
        else:
            named.update({f"{key}.multiple_choice.options[{index}]": column for index, column in enumerate(options)})
        named[f"{key}.multiple_choice.correct.column"] = choice["correct"]["column"]
    if spec["code"] is not None:
        named.update(code_columns(spec["code"], f"{key}.code"))
    return named


def code_columns(code: dict, key: str) -> dict[str, str]:
    """The columns a ``code`` section reads, by the config key that names them (``key`` is the section's)."""
    named = {f"{key}.{name}": code[name] for name in CODE_COLUMN_KEYS if code.get(name) is not None}
    if code.get("run") is not None:
        named.update({f"{key}.run {{{column}}}": column for column in run_columns(code["run"], f"{key}.run")})
    return named


def check_columns(spec: dict, columns: list[str], *, key: str, where: str) -> None:
    """Every column the field map, multiple_choice and code read must exist; checked once, before any row is
    converted."""
    for config_key, column in read_columns(spec, key).items():
        if column not in columns:
            raise SnakeskillsError(
                f"{where}: config key {config_key} names column {column!r}, which the data lacks; its columns are: "
                f"{', '.join(columns)}"
            )


def extract(value, rule: dict, *, key: str, where: str):
    """A column's value, or (with ``regex``/``remove``) the string extracted from it."""
    if value is None or (rule["regex"] is None and not rule["remove"]):
        return value
    text = str(value)
    if rule["regex"] is not None:
        match = re.search(rule["regex"], text)
        if match is None:
            shown = text if len(text) <= 80 else f"...{text[-77:]}"
            raise SnakeskillsError(
                f"{where}: config key {key}.regex {rule['regex']!r} finds nothing in column "
                f"{rule['column']!r} ({shown!r})"
            )
        text = match.group(1) if match.re.groups else match.group(0)
    for substring in rule["remove"]:
        text = text.replace(substring, "")
    return text.strip()


def apply_field_map(record: dict, field_map: dict, *, key: str, where: str) -> dict:
    """Add NeMo-Skills' fields built from source columns (``field_map = {"problem": "question", ...}``)."""
    mapped = dict(record)
    for field, rule in field_map.items():
        parsed = field_rule(rule)
        if parsed["column"] not in record:
            raise SnakeskillsError(
                f"{where}: config key {field_map_key(key, field, rule)} maps {field!r} from column "
                f"{parsed['column']!r}, which the row lacks"
            )
        mapped[field] = extract(record[parsed["column"]], parsed, key=f"{key}.field_map.{field}", where=where)
    return mapped


def option_texts(record: dict, options: str | list[str], *, key: str, where: str) -> list[str]:
    """The option texts of one row: a list column's items, or one column per option."""
    if isinstance(options, str):
        value = record.get(options)
        if not isinstance(value, list | tuple):
            raise SnakeskillsError(
                f"{where}: config key {key}.options names column {options!r}, which holds a "
                f"{type(value).__name__}, not a list of options; name one column per option instead"
            )
        values, names = list(value), [f"{options}[{index}]" for index in range(len(value))]
    else:
        values, names = [record.get(column) for column in options], list(options)
    if not 2 <= len(values) <= len(string.ascii_uppercase):
        raise SnakeskillsError(f"{where}: {len(values)} options; a question needs 2 to 26")
    texts = []
    for value, name in zip(values, names, strict=True):
        if value is None or str(value).strip() == "":
            raise SnakeskillsError(f"{where}: option {name} is empty")
        texts.append(str(value).strip())
    return texts


def correct_option(record: dict, texts: list[str], correct: dict, *, key: str, where: str) -> int:
    """The index of the correct option, from ``correct.column`` read as an index, a letter or an option's text."""
    value, form = record.get(correct["column"]), correct["is"]
    shown = f"{key}.correct.column {correct['column']!r} holds {value!r}"
    if form == "index":
        if isinstance(value, bool) or not (isinstance(value, int) or (isinstance(value, str) and value.isdigit())):
            raise SnakeskillsError(f"{where}: config key {shown}, not an option index (correct.is is index)")
        index = int(value)
    elif form == "letter":
        letter = str(value).strip().strip("()").upper() if value is not None else ""
        if len(letter) != 1 or letter not in string.ascii_uppercase:
            raise SnakeskillsError(f"{where}: config key {shown}, not an option letter (correct.is is letter)")
        index = string.ascii_uppercase.index(letter)
    else:
        matches = [index for index, text in enumerate(texts) if text == str(value).strip()]
        if len(matches) != 1:
            found = "is none of the options" if not matches else f"matches {len(matches)} options"
            raise SnakeskillsError(f"{where}: config key {shown}, which {found} (correct.is is text)")
        index = matches[0]
    if not 0 <= index < len(texts):
        raise SnakeskillsError(f"{where}: config key {shown}, but the row has {len(texts)} options")
    return index


def apply_multiple_choice(record: dict, choice: dict, *, key: str, where: str) -> dict:
    """A multiple-choice row in NeMo-Skills' form: lettered options appended to ``problem``, ``options`` (that
    block), ``option_letters``, one field per letter, and the correct letter as ``expected_answer``.

    With ``shuffle_seed`` the options are put in an order drawn from the seed and the question's text, so a row's
    order does not depend on where it sits in the file and stays the same on every run."""
    key = f"{key}.multiple_choice"
    if record.get("problem") is None:
        raise SnakeskillsError(f"{where}: no problem to add the options to (map one with field_map.problem)")
    texts = option_texts(record, choice["options"], key=key, where=where)
    correct = correct_option(record, texts, choice["correct"], key=key, where=where)
    order = list(range(len(texts)))
    if choice.get("shuffle_seed") is not None:  # optional (the schema fills null; direct callers may omit it)
        random.Random(f"{choice['shuffle_seed']}\n{record['problem']}").shuffle(order)
    letters = string.ascii_uppercase[: len(texts)]
    block = "\n".join(f"{letter}. {texts[index]}" for letter, index in zip(letters, order, strict=True))
    return {
        **record,
        "problem": f"{record['problem']}\n{block}",
        "expected_answer": letters[order.index(correct)],
        "options": block,
        "option_letters": ", ".join(letters),
        **{letter: texts[index] for letter, index in zip(letters, order, strict=True)},
    }


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
    ``fn_name``: each input is the arguments of a call), ``tests``, a program calling that function
    (``call_tests``). LiveCodeBench's functional cases are refused (their function's name is not in the cases)."""
    from snakeskills.code_execution import call_tests

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
                    f"{_shortened_repr(case)}"
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
        return {"tests": call_tests(str(function_name), *map(list, zip(*pairs, strict=True)))}
    cases = [
        {"input": _case_text(i, name=name, where=where), "output": _case_text(o, name=name, where=where)}
        for i, o in pairs
    ]
    return {"test_cases": cases}


def _shortened_repr(value) -> str:
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
    reading the wrong column, or a broken row, stops preparing instead of scoring every answer wrong."""
    from snakeskills.code_execution import row_check, run_many

    checked = [record for record in records if record.get("reference_solution")]
    checks = [row_check(record["reference_solution"], record) for record in checked]
    runs = run_many(checks, num_workers=threads, timeout_seconds=30, memory_limit_mb=None)
    failed = [(record["id"], run) for record, run in zip(checked, runs, strict=True) if not run.passed]
    if failed:
        shown = "; ".join(f"row {row_id}: {run.status}, {run.error}" for row_id, run in failed[:3])
        raise SnakeskillsError(
            f"{where}: {len(failed)} of {len(checked)} reference solutions fail their own tests ({shown}). Check "
            f"{key}.code (tests or cases, setup, run, starter read the right columns), or set "
            f"{key}.code.check_reference: false to prepare the rows as they are"
        )


def normalize_records(
    records: list[dict], *, benchmark: str, split: str, where: str, required: tuple[str, ...] = REQUIRED_FIELDS
) -> list[dict]:
    """Check required fields and id uniqueness; ``id``, ``problem``, ``expected_answer`` (str) lead each row (a
    code row has ``tests`` in place of an expected answer)."""
    if not records:
        raise SnakeskillsError(f"{where}: split {split!r} of benchmark {benchmark!r} is empty")
    prepared = []
    seen_ids = set()
    for index, record in enumerate(records):
        for field in required:
            if record.get(field) is None or str(record[field]).strip() == "":
                raise SnakeskillsError(f"{where}: row {index + 1} lacks required field {field!r}")
            value = record[field]
            if isinstance(value, bool) or not isinstance(value, str | numbers.Number):
                raise SnakeskillsError(
                    f"{where}: row {index + 1}: field {field!r} is a {type(value).__name__} "
                    f"({_shortened_repr(value)}); it must be "
                    "one string or number. Several accepted answers are not supported: keep one (a field_map "
                    "regex or a column that holds a single answer)"
                )
        record_id = str(record["id"]) if record.get("id") is not None else f"{benchmark}-{split}-{index:06d}"
        if record_id in seen_ids:
            raise SnakeskillsError(f"{where}: row {index + 1} repeats id {record_id!r}; ids must be unique")
        seen_ids.add(record_id)
        leading = {"id": record_id, "problem": record["problem"]}
        if record.get("expected_answer") is not None:
            leading["expected_answer"] = str(record["expected_answer"])
        prepared.append({**leading, **{name: value for name, value in record.items() if name not in leading}})
    return prepared


# ---------------------------------------------------------------- sources


def split_path(spec: dict, source: str, split: str, key: str) -> str:
    paths = spec[source]["paths"]
    if split not in paths:
        raise SnakeskillsError(f"config key {key}.{source}.paths has no split {split!r}; it has: {', '.join(paths)}")
    return paths[split]


def read_parquet(path: str) -> tuple[list[dict], list[str]]:
    import pyarrow
    import pyarrow.parquet

    if not Path(path).exists():
        raise SnakeskillsError(f"{path}: file does not exist")
    try:
        table = pyarrow.parquet.read_table(path)
    except pyarrow.ArrowException as error:
        raise SnakeskillsError(f"{path}: not a readable parquet file ({error})") from None
    return table.to_pylist(), list(table.column_names)


def hub_fix(dataset_id: str, revision: str | None, key: str) -> str:
    revision_option = f" --revision {revision}" if revision else ""
    return (
        f"Either run once where the Hub is reachable so that `datasets` caches it (under $HF_HOME, default "
        f"~/.cache/huggingface; point HF_HOME at that cache here), or download it on a machine with network, e.g. "
        f"`hf download --repo-type dataset {dataset_id}{revision_option} --local-dir <folder>` (older "
        f"huggingface_hub: `huggingface-cli download ...`), copy the folder here and set config key {key}.path "
        "to it."
    )


def not_a_folder(dataset_id: str) -> str:
    return f" (If {dataset_id!r} is meant as a local folder: there is no such folder in {os.getcwd()}.)"


def load_hf_split(hf: dict, split: str, key: str) -> tuple[list[dict], list[str], str]:
    """Rows and column names of one split of a Hugging Face dataset (Hub id or local folder)."""
    splits = hf["splits"]
    if split not in splits:
        raise SnakeskillsError(f"config key {key}.splits has no split {split!r}; it has: {', '.join(splits)}")
    dataset_id, name, revision, hub_split = hf["path"], hf.get("name"), hf.get("revision"), splits[split]
    path = os.path.expanduser(dataset_id)
    where = f"dataset {dataset_id} (config {name or 'default'}, split {hub_split})"
    if looks_local(dataset_id) and not os.path.isdir(path):
        raise SnakeskillsError(f"config key {key}.path: local folder {dataset_id!r} does not exist")

    import datasets
    from datasets.exceptions import DatasetNotFoundError

    try:
        dataset = datasets.load_dataset(path, name, split=hub_split, revision=revision)
    except ConnectionError as error:
        raise SnakeskillsError(
            f"config key {key}.path: dataset {dataset_id!r} is not in the local Hugging Face cache and the Hub "
            f"cannot be reached ({error}). {hub_fix(dataset_id, revision, key)}{not_a_folder(dataset_id)}"
        ) from None
    except DatasetNotFoundError as error:
        raise SnakeskillsError(
            f"config key {key}.path: dataset {dataset_id!r} was not found ({error}). Check the id (and {key}."
            "revision); for a gated or private dataset log in with `hf auth login`; or point the key at a local "
            f"folder holding the dataset's files.{not_a_folder(dataset_id)}"
        ) from None
    except (ValueError, FileNotFoundError) as error:
        raise SnakeskillsError(
            f"config key {key} ({where}): `datasets` could not load it: {error}. Check {key}.name (the config) "
            f"and {key}.splits.{split} (the dataset's split)."
        ) from None
    return dataset.to_list(), list(dataset.column_names), where


def load_source(benchmark: str, spec: dict, split: str) -> tuple[list[dict], list[str] | None, str]:
    """``(rows, column names or None when rows may differ, where)`` of one split of a spec's source."""
    source = spec["source"]
    key = f"benchmarks.{benchmark}"
    if source == "synthetic":
        synthetic = spec["synthetic"]
        if split not in synthetic["split_sizes"]:
            raise SnakeskillsError(f"config key {key}.synthetic.split_sizes has no split {split!r}")
        rows = arithmetic_splits(
            operations=synthetic["operations"],
            max_operand=synthetic["max_operand"],
            split_sizes=synthetic["split_sizes"],
            seed=synthetic["seed"],
        )[split]
        return rows, None, f"{key}.synthetic"
    if source == "jsonl":
        path = split_path(spec, source, split, key)
        return read_jsonl(path), None, path
    if source == "parquet":
        path = split_path(spec, source, split, key)
        rows, columns = read_parquet(path)
        return rows, columns, path
    if source == "hf":
        return load_hf_split(spec["hf"], split, f"{key}.hf")
    raise SnakeskillsError(f"config key {key}.source: unknown source {source!r}; known: {', '.join(SOURCES)}")


def prepare_split(benchmark: str, spec: dict, split: str, *, threads: int = 1) -> list[dict]:
    """The prepared rows of one split of one resolved benchmark spec (``config["benchmarks"][benchmark]``);
    ``threads``: reference solutions run at a time (a code benchmark's)."""
    key = f"benchmarks.{benchmark}"
    rows, columns, where = load_source(benchmark, spec, split)
    spec = {
        **spec,
        "field_map": spec.get("field_map") or {},
        "multiple_choice": spec.get("multiple_choice"),
        "code": spec.get("code"),
    }
    if columns is not None:
        check_columns(spec, columns, key=key, where=where)
    records = [
        apply_field_map(row, spec["field_map"], key=key, where=f"{where}: row {number}")
        for number, row in enumerate(rows, start=1)
    ]
    if spec["multiple_choice"] is not None:
        records = [
            apply_multiple_choice(record, spec["multiple_choice"], key=key, where=f"{where}: row {number}")
            for number, record in enumerate(records, start=1)
        ]
    code = spec["code"]
    if code is None:
        return normalize_records(records, benchmark=benchmark, split=split, where=where)
    records = [
        apply_code(record, code, key=key, where=f"{where}: row {number}")
        for number, record in enumerate(records, start=1)
    ]
    required = ("problem", "tests") if code.get("tests") is not None else ("problem",)  # apply_code made test_cases
    prepared = normalize_records(records, benchmark=benchmark, split=split, where=where, required=required)
    if code.get("check_reference", True) and code.get("reference") is not None:
        check_reference_solutions(prepared, key=key, where=where, threads=threads)
    return prepared
