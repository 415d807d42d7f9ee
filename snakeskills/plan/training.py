"""How the rounds train: the training methods (config key ``methods``, each with a config section of its own and a
chain of rounds of its own, all from the same base model; ``training.methods`` has the table), what a round's
training writes and continues from, what a model generates with once tuned, and the settings that decide the
weights."""

from __future__ import annotations

from snakeskills.errors import SnakeskillsError
from snakeskills.plan.layout import Layout
from snakeskills.plan.resources import training_processes
from snakeskills.plan.sections import is_code_benchmark
from snakeskills.settings.training import Trainer
from snakeskills.training.grpo import filled_sampling
from snakeskills.training.methods import TRAINING_METHODS, training_method


def method_section(config: dict, method: str) -> dict:
    """The config section of a training method (``sft``, ``dpo``, ``kto``, ``grpo``)."""
    section = config[method]
    if section is None:
        raise SnakeskillsError(f"config key methods lists {method!r}, but the config has no {method} section")
    return section


class TrainingPlan:
    """One training method's decisions: its section's weights (config key ``<method>.method``) lora write an adapter
    on the base model, full a checkpoint."""

    def __init__(self, config: dict, layout: Layout, method: str = "sft"):
        self.config = config
        self.name = method
        self.method = training_method(method)
        section = self.section = method_section(config, method)
        self.full = section["method"] == "full"
        # what a round's training writes: an adapter on the base model (lora) or a full checkpoint (full)
        self.output = layout.checkpoint if self.full else layout.adapter
        self.layout = layout
        # with tools called through the chat template: the functions and template the round's prompts render with
        self.chat_tools: dict | None = None

    def tuned_checkpoint(self, model: str) -> str | None:
        """A tuned round's own checkpoint folder (full fine-tuning); ``None`` where it loads base + adapter."""
        return self.layout.checkpoint.format(model=model) if self.full else None

    def tuned_adapter(self, model: str) -> str | None:
        """A tuned round's LoRA adapter (lora); ``None`` for full fine-tuning."""
        return None if self.full else self.layout.adapter.format(model=model)

    def init(self, parent: str | None) -> list[str]:
        """What a round's training continues from (init continue, from round 2 on: ``parent`` is the previous
        round): its adapter or checkpoint; none when training starts from the base model."""
        if self.section["init"] == "base" or parent is None:
            return []
        return [self.output.format(model=parent)]

    def merged(self, tuned_models: list[str]) -> list[str]:
        """The merged base + adapter models (sft.merge, lora only)."""
        merged = self.section.get("merge", False) and not self.full
        return [self.layout.merged_model.format(model=m) for m in tuned_models] if merged else []

    def training_config(self, gpus_available: bool) -> dict:
        """The settings that decide how a round is trained (data choice and filters act through its input).

        The processes count too: each process draws its own share of every batch, so the weights differ."""
        # a params value that reads differently (another key order) would rerun finished rounds
        keys = ("seed", "training") if self.full else ("seed", "lora", "training")
        settings = {key: self.section[key] for key in keys + self.method.options}
        settings["training"] = without_save_timer(settings["training"])
        if self.method.fills_sampling:
            settings["sampling"] = filled_sampling(self.config, self.name)
        run = {
            "method": self.section["method"],
            **settings,
            "processes": training_processes(self.config, gpus_available),
            "distributed": self.config["training"]["distributed"],
        }
        nodes = self.config["training"]["nodes"]
        # on one node the key is left out, so that the params of rounds trained before it existed read the same
        if nodes != 1:
            run["nodes"] = nodes
        if self.chat_tools is not None:
            run["chat_tools"] = self.chat_tools
        return run


# the training keys that change no weights and are left out of a rule's params, so that changing one (or a new
# default of one) reruns no finished round: the save timer, which the job reads from the config
# (``with_save_timer``), and the steps evaluated on validation, which the plan turns into jobs (``plan.validation``)
SAVE_TIMER = "checkpoint_minutes"
NOT_DECIDING_WEIGHTS = (SAVE_TIMER, "eval_every_steps")


def without_save_timer(training: dict) -> dict:
    """A training section as a rule's params hold it: without ``checkpoint_minutes`` and ``eval_every_steps``."""
    return {key: value for key, value in training.items() if key not in NOT_DECIDING_WEIGHTS}


def with_save_timer(training: Trainer, config: dict, section: str) -> dict:
    """The training settings a job trains with: its params' ``training`` and ``checkpoint_minutes`` from the
    config's ``section`` (``sft``, ``tiny_model``, ...: its own ``training``)."""
    return {**training.to_dict(), SAVE_TIMER: config[section]["training"][SAVE_TIMER]}


def check_methods(config: dict, processes: int) -> None:
    """The training methods' sections: each method ``methods`` lists has its section and each section its method;
    each listed method's own cross-key rules (its trainer module's ``check_config``). ``processes``: the training
    jobs' processes."""
    methods = config["methods"]
    for method in TRAINING_METHODS:
        if method == "sft":
            continue
        if method in methods and config[method] is None:
            raise SnakeskillsError(
                f"config key methods lists {method!r}, but the config has no {method} section (at least "
                f"{method}.training; config/schema.yaml describes its keys)"
            )
        if method not in methods and config[method] is not None:
            raise SnakeskillsError(
                f"the config has a {method} section, but config key methods ({', '.join(methods)}) does not list "
                f"{method!r}: add it to methods, or remove the section"
            )
    if "sft" in methods and "training" not in config["sft"]:
        raise SnakeskillsError("config key sft.training is required when methods lists sft (the default)")
    for method in methods:
        section = config[method]
        if section["method"] == "lora" and "lora" not in section:
            raise SnakeskillsError(f"config key {method}.lora (r, alpha) is required when {method}.method is lora")
        bounds = section["pass_rate"]
        if bounds["min"] > bounds["max"]:
            raise SnakeskillsError(
                f"config key {method}.pass_rate: min ({bounds['min']}) is above max ({bounds['max']}): no problem "
                "would be kept"
            )
        if training_method(method).score_key is not None:
            check_score(config, method)
        training_method(method).trainer_module().check_config(config, processes)
    if config["teacher"] is not None and "sft" not in methods:
        raise SnakeskillsError(
            "config key teacher is set, but methods does not list sft: the teacher's samples are SFT data; add sft "
            "to methods or remove the teacher"
        )
    if config["synthesis"] is not None and "sft" not in methods:
        raise SnakeskillsError(
            "config key synthesis is set, but methods does not list sft: synthesized problems feed the sft rounds; "
            "add sft to methods or remove synthesis"
        )


def check_score(config: dict, method: str) -> None:
    """A verdict other than symbolic_correct needs the LLM judge's (judge.llm), which code benchmarks do not get
    (their tests decide); the message names the method's own key (``dpo.pairs.score``, ...: ``score_key`` in the
    table of training methods)."""
    group, name = training_method(method).score_key
    key, score = f"{method}.{group}.{name}", config[method][group][name]
    if score == "symbolic_correct":
        return
    if config["judge"]["llm"] is None:
        raise SnakeskillsError(
            f"config key {key} is {score!r}, which needs the LLM judge's verdicts, but judge.llm is not set; set "
            f"judge.llm or use {key}: symbolic_correct"
        )
    code_benchmarks = [name for name in config["train_benchmarks"] if is_code_benchmark(config, name)]
    if code_benchmarks:
        raise SnakeskillsError(
            f"config key {key} is {score!r}, but train benchmark {code_benchmarks[0]!r} is a code benchmark, whose "
            f"answers the LLM judge does not read (its tests decide); use {key}: symbolic_correct"
        )
