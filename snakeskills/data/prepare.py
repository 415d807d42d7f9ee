"""prepare_data: turn a benchmark spec into ``data/{benchmark}/{split}.jsonl``.

A spec (``config["benchmarks"][name]``) names a ``source``: ``synthetic`` (the built-in arithmetic skill),
``jsonl`` / ``parquet`` (a local file per split, ``paths: {split: file}``) or ``hf`` (``datasets.load_dataset(path,
name, split=..., revision=...)``, from the Hub or a local folder in the Hub's layout).

``field_map`` builds NeMo-Skills' fields from the source columns (which are kept): ``{problem: question}`` copies a
column; ``{expected_answer: {column: answer, regex: '####\\s*(.+?)\\s*$', remove: [","]}}`` takes the regex's first
group (or whole match) and deletes the listed substrings.

``multiple_choice`` letters the options (a list column or one column per option, optionally shuffled with a seed)
A, B, ... and appends them to ``problem`` (``options``: that block; ``option_letters``: "A, B, C, D"; each letter:
its option's text); ``expected_answer`` is the correct letter (``correct``: its index, letter or text).

``code`` makes a code benchmark: ``tests`` (a test program or a list of statements), with optional ``setup`` before
and a ``run`` line after (formatted with the row's columns: ``check({entry_point})``), becomes the row's ``tests``;
``starter`` gives ``starter_code``; ``reference`` gives ``reference_solution``, run against the tests while
preparing (``check_reference``). ``cases`` instead names a column of input/output cases (JSON text or its value),
prepared as ``test_cases`` for a program reading standard input. Code rows need no ``expected_answer``, and the
columns ``code`` reads are left out of the rows.

Every row has a unique, stable ``id`` (the source's or ``field_map``'s, else ``{benchmark}-{split}-{index:06d}``),
a ``problem`` and a string ``expected_answer``. ``preset: <name>`` loads ``snakeskills/data/benchmarks/<name>.yaml``,
deep-merged under the keys given beside it (``apply_presets``, before ``check_benchmark_specs``)."""

from __future__ import annotations

import numbers

from snakeskills.data.code_rows import apply_code, check_reference_solutions, shortened_repr
from snakeskills.data.fields import apply_field_map, apply_multiple_choice, check_columns
from snakeskills.data.sources import load_source
from snakeskills.errors import SnakeskillsError

REQUIRED_FIELDS = ("problem", "expected_answer")


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
                    f"({shortened_repr(value)}); it must be "
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
