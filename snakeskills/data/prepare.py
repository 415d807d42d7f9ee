"""prepare_data: turn a benchmark spec into ``data/{benchmark}/{split}.jsonl``.

Sources: ``synthetic`` (the built-in arithmetic skill) and ``jsonl`` (a local file per split with
an optional field map). Every prepared row has a stable, unique ``id``, a ``problem`` and an
``expected_answer`` (as a string), plus any source fields.
"""

from __future__ import annotations

from snakeskills.data.synthetic import arithmetic_splits
from snakeskills.errors import SnakeskillsError
from snakeskills.io import read_jsonl

REQUIRED_FIELDS = ("problem", "expected_answer")


def apply_field_map(record: dict, field_map: dict[str, str], where: str) -> dict:
    """Rename source columns to NeMo-Skills' names: ``field_map = {"problem": "question", ...}``."""
    mapped = dict(record)
    for target, source in field_map.items():
        if source not in record:
            raise SnakeskillsError(f"{where}: field_map maps {target!r} from column {source!r}, which the row lacks")
        mapped[target] = record[source]
    return mapped


def normalize_records(records: list[dict], *, benchmark: str, split: str, where: str) -> list[dict]:
    if not records:
        raise SnakeskillsError(f"{where}: split {split!r} of benchmark {benchmark!r} is empty")
    prepared = []
    seen_ids = set()
    for index, record in enumerate(records):
        for field in REQUIRED_FIELDS:
            if record.get(field) is None or str(record[field]).strip() == "":
                raise SnakeskillsError(f"{where}: row {index + 1} lacks required field {field!r}")
        record_id = str(record["id"]) if record.get("id") is not None else f"{benchmark}-{split}-{index:06d}"
        if record_id in seen_ids:
            raise SnakeskillsError(f"{where}: row {index + 1} repeats id {record_id!r}; ids must be unique")
        seen_ids.add(record_id)
        prepared.append({**record, "id": record_id, "expected_answer": str(record["expected_answer"])})
    return prepared


def prepare_split(benchmark: str, spec: dict, split: str) -> list[dict]:
    """The prepared rows of one split of one benchmark spec (``config["benchmarks"][benchmark]``)."""
    source = spec["source"]
    where = f"benchmarks.{benchmark}"
    if source == "synthetic":
        synthetic = spec["synthetic"]
        if split not in synthetic["split_sizes"]:
            raise SnakeskillsError(f"{where}.synthetic.split_sizes has no split {split!r}")
        records = arithmetic_splits(
            operations=synthetic["operations"],
            max_operand=synthetic["max_operand"],
            split_sizes=synthetic["split_sizes"],
            seed=synthetic["seed"],
        )[split]
    elif source == "jsonl":
        paths = spec["jsonl"]["paths"]
        if split not in paths:
            raise SnakeskillsError(f"{where}.jsonl.paths has no split {split!r}")
        where = paths[split]
        records = [
            apply_field_map(record, spec["jsonl"]["field_map"], f"{where}: row {row}")
            for row, record in enumerate(read_jsonl(paths[split]), start=1)
        ]
    else:
        raise SnakeskillsError(f"{where}.source: unknown source {source!r}; known: synthetic, jsonl")
    return normalize_records(records, benchmark=benchmark, split=split, where=where)
