"""The config's JSON schema (config/schema.yaml): the one source of every key's default and description."""

from __future__ import annotations

import copy
import functools
from pathlib import Path

from snakeskills.errors import SnakeskillsError

SCHEMA = Path(__file__).resolve().parents[2] / "config" / "schema.yaml"
DEFAULT_CONFIG = SCHEMA.parent / "config.yaml"


@functools.cache
def schema() -> dict:
    import yaml

    return yaml.safe_load(SCHEMA.read_text(encoding="utf-8"))


def fill_defaults(section: dict, pointer: str, key: str) -> dict:
    """``section`` checked against the schema at ``pointer`` (``#/definitions/generation``) with its defaults filled
    (as Snakemake's ``validate`` fills the whole config's); a violation names ``key``."""
    import jsonschema

    def set_defaults(validator, properties, instance, subschema):
        for name, property_schema in properties.items():
            if "default" in property_schema and isinstance(instance, dict):
                instance.setdefault(name, copy.deepcopy(property_schema["default"]))
        yield from jsonschema.Draft202012Validator.VALIDATORS["properties"](validator, properties, instance, subschema)

    root = schema()
    validator_class = jsonschema.validators.extend(jsonschema.Draft202012Validator, {"properties": set_defaults})
    target = root
    for part in pointer.removeprefix("#/").split("/"):
        target = target[part]
    filled = copy.deepcopy(section)
    error = jsonschema.exceptions.best_match(validator_class(root).evolve(schema=target).iter_errors(filled))
    if error is not None:
        path = ".".join([key, *(str(part) for part in error.absolute_path)])
        raise SnakeskillsError(f"config key {path}: {error.message}")
    return filled
