"""The tools of a run (config key ``tools``), as the plan sees them: the tools section each job reads, the models as
tools (``tools.models``: each a model sampled but never trained, evaluated alone unless ``evaluate: false``) and
the eval-only baselines of the base student (``tools.baselines``): ``<base>-without-tools`` answers in one turn,
``<base>-always-<tool>`` calls ``<tool>`` first on every problem. The accuracy-against-cost comparison reads them
against the always-ask baselines and the base model (``cost_references``). Its plan object exists only when the
config has tools."""

from __future__ import annotations

import string
from collections.abc import Callable
from pathlib import Path

from snakeskills.errors import SnakeskillsError
from snakeskills.plan.sections import benchmark_prompt
from snakeskills.plan.values import check_model_name
from snakeskills.prompts import resolve_prompt
from snakeskills.settings.tools import TAG_PRESETS, Price, Tags, Tools
from snakeskills.tools.model_tool import shared_generation

WITHOUT_TOOLS = "{base}-without-tools"
ALWAYS_CALL = "{base}-always-{tool}"


class ToolsPlan:
    def __init__(self, tools: Tools, base_model: str):
        self.section = tools
        self.base_model = base_model
        self.models = tools.models
        baselines = tools.baselines
        without = bool(self.models) if baselines.without_tools is None else baselines.without_tools
        always = list(self.models) if baselines.always_call is None else list(baselines.always_call)
        self.without_tools_model = WITHOUT_TOOLS.format(base=base_model) if without else None
        # baseline model: the tool it calls first
        self.always_models = {ALWAYS_CALL.format(base=base_model, tool=tool): tool for tool in always}
        self.evaluated_models = [name for name, model in self.models.items() if model.evaluate]
        self.priced = tools.priced
        self._training_section: Tools | None = None

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
        model = self.models[name]
        return {**model.to_dict(), "generation": shared_generation(model.generation).to_dict()}

    def job_section(self, model: str) -> Tools | None:
        """The tools the generate jobs of the student's ``model`` use: the run's, with each model tool's weights'
        folder and resolved prompt; ``first_call`` for an always-ask baseline; None for the student without tools."""
        if model == self.without_tools_model:
            return None
        tools = self.training_section()
        return tools.replace(first_call=self.always_models[model]) if model in self.always_models else tools

    def training_section(self) -> Tools:
        """The tools a job uses (``tools.loop.tool_use``): each model tool with its weights' folder
        (``model_path``), its resolved prompt and its generation through the shared model server; with
        ``format: chat_template`` the tools as functions and the template's text (built once)."""
        if self._training_section is None:
            self._training_section = self._job_tools()
        return self._training_section

    def prompt_format(self) -> dict:
        """With ``format: chat_template``, what a prompt renders with beside its chat template: the tools'
        functions and the template (``RoundRun.functions`` / ``template``)."""
        from snakeskills.tools.functions import functions_format

        return functions_format(self.training_section())

    def _job_tools(self) -> Tools:
        section = self.section
        if section.chat:
            from snakeskills.tools.chat_turns import template_text
            from snakeskills.tools.functions import function_settings

            template = None
            if section.chat_template is not None:
                template = template_text(section.chat_template, f"{section.key}.chat_template")
            section = section.replace(functions=function_settings(section), template_text=template)
        if not self.models:
            return section
        models = {
            name: model.replace(
                model_path=model.model.path,
                prompt=resolve_prompt(model.prompt, f"tools.models.{name}.prompt"),
                generation=shared_generation(model.generation),
            )
            for name, model in self.models.items()
        }
        return section.replace(models=models)

    def price(self, model: str) -> Price | None:
        """The price of a model tool answering on its own (its eval jobs); None for every other model."""
        return self.models[model].price if model in self.evaluated_models else None


def check_tools_plan(config: dict, plan: ToolsPlan, other_models: list[str]) -> None:
    """The names and prices of the tools: a program tool named unless models are the tools, each model tool's and
    baseline's name a model name of its own (not the student's, a round's or the teacher's), a price per token only
    for a model, a preference only for a tool that exists, and ``tool_cost`` only with a price. Their tags:
    ``check_tags``."""
    section = plan.section
    if section.tool is None and not section.models:
        raise SnakeskillsError(
            "config key tools.tool: a tool's name (python, calculator, or your own as module:function) is needed "
            "(or null where tools.models names the tools)"
        )
    taken = {name: "a model of the run" for name in other_models}
    for name in plan.models:
        check_model_name(name, f"tools.models.{name}")
        _claim(taken, name, f"tools.models.{name}")
        if name == section.tool:
            raise SnakeskillsError(f"config key tools.models.{name}: the name of tools.tool too; rename the model")
    for name in plan.baseline_models():
        _claim(taken, name, "tools.baselines")
    for tool in plan.always_models.values():
        if tool not in plan.section.tool_names():
            raise SnakeskillsError(
                f"config key tools.baselines.always_call: {tool!r} is not a tool of this run "
                f"({', '.join(plan.section.tool_names())})"
            )
    if section.program_price.per_token:
        raise SnakeskillsError(
            "config key tools.price: a program tool is priced per call (per_call); prices per token are for "
            "models as tools (tools.models.<name>.price)"
        )
    grpo = config.get("grpo") or {}
    rewards = grpo.get("rewards") or {}
    for tool in rewards.get("tool_preference") or {}:
        if tool not in plan.section.tool_names():
            raise SnakeskillsError(
                f"config key grpo.rewards.tool_preference.{tool}: not a tool of this run "
                f"({', '.join(plan.section.tool_names())})"
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
    """Tags the loop can read (``tags``: ``Tools.tags_by_tool``), each mistake naming the key of the tags at fault:

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


def check_tools(config: dict, tools: Tools | None, warn: Callable[[str], None], *, teacher_tools: bool = False) -> None:
    """The one check of the tools section and of the keys that need it: tools that exist (a user's imports), names
    and prices that fit (``check_tools_plan``), tags the loop can read (``check_tags``: no stop string cuts them,
    output tags apart from call tags, each tool's own) and that reach it as text, a sampler that can run the tools
    in GRPO, and the keys that need tools set only with them. What probably will not work is ``warn``ed
    (``tags_warnings``: tags the prompts never show and nothing teaches, tags the prompts are full of)."""
    from snakeskills.tools.registry import check_tool

    grpo, tiny = config.get("grpo") or {}, config.get("tiny_model") or {}
    rewards = grpo.get("rewards") or {}
    priced = [term for term in ("tool_calls", "tool_seconds", "tool_cost", "tool_preference") if rewards.get(term)]
    if tools is None:
        if priced and "grpo" in config["methods"]:
            raise SnakeskillsError(f"config key grpo.rewards.{priced[0]} weighs tool use, but tools is null")
        if config["model"]["build_tiny"] and tiny.get("tool_share"):
            raise SnakeskillsError("config key tiny_model.tool_share: the bootstrap's tool calls need a tools section")
        return
    plan = ToolsPlan(tools, config["model"]["name"])
    check_tools_plan(config, plan, _run_model_names(config))
    if tools.tool is not None:
        check_tool(tools, "tools.tool")
    prompts = student_prompts(config)
    if teacher_tools:  # the teacher answers with the tools too
        prompts["teacher.prompt"] = resolve_prompt(config["teacher"]["prompt"], "teacher.prompt")
    if tools.chat:
        check_chat_format(config, plan, prompts, teacher_tools)
    elif tools.chat_template is not None:
        raise SnakeskillsError(
            "config key tools.chat_template: the template is for tools.format: chat_template (calls through the chat "
            "template); set it, or drop tools.chat_template"
        )
    else:
        _check_tag_format(config, plan, prompts, warn)
    if "grpo" in config["methods"] and (grpo.get("vllm_mode") is not None or grpo.get("rollouts") != "hf"):
        key = "grpo.vllm_mode" if grpo["vllm_mode"] is not None else "grpo.rollouts"
        raise SnakeskillsError(
            f"config key {key}: with tools, GRPO's completions call the tool between turns, which only the project's "
            "own rollouts do: set grpo.rollouts: hf and grpo.vllm_mode: null"
        )
    if config["model"]["build_tiny"] and tiny.get("tool_share") and not tiny.get("tool_completion"):
        raise SnakeskillsError(
            "config key tiny_model.tool_completion: tiny_model.tool_share asks for bootstrap completions that call "
            "the tool; give their template"
        )


def _check_tag_format(config: dict, plan: ToolsPlan, prompts: dict, warn: Callable[[str], None]) -> None:
    """Tags the loop can read (``check_tags``: no stop string cuts them, output tags apart from call tags, each
    tool's own), that reach it as text, and warnings of tags nothing shows the model (``tags_warnings``)."""
    stops = {f"generation.sampling.stop {stop!r}": stop for stop in config["generation"]["sampling"]["stop"]}
    for key, prompt in prompts.items():
        stops.update({f"{key}.template's stop {stop!r}": stop for stop in prompt["stop"]})
    tags = plan.section.tags_by_tool()
    check_tags(tags, stops)
    for key, each in tags.values():
        _check_tags_are_text(config, each, key)
    for line in tags_warnings(tags, prompts, _bootstrap_tool_completions(config)):
        warn(line)


def check_chat_format(config: dict, plan: ToolsPlan, prompts: dict, teacher_tools: bool = False) -> None:
    """``tools.format: chat_template``: prompts rendered by a chat template (``prompts``: those of the models that
    call tools), no tiny-model bootstrap in tags, the functions and the template (``ToolsPlan.training_section``), and
    the template on the tokenizer of each model that calls tools (the student; the teacher with teacher.tools):
    ``_check_chat_caller``."""
    for key, prompt in prompts.items():
        if not prompt["chat_template"]:
            raise SnakeskillsError(
                f"config key {key}.chat_template is false, but tools.format chat_template offers the tools through "
                f"the chat template; set {key}.chat_template: true"
            )
    tiny = config.get("tiny_model") or {}
    if config["model"]["build_tiny"] and tiny.get("tool_share"):
        raise SnakeskillsError(
            "config key tiny_model.tool_share: the tiny model's bootstrap shows calls in tags; with tools.format "
            "chat_template set it to 0 (or use tags)"
        )
    _check_chat_caller(config, plan, "generation", config["model"], "model")
    if teacher_tools:
        _check_chat_caller(config, plan, "teacher.generation", config["teacher"]["model"], "teacher")


def _check_chat_caller(config: dict, plan: ToolsPlan, key: str, model: dict, role: str) -> None:
    """A model that calls tools through the chat template (its generation section at config key ``key``): where the
    plan can read the tokenizer (the model's local folder, or
    ``openai.tokenizer_path``, which a server needs for the transcript), the template on it: it renders calls and
    tool messages, its calls read back, and the model's end-of-turn token ends its turns (``ChatTurns``)."""
    generation = config["teacher"]["generation"] if role == "teacher" else config["generation"]
    section = plan.training_section()
    backend = generation["backend"]
    name = config[role]["name"]
    if backend == "openai":
        folder = generation["openai"]["tokenizer_path"]
        if not folder:
            raise SnakeskillsError(
                f"config key {key}.openai.tokenizer_path: tools.format chat_template writes each sample's "
                "transcript with the served model's chat template; give a folder with its tokenizer (the server "
                "must render with the same template: tools.chat_template, e.g. vllm serve --chat-template, or the "
                "tokenizer's own)"
            )
        where = f"{key}.openai.tokenizer_path {folder}"
    elif model.get("build_tiny") or not model["path"] or not Path(model["path"]).is_dir():
        return  # checked when the job loads the tokenizer
    else:
        folder, where = model["path"], f"model {name} ({model['path']})"
    from transformers import AutoTokenizer

    from snakeskills.tools.chat_turns import ChatTurns

    tokenizer = AutoTokenizer.from_pretrained(folder, trust_remote_code=model["trust_remote_code"])
    where += " with " + (
        f"tools.chat_template {section.chat_template!r}" if section.chat_template else "its own chat template"
    )
    schemas = [function["schema"] for function in section.functions]
    kwargs = (config["teacher"]["prompt"] if role == "teacher" else config["prompt"])["chat_template_kwargs"]
    chat = ChatTurns(tokenizer, section.template_text, schemas, kwargs, where)
    special = [marker for marker in chat.calls.format.markers if marker in tokenizer.all_special_tokens]
    reads_text = backend == "vllm" or (backend == "openai" and generation["openai"]["api"] == "completions")
    if reads_text and special:
        raise SnakeskillsError(
            f"config key {key}.backend is {backend}, but the calls of {where} are marked by special tokens of "
            f"its tokenizer ({', '.join(special)}), which vLLM leaves out of the text it returns: the loop would "
            "never see a call; use backend hf (the loop reads its token ids, special tokens included)"
            + (" or the chat API, whose server's tool parser reads them" if backend == "openai" else "")
        )


def student_prompts(config: dict) -> dict[str, dict]:
    """The prompts the student (and its rounds) answers with, resolved, by config key: ``prompt``, and each
    benchmark's own ``benchmarks.<name>.prompt`` where it gives one."""
    prompts = {"prompt": resolve_prompt(config["prompt"], "prompt")}
    for benchmark, spec in config["benchmarks"].items():
        if spec["prompt"]:
            key = f"benchmarks.{benchmark}.prompt"
            prompts[key] = resolve_prompt(benchmark_prompt(config["prompt"], spec), key)
    return prompts


def _bootstrap_tool_completions(config: dict) -> list[str]:
    """The tiny model's bootstrap completions that call tools (``tiny_model.tool_completion``, where
    ``tiny_model.tool_share`` trains on them), the only place the plan sees a model taught the tags; else none."""
    tiny = config.get("tiny_model") or {}
    if not config["model"]["build_tiny"] or not tiny.get("tool_share"):
        return []
    completion = tiny["tool_completion"]
    return [completion] if isinstance(completion, str) else list(completion or [])


def _run_model_names(config: dict) -> list[str]:
    """The names of the run's models other than the tools': the student, its tuned rounds, the teacher."""
    from snakeskills.training.methods import TRAINING_METHODS

    names = [config["model"]["name"]]
    names += [
        TRAINING_METHODS[method].tuned_model_name(r)
        for method in config["methods"]
        for r in range(1, config["rounds"] + 1)
    ]
    return names + ([config["teacher"]["name"]] if config["teacher"] is not None else [])


def _check_tags_are_text(config: dict, tags, key: str = "tools.tags") -> None:
    """A tag that holds a special token of the student's tokenizer (Llama 3's ``<|python_tag|>``) reaches the loop
    only where it reads the model's token ids (the hf backend, directly or through the shared model server): it then
    decodes them with special tokens written out. vLLM and an OpenAI-compatible server hand the loop text that leaves
    special tokens out, so the loop would never see a call: refused there with the reason. Checked where the plan can
    read the tokenizer (a local checkpoint folder)."""
    model, backend = config["model"], config["generation"]["backend"]
    if backend == "hf":
        return
    if tags == TAG_PRESETS["llama3"]:
        raise SnakeskillsError(
            f"config key {key}: the llama3 preset's tags are special tokens of Llama 3's tokenizer, which the "
            f"{backend} backend leaves out of the text it returns: the loop would never see a call; use "
            "generation.backend: hf (the loop reads its token ids, special tokens included) or the markdown preset"
        )
    if model["build_tiny"] or not model["path"] or not Path(model["path"]).is_dir():
        return
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model["path"], trust_remote_code=model["trust_remote_code"])
    special = set(tokenizer.all_special_tokens)
    special |= {token.content for token in tokenizer.added_tokens_decoder.values() if token.special}
    for name in ("code_begin", "code_end"):
        found = sorted(token for token in special if token and token in getattr(tags, name))
        if found:
            raise SnakeskillsError(
                f"config key {key}: {name} {getattr(tags, name)!r} holds {found[0]!r}, a special token of "
                f"{model['path']}'s tokenizer, which the {backend} backend leaves out of the text it returns: the "
                "loop would never see a call; use generation.backend: hf (the loop reads its token ids, special "
                "tokens included) or tags written in plain text (the markdown or openmath preset)"
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
