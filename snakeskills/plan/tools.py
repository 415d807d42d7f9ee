"""The tools of a run (config key ``tools``), as the plan sees them: the tools section each job reads, the models as
tools (``tools.models``: each a model sampled but never trained, evaluated alone unless ``evaluate: false``) and
the eval-only baselines of the base student (``tools.baselines``): ``<base>-without-tools`` answers in one turn,
``<base>-always-<tool>`` calls ``<tool>`` first on every problem. The accuracy-against-cost comparison reads them
against the always-ask baselines and the base model (``cost_references``). Its plan object exists only when the
config has tools."""

from __future__ import annotations

from snakeskills.errors import SnakeskillsError
from snakeskills.plan.values import check_model_name
from snakeskills.prompts import resolve_prompt
from snakeskills.tools.model_tool import shared_generation

WITHOUT_TOOLS = "{base}-without-tools"
ALWAYS_CALL = "{base}-always-{tool}"


class ToolsPlan:
    def __init__(self, config: dict):
        self.section = config["tools"]
        self.base_model: str = config["model"]["name"]
        self.models: dict[str, dict] = dict(self.section["models"])
        baselines = self.section["baselines"]
        without = baselines["without_tools"]
        without = bool(self.models) if without is None else without
        always = baselines["always_call"]
        always = list(self.models) if always is None else list(always)
        self.without_tools_model = WITHOUT_TOOLS.format(base=self.base_model) if without else None
        # baseline model: the tool it calls first
        self.always_models = {ALWAYS_CALL.format(base=self.base_model, tool=tool): tool for tool in always}
        self.evaluated_models = [name for name, section in self.models.items() if section["evaluate"]]
        self.priced = bool(self.models) or _priced(self.section.get("price"))

    def tool_names(self) -> list[str]:
        """Every tool by the name its records and rewards use: the program tool's (``tools.tool``), then the models'."""
        program = [self.section["tool"]] if self.section["tool"] is not None else []
        return [*program, *self.models]

    def baseline_models(self) -> list[str]:
        """The eval-only variants of the base student, in table order."""
        return [name for name in [self.without_tools_model, *self.always_models] if name]

    def cost_references(self) -> list[str]:
        """The models every model is compared with on accuracy and cost: the base model and the always-ask
        baselines (none where no tool has a price: the comparison then has no cost table)."""
        return [self.base_model, *self.always_models] if self.priced else []

    def model_section(self, name: str) -> dict:
        """How the model tool ``name`` samples (model, prompt, generation), as a model of the run (evaluated alone):
        its generation through the shared model server where it loads local weights, so that its eval jobs and the
        jobs that ask it as a tool share one load."""
        section = self.models[name]
        return {**section, "generation": shared_generation(section["generation"])}

    def job_section(self, model: str) -> dict | None:
        """The tools section the generate jobs of the student's ``model`` read: the config's, with each model
        tool's weights' folder and resolved prompt; ``first_call`` for an always-ask baseline; None for the
        student without tools."""
        if model == self.without_tools_model:
            return None
        section = self.training_section()
        if model in self.always_models:
            section["first_call"] = self.always_models[model]
        return section

    def training_section(self) -> dict:
        """The tools section a job reads (``tools.loop.tool_use``): the config's, each model tool with its weights'
        folder (``model_path``) and its resolved prompt; without models, the config's as it is."""
        if not self.models:
            return dict(self.section)
        models = {
            name: {
                **section,
                "model_path": section["model"]["path"],
                "prompt": resolve_prompt(section["prompt"], f"tools.models.{name}.prompt"),
                "generation": shared_generation(section["generation"]),
            }
            for name, section in self.models.items()
        }
        return {**self.section, "models": models}

    def price(self, model: str) -> dict | None:
        """The price of a model tool answering on its own (its eval jobs); None for every other model."""
        return self.models[model]["price"] if model in self.evaluated_models else None


def _priced(price: dict | None) -> bool:
    return price is not None and any(price.get(key) for key in ("per_call", "per_input_token", "per_output_token"))


def check_tools_plan(config: dict, plan: ToolsPlan, other_models: list[str]) -> None:
    """The names and prices of the tools: each model tool's and baseline's name a model name of its own (not
    the student's, a round's or the teacher's), the tools' call tags told apart, a price per token only for a model,
    a preference only for a tool that exists, and ``tool_cost`` only with a price."""
    from snakeskills.tools.protocol import tags_from_config

    section = plan.section
    taken = {name: "a model of the run" for name in other_models}
    for name in plan.models:
        check_model_name(name, f"tools.models.{name}")
        _claim(taken, name, f"tools.models.{name}")
        if name == section["tool"]:
            raise SnakeskillsError(f"config key tools.models.{name}: the name of tools.tool too; rename the model")
    for name in plan.baseline_models():
        _claim(taken, name, "tools.baselines")
    for tool in plan.always_models.values():
        if tool not in plan.tool_names():
            raise SnakeskillsError(
                f"config key tools.baselines.always_call: {tool!r} is not a tool of this run "
                f"({', '.join(plan.tool_names())})"
            )
    price = section.get("price") or {}
    if price.get("per_input_token") or price.get("per_output_token"):
        raise SnakeskillsError(
            "config key tools.price: a program tool is priced per call (per_call); prices per token are for "
            "models as tools (tools.models.<name>.price)"
        )
    tags = {}
    if section["tool"] is not None:
        tags[section["tool"]] = (tags_from_config(section["tags"], "tools.tags"), "tools.tags")
    for name, model in plan.models.items():
        tags[name] = (tags_from_config(model["tags"], f"tools.models.{name}.tags"), f"tools.models.{name}.tags")
    opened = list(tags.items())
    for index, (_, (tag, key)) in enumerate(opened):
        for other, (other_tag, _) in opened[:index]:
            if tag.code_begin in other_tag.code_begin or other_tag.code_begin in tag.code_begin:
                raise SnakeskillsError(
                    f"config key {key}: code_begin {tag.code_begin!r} cannot be told from {other}'s "
                    f"{other_tag.code_begin!r}: each tool needs a call tag of its own"
                )
    grpo = config.get("grpo") or {}
    rewards = grpo.get("rewards") or {}
    for tool in rewards.get("tool_preference") or {}:
        if tool not in plan.tool_names():
            raise SnakeskillsError(
                f"config key grpo.rewards.tool_preference.{tool}: not a tool of this run "
                f"({', '.join(plan.tool_names())})"
            )
    if rewards.get("tool_cost") and not plan.priced and "grpo" in config["methods"]:
        raise SnakeskillsError(
            "config key grpo.rewards.tool_cost weighs the cost of tool calls, but no tool has a price (tools.price, "
            "tools.models.<name>.price)"
        )


def _claim(taken: dict, name: str, key: str) -> None:
    if name in taken:
        raise SnakeskillsError(f"config key {key}: {name!r} is also {taken[name]}; rename one")
    taken[name] = key
