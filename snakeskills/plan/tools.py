"""The tools of a run (config key ``tools``), as the plan sees them: the tools section each job reads, the models as
tools (``tools.models``: each a model sampled but never trained, evaluated alone unless ``evaluate: false``) and
the eval-only baselines of the base student (``tools.baselines``): ``<base>-without-tools`` answers in one turn,
``<base>-always-<tool>`` calls ``<tool>`` first on every problem. The accuracy-against-cost comparison reads them
against the always-ask baselines and the base model (``cost_references``). Its plan object exists only when the
config has tools."""

from __future__ import annotations

import string

from snakeskills.errors import SnakeskillsError
from snakeskills.plan.values import check_model_name
from snakeskills.prompts import resolve_prompt
from snakeskills.tools.model_tool import shared_generation
from snakeskills.tools.protocol import Tags, tags_from_config

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

    def tags(self) -> dict[str, tuple[str, Tags]]:
        """Each tool's tags by its name (``tool_names``), with the config key they are written at: ``tools.tags``,
        ``tools.models.<name>.tags``."""
        keys = {self.section["tool"]: "tools.tags"} if self.section["tool"] is not None else {}
        keys.update({name: f"tools.models.{name}.tags" for name in self.models})
        sections = {self.section["tool"]: self.section, **self.models}
        return {name: (key, tags_from_config(sections[name]["tags"], key)) for name, key in keys.items()}

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
    the student's, a round's or the teacher's), a price per token only for a model, a preference only for a tool
    that exists, and ``tool_cost`` only with a price. Their tags: ``check_tags``."""
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


def check_tags(tags: dict[str, tuple[str, Tags]], stops: dict[str, str]) -> None:
    """Tags the loop can read (``tags``: ``ToolsPlan.tags``), each mistake naming the key of the tags at fault:

    - each tool's ``code_begin`` its own: none inside another's;
    - no string a turn stops at inside a ``code_begin``, one equal to it included: every turn would stop at (or
      before) the call's opening tag, so no call could run; none inside a ``code_end`` short of all of it: a turn
      would stop before its call is closed (one equal to it stops where the loop stops anyway). The strings a turn
      stops at: ``stops`` (the sampling's and the prompts', by where they are set) and every tool's ``code_end``,
      which the loop adds to each turn's;
    - output tags apart from the call tags: an output tag that holds a ``code_begin`` would read each output block
      as a new call; a ``code_output_begin`` equal to a ``code_end`` would read the call's closing tag as output."""
    opened = list(tags.items())
    for index, (_, (key, tag)) in enumerate(opened):
        for other, (_, other_tag) in opened[:index]:
            if tag.code_begin in other_tag.code_begin or other_tag.code_begin in tag.code_begin:
                raise SnakeskillsError(
                    f"config key {key}: code_begin {tag.code_begin!r} cannot be told from {other}'s "
                    f"{other_tag.code_begin!r}: each tool needs a call tag of its own"
                )
    ends = {f"{key}.code_end (the loop ends each turn there)": tag.code_end for key, tag in tags.values()}
    for key, tag in tags.values():
        for where, stop in {**stops, **ends}.items():
            if stop and stop in tag.code_begin:
                raise SnakeskillsError(
                    f"config key {key}: code_begin {tag.code_begin!r} {'is' if stop == tag.code_begin else 'holds'} "
                    f"the stop string of {where}: every turn would stop at the call's opening tag and no call could "
                    "run; change the tag or the stop string"
                )
            if stop and stop in tag.code_end and stop != tag.code_end:
                raise SnakeskillsError(
                    f"config key {key}: code_end {tag.code_end!r} holds the stop string of {where}: a turn would stop "
                    "before its call is closed; change the tag or the stop string"
                )
    for key, tag in tags.values():
        for other_key, other_tag in tags.values():
            for name in ("code_output_begin", "code_output_end"):
                output = getattr(tag, name)
                if other_tag.code_begin in output:
                    equal = "is" if output == other_tag.code_begin else "holds"
                    raise SnakeskillsError(
                        f"config key {key}: {name} {output!r} {equal} code_begin of {other_key}: each output block "
                        "would read as a new call; give the outputs tags of their own"
                    )
            if tag.code_output_begin == other_tag.code_end:
                raise SnakeskillsError(
                    f"config key {key}: code_output_begin {tag.code_output_begin!r} is code_end of {other_key}: the "
                    "call's closing tag would read as the start of its output; give the outputs tags of their own"
                )


# a tag met this often in a prompt, outside the calls the prompt shows, is text the prompt is full of
FULL_OF = 3


def tags_warnings(tags: dict[str, tuple[str, Tags]], prompts: dict[str, dict], taught: list[str]) -> list[str]:
    """What probably will not work, one ``warning:`` line each naming the keys: a tool's ``code_begin`` that a prompt
    the student answers with (``prompts``: resolved, by config key) never shows (``shown_text``) while nothing
    teaches it (``taught``: the tiny model's bootstrap completions that call tools; none without a bootstrap): its
    samples would call it by chance only, unless the model was trained on these tags; and a ``code_begin`` or
    ``code_end`` a prompt holds ``FULL_OF`` times or more outside the calls it shows: the model writes it as text,
    where a ``code_begin`` opens a call and a ``code_end`` ends the turn."""
    lines = []
    for key, tag in tags.values():
        for prompt_key, prompt in prompts.items():
            text = shown_text(prompt)
            if tag.code_begin not in text and not any(tag.code_begin in literal_text(each) for each in taught):
                lines.append(
                    f"warning: config key {key}: code_begin {tag.code_begin!r} appears nowhere in {prompt_key} (its "
                    "system and user text and few-shot examples) and no tiny_model.tool_completion teaches it: unless "
                    "the model was trained on these tags it will rarely or never call the tool; show a call and its "
                    f"output, in these tags, in {prompt_key}'s examples (docs/tools.md, Python on a real model)"
                )
            outside = outside_calls(text, tag)
            for name in ("code_begin", "code_end"):
                count = outside.count(getattr(tag, name))
                if count >= FULL_OF:
                    does = "opens a call" if name == "code_begin" else "ends the turn"
                    lines.append(
                        f"warning: config key {key}: {name} {getattr(tag, name)!r} appears {count} times in "
                        f"{prompt_key} outside the calls it shows: the model will write it as ordinary text, and each "
                        f"time it {does}; give the tool tags the prompt does not use"
                    )
    return lines


def literal_text(template: str | None) -> str:
    """A format string's text without its fields (doubled braces read as one), the pieces apart by NUL so that no
    tag is found across a field."""
    return "\0".join(literal for literal, _, _, _ in string.Formatter().parse(template or ""))


def shown_text(prompt: dict) -> str:
    """What a resolved prompt shows the model whatever the problem: its system and user text without the record's
    fields, and its few-shot examples where the text places them (``{examples}``)."""
    templates = [prompt["system"], prompt["user"]]
    fields = {field for template in templates for _, field, _, _ in string.Formatter().parse(template or "") if field}
    examples = [prompt["examples"]] if "examples" in fields and prompt["examples"] else []
    return "\0".join([*(literal_text(template) for template in templates), *examples])


def outside_calls(text: str, tags: Tags) -> str:
    """``text`` without the calls it shows: each ``code_begin`` ... ``code_end``, with the output block after it
    (whitespace between them allowed)."""
    kept, position = [], 0
    while (start := text.find(tags.code_begin, position)) >= 0:
        end = text.find(tags.code_end, start + len(tags.code_begin))
        if end < 0:
            break
        end += len(tags.code_end)
        output = text.find(tags.code_output_begin, end)
        if output >= 0 and not text[end:output].strip():
            close = text.find(tags.code_output_end, output + len(tags.code_output_begin))
            end = close + len(tags.code_output_end) if close >= 0 else end
        kept.append(text[position:start])
        position = end
    kept.append(text[position:])
    return "\0".join(kept)
