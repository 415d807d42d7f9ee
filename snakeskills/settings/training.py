"""How training rounds run: the ``training`` section (nodes, GPUs, processes, DDP or FSDP: every method's), a
method's trainer settings (``<method>.training``), and what a round's job trains with, one class per method
(``ROUND_SETTINGS``), as TRL has one config class per trainer."""

from __future__ import annotations

from dataclasses import dataclass

from snakeskills.settings.section import Section, optional


@dataclass(frozen=True)
class TrainingRun(Section):
    """The ``training`` section: how any round runs."""

    SCHEMA = "#/properties/training"

    nodes: int
    gpus: int | None
    processes: int | None
    distributed: str


@dataclass(frozen=True)
class Trainer(Section):
    """A method's ``training`` settings (``definitions/training``, GRPO's ``definitions/rl_training``): a round's job
    reads them without ``checkpoint_minutes``, which changes no weights (it comes from the config)."""

    SCHEMA = "#/definitions/training"

    num_epochs: float
    learning_rate: float
    batch_size: int
    weight_decay: float
    warmup_steps: float
    checkpoint_steps: int
    gradient_accumulation_steps: int
    gradient_checkpointing: bool
    bf16: bool | str
    max_steps: int | None = optional()
    max_length: int | None = optional()  # SFT, DPO, KTO
    packing: bool | None = optional()  # SFT, DPO, KTO
    checkpoint_minutes: float | None = optional()
    eval_every_steps: int | list | None = optional()


@dataclass(frozen=True, kw_only=True)
class Round(Section):
    """What a round's job trains with (``plan.training.TrainingPlan.training_config``): lora or full, the seed, the
    LoRA settings (lora only), the trainer's settings, the method's own options, the processes on each node, how
    they share the model, and the nodes when more than one."""

    method: str
    seed: int
    training: Trainer
    processes: int
    distributed: str
    lora: dict | None = optional()
    nodes: int | None = optional()  # absent on one node
    # absent unless tools are called through the chat template: the functions the prompts offer and the template
    # (``RoundRun.functions`` / ``template``)
    chat_tools: dict | None = optional()


@dataclass(frozen=True, kw_only=True)
class SFTRound(Round):
    pass


@dataclass(frozen=True, kw_only=True)
class DPORound(Round):
    beta: float
    loss: str
    nll_weight: float
    precompute_reference: bool


@dataclass(frozen=True, kw_only=True)
class KTORound(Round):
    beta: float
    loss: str
    desirable_weight: float
    undesirable_weight: float


@dataclass(frozen=True, kw_only=True)
class GRPORound(Round):
    num_generations: int
    beta: float
    loss: str
    sampling: dict
    rewards: dict
    rollouts: str
    steps_per_generation: int | None
    num_iterations: int
    vllm_mode: str | None


ROUND_SETTINGS: dict[str, type[Round]] = {"sft": SFTRound, "dpo": DPORound, "kto": KTORound, "grpo": GRPORound}
