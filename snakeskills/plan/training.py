"""How the rounds train (config key ``sft``): what a round's training writes and continues from, what a model
generates with once tuned, and the settings that decide the weights."""

from __future__ import annotations

from snakeskills.plan.layout import Layout
from snakeskills.plan.resources import training_processes


class TrainingPlan:
    """The training method's decisions: sft.method lora writes an adapter on the base model, full a checkpoint."""

    def __init__(self, config: dict, layout: Layout):
        self.config = config
        sft = self.sft = config["sft"]
        self.method: str = sft["method"]
        self.full = self.method == "full"
        # what a round's SFT writes: an adapter on the base model (lora) or a full checkpoint (full)
        self.output = layout.checkpoint if self.full else layout.adapter
        self.layout = layout

    def tuned_checkpoint(self, model: str) -> str | None:
        """A tuned round's own checkpoint folder (full fine-tuning); ``None`` where it loads base + adapter."""
        return self.layout.checkpoint.format(model=model) if self.full else None

    def tuned_adapter(self, model: str) -> str | None:
        """A tuned round's LoRA adapter (lora); ``None`` for full fine-tuning."""
        return None if self.full else self.layout.adapter.format(model=model)

    def init(self, parent: str | None) -> list[str]:
        """What a round's training continues from (sft.init continue, from round 2 on: ``parent`` is the previous
        round): its adapter or checkpoint; none when training starts from the base model."""
        if self.sft["init"] == "base" or parent is None:
            return []
        return [self.output.format(model=parent)]

    def merged(self, tuned_models: list[str]) -> list[str]:
        """The merged base + adapter models (sft.merge, lora only)."""
        merged = self.sft["merge"] and not self.full
        return [self.layout.merged_model.format(model=m) for m in tuned_models] if merged else []

    def training_config(self, gpus_available: bool) -> dict:
        """The sft settings that decide how a round is trained (data choice and filters act through its input).

        The processes count too: each process draws its own share of every batch, so the weights differ."""
        keys = ("method", "seed", "training") if self.full else ("method", "seed", "lora", "training")
        return {
            **{key: self.sft[key] for key in keys},
            "processes": training_processes(self.config, gpus_available),
            "distributed": self.sft["distributed"],
        }
