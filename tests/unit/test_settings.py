"""The typed config sections (``snakeskills.settings``) read back what they were read from: the ``tools`` section of
every shipped example round-trips through ``Tools`` key order included (a rule's params are compared by their
``repr``), a tag preset stays its name, and a key that is unknown, missing or against the schema names its config
key. The ``training`` section: the keys that moved out of ``sft`` are refused naming their new place, more than one
node is refused, and a method's ``training.max_steps`` reaches the trainer's arguments."""

from __future__ import annotations

import copy
import json

import pytest
import yaml
from conftest import DEFAULT_CONFIG, REPO

from snakeskills.errors import SnakeskillsError
from snakeskills.plan.checks import check_config
from snakeskills.plan.config import prepare_config
from snakeskills.plan.layout import Layout
from snakeskills.plan.run import Plan
from snakeskills.settings.tools import TAG_PRESETS, Price, Tags, Tools

DEFAULT = yaml.safe_load(DEFAULT_CONFIG.read_text())
EXAMPLES = sorted((REPO / "config" / "examples").glob("*.yaml"))
TOOL_EXAMPLES = [path for path in EXAMPLES if yaml.safe_load(path.read_text()).get("tools")]


def prepared(path) -> dict:
    """The example at ``path`` with the schema's defaults filled, as the plan reads it."""
    config = yaml.safe_load(path.read_text())
    prepare_config(config)
    return config


def python_tools(**settings) -> dict:
    """A complete ``tools`` section (the schema's defaults filled) of the python tool with ``settings``."""
    return Tools.filled({"tool": "python", **settings}, "tools").to_dict()


# ---------------------------------------------------------------- a section reads back what it was read from


def test_some_shipped_examples_have_tools():
    assert {path.name for path in TOOL_EXAMPLES} >= {
        "tiny-addition-expert-orchestrator.yaml",
        "tiny-multiplication-calculator-tools.yaml",
    }


@pytest.mark.parametrize("path", TOOL_EXAMPLES, ids=lambda path: path.stem)
def test_an_examples_tools_section_round_trips_with_its_key_order(path):
    section = prepared(path)["tools"]
    tools = Tools.from_dict(section, "tools")
    assert tools.to_dict() == section
    # the order too, nested sections included (json.dumps keeps it; == on dicts does not look at it)
    assert json.dumps(tools.to_dict()) == json.dumps(section)
    assert tools.key == "tools"


@pytest.mark.parametrize("path", TOOL_EXAMPLES, ids=lambda path: path.stem)
def test_a_sections_settings_file_reads_back_the_same_section(path, tmp_path):
    tools = Tools.from_dict(prepared(path)["tools"], "tools")
    (tmp_path / "tools.json").write_text(tools.to_json())
    assert Tools.from_json(tmp_path / "tools.json") == tools


def test_a_replaced_field_keeps_the_key_order_and_a_set_optional_field_comes_last():
    section = python_tools(max_calls=2)
    tools = Tools.from_dict(section, "tools").replace(max_calls=3, first_call="python")
    assert list(tools.to_dict()) == [*section, "first_call"]
    assert tools.to_dict() == {**section, "max_calls": 3, "first_call": "python"}
    assert tools.key == "tools"


@pytest.mark.parametrize("preset", sorted(TAG_PRESETS))
def test_a_tag_preset_round_trips_as_its_name(preset):
    section = python_tools(tags=preset)
    tools = Tools.from_dict(section, "tools")
    assert tools.tags == TAG_PRESETS[preset]
    assert tools.to_dict()["tags"] == preset
    assert Tags.from_config(preset, "tools.tags").to_config() == preset


def test_tags_written_out_stay_written_out_even_when_they_equal_a_preset():
    written = TAG_PRESETS["markdown"].to_dict()
    assert written == {
        "code_begin": "```python\n",
        "code_end": "```\n",
        "code_output_begin": "```output\n",
        "code_output_end": "```\n",
    }
    tools = Tools.from_dict(python_tools(tags=written), "tools")
    assert tools.tags == TAG_PRESETS["markdown"]
    assert tools.to_dict()["tags"] == written
    # positional, as the tests and the loop write them
    assert Tags("<c>", "</c>", "<o>", "</o>").to_config() == {
        "code_begin": "<c>",
        "code_end": "</c>",
        "code_output_begin": "<o>",
        "code_output_end": "</o>",
    }


# ---------------------------------------------------------------- a mistake names its config key


def test_an_unknown_key_names_it():
    with pytest.raises(SnakeskillsError, match=r"config key tools\.colour: not a key of tools"):
        Tools.from_dict({**python_tools(), "colour": "red"}, "tools")


def test_a_missing_key_names_the_section_and_the_key():
    section = python_tools()
    del section["workers"]
    with pytest.raises(SnakeskillsError, match=r"config key tools lacks workers"):
        Tools.from_dict(section, "tools")


def test_a_nested_sections_mistake_names_its_whole_key():
    config = prepared(REPO / "config" / "examples" / "tiny-addition-expert-orchestrator.yaml")
    section = copy.deepcopy(config["tools"])
    del section["models"]["expert"]["generation"]["sampling"]["top_k"]
    with pytest.raises(SnakeskillsError, match=r"config key tools\.models\.expert\.generation\.sampling lacks top_k"):
        Tools.from_dict(section, "tools")
    section = copy.deepcopy(config["tools"])
    section["models"]["expert"]["price"]["per_token"] = 1
    with pytest.raises(SnakeskillsError, match=r"config key tools\.models\.expert\.price\.per_token: not a key"):
        Tools.from_dict(section, "tools")


def test_an_unknown_tag_preset_names_the_key_and_the_presets():
    with pytest.raises(SnakeskillsError, match=r"config key tools\.tags: unknown tag preset 'xml'; known: "):
        Tools.from_dict({**python_tools(), "tags": "xml"}, "tools")
    with pytest.raises(SnakeskillsError, match=r"config key tools\.models\.expert\.tags\.code_end: a tag must be"):
        Tags.from_config({**TAG_PRESETS["markdown"].to_dict(), "code_end": ""}, "tools.models.expert.tags")


@pytest.mark.parametrize(
    ("section", "key"),
    [
        ({"max_output_characters": 0}, "tools.max_output_characters"),
        ({"max_output_characters": 1.5}, "tools.max_output_characters"),
        ({"timeout_seconds": 0}, "tools.timeout_seconds"),
        ({"memory_limit_mb": 0}, "tools.memory_limit_mb"),
        ({"sandbox": "docker"}, "tools.sandbox"),
        ({"tags": "xml"}, "tools.tags"),
        ({"price": {"per_call": -1}}, "tools.price.per_call"),
    ],
)
def test_filled_refuses_a_schema_violation_naming_the_key(section, key):
    with pytest.raises(SnakeskillsError, match=rf"config key {key}:"):
        Tools.filled({"tool": "python", **section}, "tools")


def test_filled_names_the_sections_own_config_key_where_none_is_given():
    with pytest.raises(SnakeskillsError, match=r"config key tools\.max_output_characters:"):
        Tools.filled({"tool": "python", "max_output_characters": 0})
    assert Tools.filled({"tool": "python"}).key == "tools"


def test_filled_fills_the_schemas_defaults():
    tools = Tools.filled({"tool": "calculator", "max_calls": 2}, "tools")
    assert (tools.tool, tools.max_calls, tools.workers, tools.sandbox) == ("calculator", 2, 4, "bwrap")
    assert (tools.max_output_characters, tools.timeout_seconds, tools.memory_limit_mb) == (1000, 10, 1024)
    assert tools.tags == TAG_PRESETS["markdown"] and tools.models == {} and tools.price is None
    assert tools.program_price.free and not tools.priced
    assert Price.filled({"per_call": 1.5}, "tools.price") == Price(1.5, 0.0, 0.0)


# ---------------------------------------------------------------- the training section


@pytest.mark.parametrize("name", ["gpus", "processes", "distributed"])
def test_the_keys_that_moved_out_of_sft_are_refused_naming_their_new_place(name):
    config = copy.deepcopy(DEFAULT)
    config["sft"][name] = "ddp" if name == "distributed" else 2
    with pytest.raises(SnakeskillsError) as error:
        prepare_config(config)
    message = str(error.value)
    assert f"sft.{name} -> training.{name}" in message, message


def test_more_than_one_training_node_is_refused_in_a_local_run_naming_the_key():
    config = copy.deepcopy(DEFAULT)
    config["training"] = {"nodes": 2}
    prepare_config(config)
    with pytest.raises(
        SnakeskillsError, match=r"config key training\.nodes is 2, but .*\(executor local\).*--profile slurm"
    ):
        check_config(config, gpus_available=False)
    check_config(config, gpus_available=True, executor="slurm")
    check_config(config, gpus_available=True, executor="slurm-jobstep")  # the job's own reading of the Snakefile
    config["training"]["nodes"] = 1
    check_config(config, gpus_available=False)


def test_max_steps_in_sft_training_reaches_the_trainer_arguments():
    import torch

    from snakeskills.training.trainer import section_trainer_arguments

    config = copy.deepcopy(DEFAULT)
    config["sft"]["training"]["max_steps"] = 7
    prepare_config(config)
    check_config(config, gpus_available=False)
    training = Plan(config, Layout.under("results/x")).trainings["sft"].training_config(False)["training"]
    assert training["max_steps"] == 7
    threads = torch.get_num_threads()
    common = {"output_dir": "trainer", "seed": 0, "threads": threads, "processes": 1, "distributed": "ddp"}
    assert section_trainer_arguments(training, **common)["max_steps"] == 7
    # left out: num_epochs passes (the trainer's -1)
    unset = {key: value for key, value in training.items() if key != "max_steps"}
    assert section_trainer_arguments(unset, **common)["max_steps"] == -1
