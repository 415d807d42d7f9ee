"""The typed sections against the schema: each class has a field for every key its schema section has, and no
field the schema lacks but those the plan sets; the schema stays the one source of defaults (no field has one but
None for a key that may be absent)."""

from __future__ import annotations

import dataclasses

import pytest

from snakeskills.settings.generation import Generation, OpenAIServer, Sampling, ShareModel, VllmOptions
from snakeskills.settings.models import Model, TinyModel
from snakeskills.settings.schema import schema
from snakeskills.settings.section import Section
from snakeskills.settings.tools import Baselines, ModelTool, Price, ServedModel, Tags, Tools
from snakeskills.settings.training import Trainer, TrainingRun

# fields the plan sets for a job, no config key's
PLANNED = {Tools: {"first_call", "functions", "template_text"}, ModelTool: {"model_path"}, TinyModel: {"tools"}}
SECTIONS = [
    Generation,
    OpenAIServer,
    Sampling,
    ShareModel,
    VllmOptions,
    Model,
    TinyModel,
    Baselines,
    ModelTool,
    Price,
    ServedModel,
    Tags,
    Tools,
    TrainingRun,
]


def schema_keys(pointer: str) -> set[str]:
    node = schema()
    for part in pointer.removeprefix("#/").split("/"):
        node = node[part]
    node = node.get("then", node) if "properties" not in node else node
    return set(node["properties"])


@pytest.mark.parametrize("section", SECTIONS, ids=lambda section: section.__name__)
def test_a_field_per_schema_key(section: type[Section]):
    fields = {field.name for field in dataclasses.fields(section)}
    keys = schema_keys(section.SCHEMA)
    assert keys - fields == set(), f"{section.__name__} lacks fields for {sorted(keys - fields)}"
    assert fields - keys == PLANNED.get(section, set())


def test_trainer_settings_cover_every_method():
    fields = {field.name for field in dataclasses.fields(Trainer)}
    for pointer in ("#/definitions/training", "#/definitions/rl_training"):
        keys = schema_keys(pointer)
        assert keys <= fields, f"{pointer}: {sorted(keys - fields)}"
    assert fields <= schema_keys("#/definitions/training") | schema_keys("#/definitions/rl_training")


@pytest.mark.parametrize("section", [*SECTIONS, Trainer], ids=lambda section: section.__name__)
def test_no_default_but_absent(section: type[Section]):
    for field in dataclasses.fields(section):
        if field.default is not dataclasses.MISSING:
            assert field.default is None and field.metadata.get("optional"), f"{section.__name__}.{field.name}"
