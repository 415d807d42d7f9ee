"""How the rounds train: the training methods (config key ``methods``: sft, dpo, grpo, each with a config section of
its own and a chain of rounds of its own, all from the same base model), the tuned models' names, what a round's
training writes and continues from, what a model generates with once tuned, and the settings that decide the
weights."""

from __future__ import annotations

import re

from snakeskills.errors import SnakeskillsError
from snakeskills.plan.layout import Layout
from snakeskills.plan.resources import training_processes
from snakeskills.plan.values import check_batch_divides

METHODS = ("sft", "dpo", "grpo")
# sft's rounds are round1, round2, ...; another method's rounds carry its name: dpo-round1, grpo-round2
_TUNED_MODEL = re.compile(r"^(?:(dpo|grpo)-)?round(\d+)$")
TUNED_MODEL_PATTERN = {"sft": r"round\d+", "dpo": r"dpo-round\d+", "grpo": r"grpo-round\d+"}


def tuned_model_name(method: str, round_number: int) -> str:
    """The name of ``method``'s round ``round_number`` (in results paths and tables)."""
    return f"round{round_number}" if method == "sft" else f"{method}-round{round_number}"


def tuned_model_parts(model: str) -> tuple[str, int] | None:
    """(method, round) of a tuned model's name; ``None`` for any other name."""
    match = _TUNED_MODEL.match(model)
    return None if match is None else (match.group(1) or "sft", int(match.group(2)))


def method_section(config: dict, method: str) -> dict:
    """The config section of a training method (``sft``, ``dpo``, ``grpo``)."""
    section = config[method]
    if section is None:
        raise SnakeskillsError(f"config key methods lists {method!r}, but the config has no {method} section")
    return section


class TrainingPlan:
    """One training method's decisions: its section's method lora writes an adapter on the base model, full a
    checkpoint."""

    def __init__(self, config: dict, layout: Layout, method: str = "sft"):
        self.config = config
        self.name = method
        section = self.section = method_section(config, method)
        self.full = section["method"] == "full"
        # what a round's training writes: an adapter on the base model (lora) or a full checkpoint (full)
        self.output = layout.checkpoint if self.full else layout.adapter
        self.layout = layout

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
        # sft's keys in the order they always had: a params value that reads differently would rerun finished rounds
        keys = ("seed", "training") if self.full else ("seed", "lora", "training")
        keys += {
            "sft": (),
            "dpo": ("beta", "loss", "nll_weight"),
            "grpo": ("num_generations", "beta", "loss", "rewards", "vllm_mode"),
        }[self.name]
        settings = {key: self.section[key] for key in keys}
        if self.name == "grpo":
            settings["sampling"] = self.grpo_sampling()
        return {
            "method": self.section["method"],
            **settings,
            "processes": training_processes(self.config, gpus_available),
            "distributed": self.config["sft"]["distributed"],
        }

    def grpo_sampling(self) -> dict:
        return grpo_sampling(self.config)


def grpo_sampling(config: dict) -> dict:
    """How GRPO samples while it trains: grpo.sampling, its null keys the student's generation.sampling."""
    student, own = config["generation"]["sampling"], config["grpo"]["sampling"]
    return {key: student[key] if own[key] is None else own[key] for key in own}


def check_methods(config: dict, processes: int) -> None:
    """The training methods' sections: each method ``methods`` lists has its section and each section its method;
    the dpo and grpo sections' own cross-key rules. ``processes``: the training jobs' processes."""
    methods = config["methods"]
    for method in METHODS[1:]:
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
    if "dpo" in methods:
        dpo = config["dpo"]
        training = dpo["training"]
        if training["packing"]:
            raise SnakeskillsError("config key dpo.training.packing: preference pairs are not packed; set it false")
        check_batch_divides(training["batch_size"], processes, training["gradient_accumulation_steps"], "dpo.training")
    if "grpo" in methods:
        grpo = config["grpo"]
        training, group = grpo["training"], grpo["num_generations"]
        if training["batch_size"] % group:
            raise SnakeskillsError(
                f"config key grpo.training.batch_size ({training['batch_size']}) must be a multiple of "
                f"grpo.num_generations ({group}): a step scores whole groups of completions of one problem"
            )
        check_batch_divides(training["batch_size"], processes, training["gradient_accumulation_steps"], "grpo.training")
        temperature = grpo_sampling(config)["temperature"]
        if not temperature:
            raise SnakeskillsError(
                "config key grpo.sampling.temperature is 0 (or null and generation.sampling.temperature is 0): a "
                "group of greedy completions is all alike and GRPO learns nothing; sample with a temperature above 0"
            )
        if not any(grpo["rewards"].values()):
            raise SnakeskillsError(
                "config key grpo.rewards: every weight is 0, so every completion gets the same reward"
            )
        if grpo["vllm_mode"] is not None and config["generation"]["backend"] == "hf" and not _vllm_installed():
            raise SnakeskillsError(
                f"config key grpo.vllm_mode is {grpo['vllm_mode']!r}, but vllm is not installed here; install it "
                "on the GPU node that trains, or set grpo.vllm_mode: null (transformers samples)"
            )
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


def _vllm_installed() -> bool:
    import importlib.util

    return importlib.util.find_spec("vllm") is not None
