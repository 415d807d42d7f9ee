"""Models as priced tools when the plan is made (``snakeskills.plan.tools``): the models the eval compares (the
baselines of the base student, the expert alone), what each generate job and GRPO read, and each mistake stopping
the plan naming its key."""

from __future__ import annotations

import copy

import pytest
import yaml
from conftest import REPO, checked_config

from snakeskills.errors import SnakeskillsError
from snakeskills.plan.layout import Layout
from snakeskills.plan.run import Plan

EXAMPLE = yaml.safe_load((REPO / "config" / "examples" / "tiny-addition-expert-orchestrator.yaml").read_text())
RESULTS = "results/tiny-addition-orchestrator"


def example(mutate=None) -> dict:
    config = copy.deepcopy(EXAMPLE)
    if mutate is not None:
        mutate(config)
    return config


def plan_of(config: dict) -> Plan:
    return Plan(checked_config(config), Layout.under(RESULTS))


def test_the_eval_compares_the_student_without_tools_always_asking_choosing_trained_and_the_expert_alone():
    plan = plan_of(example())
    assert plan.eval_models == ["base", "base-without-tools", "base-always-expert", "grpo-round1", "expert"]
    assert plan.cost_references() == ["base", "base-always-expert"]
    assert f"{RESULTS}/report/accuracy_cost.png" in plan.targets()
    # the baselines sample only the eval split, with the base model's weights
    assert "base-always-expert" not in plan.train_sampled_models()
    assert plan.generation_model_inputs("base-always-expert") == plan.generation_model_inputs("base")
    assert plan.generation_adapter_path("base-without-tools") is None


def test_each_generate_job_reads_the_tools_it_calls_and_the_expert_alone_its_price():
    plan = plan_of(example())
    settings = {model: plan.generation_settings(model, "arithmetic", "test") for model in plan.eval_models}
    assert settings["base-without-tools"]["tools"] is None
    assert settings["base-always-expert"]["tools"]["first_call"] == "expert"
    assert "first_call" not in settings["base"]["tools"] and "first_call" not in settings["grpo-round1"]["tools"]
    expert = settings["base"]["tools"]["models"]["expert"]
    assert expert["model_path"] == "models/smollm2-arithmetic-expert"
    assert expert["prompt"]["user"] == "{problem}=" and "stop" in expert["prompt"]  # resolved
    # the expert is loaded once per node: its shared server, as a tool and as a model evaluated alone
    assert expert["generation"]["share_model"]["enabled"] is True
    assert settings["expert"]["generation"]["share_model"]["enabled"] is True
    assert settings["expert"]["tools"] is None
    assert settings["expert"]["price"] == {"per_call": 1.0, "per_input_token": 0.0, "per_output_token": 0.01}
    assert settings["base"]["price"] is None
    # the bootstrap's stop check and GRPO's rollouts ask the same expert
    assert plan.tiny_model_settings()["tools"]["models"]["expert"] == expert


def test_baselines_are_chosen_by_config():
    def only_without(config):
        config["tools"]["baselines"] = {"without_tools": True, "always_call": []}
        config["tools"]["models"]["expert"]["evaluate"] = False

    plan = plan_of(example(only_without))
    assert plan.eval_models == ["base", "base-without-tools", "grpo-round1"]
    assert plan.cost_references() == ["base"]

    def always_calculator(config):
        config["tools"]["baselines"] = {"without_tools": False, "always_call": ["calculator", "expert"]}

    plan = plan_of(example(always_calculator))
    assert plan.baseline_models == ["base-always-calculator", "base-always-expert"]
    assert plan.generation_settings("base-always-calculator", "arithmetic", "test")["tools"]["first_call"] == (
        "calculator"
    )


def test_a_run_with_only_a_program_tool_and_no_price_has_no_baselines_and_no_cost_table():
    config = yaml.safe_load((REPO / "config" / "examples" / "tiny-multiplication-calculator-tools.yaml").read_text())
    plan = Plan(checked_config(config), Layout.under("results/x"))
    assert plan.baseline_models == [] and plan.cost_references() == []
    assert plan.generation_settings("base", "arithmetic", "test")["price"] is None
    assert "accuracy_cost" not in plan.report_plots


def _models(**section):
    return lambda config: config["tools"]["models"]["expert"].update(section)


def _rename_expert(name):
    def mutate(config):
        config["tools"]["models"] = {name: config["tools"]["models"].pop("expert")}
        config["tiny_model"]["tool_share"] = 0

    return mutate


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (_models(tags={**EXAMPLE["tools"]["tags"]}), "tools.models.expert.tags: code_begin '<calc>' cannot be told"),
        (
            _models(
                tags={"code_begin": "<ca", "code_end": "</x>", "code_output_begin": "<y>", "code_output_end": "</y>"}
            ),
            "cannot be told from calculator's '<calc>'",
        ),
        (_rename_expert("base"), "tools.models.base: 'base' is also a model of the run"),
        (_rename_expert("sft-round1"), "tools.models.sft-round1 must not start with"),
        (_rename_expert("calculator"), "tools.models.calculator: the name of tools.tool too"),
        (lambda config: config["tools"].update(price={"per_output_token": 1}), "tools.price: a program tool"),
        (lambda config: config["tools"].update(price={"per_call": -1}), "tools.price.per_call"),
        (lambda config: config["tools"].update(baselines={"always_call": ["oracle"]}), "tools.baselines.always_call"),
        (
            lambda config: config["grpo"]["rewards"].update(tool_preference={"python": 0.1}),
            "grpo.rewards.tool_preference.python: not a tool of this run (calculator, expert)",
        ),
        (_models(prompt={"template": "no-such-template"}), "tools.models.expert.prompt"),
        (lambda config: config["tools"].update(tool=None, models={}), "tools.tool"),
    ],
)
def test_a_mistake_stops_the_plan_naming_its_key(mutate, message):
    with pytest.raises(SnakeskillsError) as raised:
        checked_config(example(mutate))
    assert message in str(raised.value), str(raised.value)


def test_a_cost_reward_needs_a_price_and_tool_rewards_need_tools():
    def unpriced(config):
        config["tools"]["models"] = {}
        config["tools"]["price"] = None
        config["tiny_model"]["tool_completion"] = config["tiny_model"]["tool_completion"][2]

    with pytest.raises(SnakeskillsError, match="grpo.rewards.tool_cost weighs the cost of tool calls, but no tool"):
        checked_config(example(unpriced))

    def no_tools(config):
        config["tools"] = None
        config["tiny_model"]["tool_share"] = 0
        config["grpo"]["rewards"] = {"correct": 1.0, "tool_preference": {"expert": -1.0}}

    with pytest.raises(SnakeskillsError, match="grpo.rewards.tool_preference weighs tool use, but tools is null"):
        checked_config(example(no_tools))
