"""The tools section when the plan is made: each mistake stops the plan naming its key, before any job runs."""

from __future__ import annotations

import copy

import pytest
import yaml
from conftest import REPO, checked_config

from snakeskills.errors import SnakeskillsError
from snakeskills.plan.layout import Layout
from snakeskills.plan.run import Plan

EXAMPLE = yaml.safe_load((REPO / "config" / "examples" / "tiny-multiplication-calculator-tools.yaml").read_text())


def example(mutate=None) -> dict:
    config = copy.deepcopy(EXAMPLE)
    if mutate is not None:
        mutate(config)
    return config


def tools(**keys):
    return lambda config: config["tools"].update(keys)


def test_the_example_plans_tools_for_the_student_and_its_rounds_only():
    config = checked_config(example())
    plan = Plan(config, Layout.under("results/tiny-multiplication-tools"))
    for model in ("base", "sft-round1", "grpo-round1"):
        assert plan.generation_settings(model, "arithmetic", "test")["tools"]["tool"] == "calculator"
    assert plan.tiny_model_settings()["tools"] == config["tools"]
    assert "results/tiny-multiplication-tools/report/tool_use.png" in plan.targets()


def test_without_tools_the_plan_and_the_bootstrap_settings_are_as_before():
    def off(config):
        config["tools"] = None
        config["tiny_model"].pop("tool_completion")
        config["tiny_model"].pop("tool_share")

    plan = Plan(checked_config(example(off)), Layout.under("results/x"))
    assert plan.generation_settings("base", "arithmetic", "test")["tools"] is None
    assert not {"tools", "tool_share", "tool_completion"} & set(plan.tiny_model_settings())


def _priced_without_tools(config):
    config.update(tools=None)
    config["tiny_model"].update(tool_share=0)
    config["grpo"].update(rewards={"tool_calls": -0.1})


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (tools(tool="abacus"), "tools.tool"),
        (tools(tool="no_such_module_here:count"), "tools.tool"),
        (tools(max_calls=-1), "tools.max_calls"),
        (tools(tags="klingon"), "tools.tags"),
        (tools(tags={"code_begin": "<calc>", "code_end": ""}), "tools.tags"),
        (lambda config: config["generation"]["sampling"].update(stop=["/"]), "code_end '</calc>' holds the stop"),
        (lambda config: config["grpo"].update(rollouts="trl"), "grpo.rollouts"),
        (lambda config: config.update(tools=None), "tiny_model.tool_share"),
        (lambda config: config["tiny_model"].update(tool_completion=None), "tiny_model.tool_completion"),
        (_priced_without_tools, "grpo.rewards.tool_calls"),
    ],
)
def test_a_mistake_stops_the_plan_naming_its_key(mutate, message):
    with pytest.raises(SnakeskillsError) as raised:
        checked_config(example(mutate))
    assert message in str(raised.value), str(raised.value)
