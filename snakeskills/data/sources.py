"""Reading one split of a benchmark's source: the synthetic skill, a local JSONL or parquet file, or a Hugging
Face dataset (a Hub id through the local cache, or a local folder), with an error that says how to get it."""

from __future__ import annotations

import os
from pathlib import Path

from snakeskills.data.specs import SOURCES, looks_local
from snakeskills.data.synthetic import arithmetic_splits
from snakeskills.errors import SnakeskillsError
from snakeskills.io import read_jsonl


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
