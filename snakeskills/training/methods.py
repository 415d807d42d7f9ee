"""The one table of training methods (config key ``methods``): what each method's rounds read, train, cost and warn
about. The plan (``plan/training.py``), the rules (``rules/train.smk``), the comparison's cost table and warnings
(``results/``) and the report's training curves read it, as ``backends/specs.py`` is read for backends; the words
the report and the warnings use for each method are in ``results/method_wording.py``.

In code, "method" means the training algorithm (sft, dpo, kto, grpo); whether a round trains a LoRA adapter or every
weight is its "weights" (the config key stays ``<method>.method: lora | full``).

Adding a method: its trainer module (``train(run, **options)``, ``check_config(config, processes)``), its data
module and rule (``rules/<name>.smk``), an entry here, its schema section; see docs/development.md."""

from __future__ import annotations

import importlib
import re
from dataclasses import dataclass

from snakeskills.errors import SnakeskillsError

# the weights a round trains (config key <method>.method)
WEIGHTS = ("lora", "full")


@dataclass(frozen=True)
class Records:
    """What a method's round trains on, counted: its column in the cost table (its unit in its name: the records its
    trainer drew, ``results.method_comparison.records_trained``; what it holds is worded under the table by
    ``results.method_wording.RECORDS_MEANING``), the unit in words (warnings) and the stats.json key counting the
    round's data (too few warn: warnings.min_sft_examples)."""

    column: str
    unit: str
    stat: str


@dataclass(frozen=True)
class TrainingMethod:
    name: str
    # what its rounds' names start with: sft-round1, sft-round2 for sft (the first method, whose names came first);
    # dpo-round1, ... for the others
    round_prefix: str
    # the Layout attributes of a round's data file and its stats.json, written by the method's data rule in
    # rules/<name>.smk (sft_data, preference_pairs, kto_samples, rl_problems)
    data: str
    stats: str
    # the module whose ``train(run, **options)`` trains a round and whose ``check_config`` checks its section
    trainer: str
    # the section's keys that decide the weights beside seed, lora and training; each is also the trainer's keyword
    # argument of the same name (GRPO's sampling with its null keys filled from generation.sampling)
    options: tuple[str, ...]
    # the trainer also takes each train benchmark's judge and the student's reasoning settings (an online reward)
    judges_rewards: bool
    # the stats.json key counting the distinct train problems the round's data covers (the cost table's
    # train_problems; too few warn: warnings.min_sft_problems)
    problems_stat: str
    # what the round's data holds where a record is not a problem (None: GRPO trains on the problems themselves)
    records: Records | None
    # the report's curve: (log_history key, axis label), the first one its trainer logs is drawn
    curves: tuple[tuple[str, str], ...]
    # the training job's runtime per parameter and epoch as a multiple of SFT's (a reference pass, sampled groups)
    runtime_factor: int
    # full fine-tuning keeps a frozen copy of the starting model as the reference when beta > 0
    frozen_reference: bool
    # the section's key choosing the verdict that says a judged sample is correct (symbolic_correct, judge_correct,
    # both): which samples SFT keeps, which DPO pairs as chosen, which KTO calls desirable. None: no choice (GRPO's
    # reward is the benchmark's rule-based judge)
    score_key: tuple[str, str] | None
    # the trainer samples completions while it trains (the cost table's completions_sampled)
    samples_while_training: bool = False
    # the section key saying how many units of <method>.training.batch_size one record makes (GRPO: a problem's
    # group of completions, num_generations); a batch is then only ever whole (TRL's sampler drops a partial one).
    # None: a batch is batch_size records, the last one of a pass partial
    batch_units_key: str | None = None
    # the section's sampling keys left null take the student's generation.sampling (the plan fills them)
    fills_sampling: bool = False
    # its records that rest on a verdict of correct, in words (a round's stats.json counts how many of them a fallback
    # extraction credited: judging/extraction_routes.credited_counts). None: it keeps no judged samples (GRPO)
    credited: str | None = None
    # its trainer's count of the tokens it trained (the logged ``num_tokens``) is kept in the trainer state, so a run
    # resumed from a checkpoint goes on counting (TRL's GRPO); otherwise it counts from the process start (TRL's SFT,
    # DPO and KTO: a resumed run's count leaves out the steps before the resume)
    counts_tokens_across_resumes: bool = False

    def tuned_model_name(self, round_number: int) -> str:
        """The name of the method's round ``round_number`` (in results paths and tables)."""
        return f"{self.round_prefix}round{round_number}"

    @property
    def tuned_model_pattern(self) -> str:
        """The regular expression of its rounds' names (the training rule's wildcard constraint)."""
        return rf"{self.round_prefix}round\d+"

    def checkpoint_model_name(self, round_number: int, step: int) -> str:
        """The name of round ``round_number``'s weights after optimizer step ``step`` (a checkpoint evaluated on the
        validation split: ``<method>.training.eval_every_steps``), e.g. sft-round1-step40."""
        return f"{self.tuned_model_name(round_number)}-step{step}"

    @property
    def checkpoint_model_pattern(self) -> str:
        """The regular expression of its rounds' checkpoints' names (the training segment rule's constraint)."""
        return rf"{self.round_prefix}round\d+-step\d+"

    def trainer_module(self):
        return importlib.import_module(self.trainer)


_TRAINING_CURVE_LOSS = ("loss", "training loss")

SFT = TrainingMethod(
    name="sft",
    round_prefix="sft-",
    data="sft_data",
    stats="sft_stats",
    trainer="snakeskills.training.sft",
    options=(),
    judges_rewards=False,
    problems_stat="problems_covered",
    records=Records(
        column="sft_examples",
        unit="SFT examples",
        stat="kept",
    ),
    curves=(_TRAINING_CURVE_LOSS,),
    runtime_factor=1,
    frozen_reference=False,
    score_key=("filters", "score"),
    credited="SFT examples",
)
DPO = TrainingMethod(
    name="dpo",
    round_prefix="dpo-",
    data="preference_pairs",
    stats="preference_stats",
    trainer="snakeskills.training.dpo",
    options=("beta", "loss", "nll_weight", "precompute_reference"),
    judges_rewards=False,
    problems_stat="problems_paired",
    records=Records(
        column="dpo_pairs",
        unit="DPO pairs",
        stat="pairs",
    ),
    curves=(("rewards/accuracies", "preference accuracy"), _TRAINING_CURVE_LOSS),
    runtime_factor=2,
    frozen_reference=True,
    score_key=("pairs", "score"),
    credited="chosen answers",
)
KTO = TrainingMethod(
    name="kto",
    round_prefix="kto-",
    data="kto_samples",
    stats="kto_stats",
    trainer="snakeskills.training.kto",
    options=("beta", "loss", "desirable_weight", "undesirable_weight"),
    judges_rewards=False,
    problems_stat="problems_kept",
    records=Records(
        column="kto_samples",
        unit="KTO samples",
        stat="samples",
    ),
    curves=(("rewards/margins", "reward margin (desirable - undesirable)"), _TRAINING_CURVE_LOSS),
    runtime_factor=2,
    frozen_reference=True,
    score_key=("samples", "score"),
    credited="desirable samples",
)
GRPO = TrainingMethod(
    name="grpo",
    round_prefix="grpo-",
    data="rl_problems",
    stats="rl_stats",
    trainer="snakeskills.training.grpo",
    options=(
        "num_generations",
        "beta",
        "loss",
        "sampling",
        "rewards",
        "rollouts",
        "steps_per_generation",
        "num_iterations",
        "vllm_mode",
    ),
    judges_rewards=True,
    credited="completions rewarded as correct",
    problems_stat="problems_in_pass_rate",
    records=None,
    curves=(("reward", "mean reward of the sampled completions"), _TRAINING_CURVE_LOSS),
    runtime_factor=4,
    frozen_reference=True,
    score_key=None,
    samples_while_training=True,
    fills_sampling=True,
    batch_units_key="num_generations",
    counts_tokens_across_resumes=True,
)

# in the order the schema lists them
TRAINING_METHODS: dict[str, TrainingMethod] = {method.name: method for method in (SFT, DPO, KTO, GRPO)}


def training_method(name: str) -> TrainingMethod:
    """The entry of a method's name, or an error listing the known ones."""
    if name not in TRAINING_METHODS:
        raise SnakeskillsError(f"training method {name!r} is not one of {', '.join(TRAINING_METHODS)}")
    return TRAINING_METHODS[name]


def checkpoint_model_parts(model: str) -> tuple[str, int, int] | None:
    """(method, round, step) of a round's checkpoint's name (``TrainingMethod.checkpoint_model_name``); ``None`` for
    any other name."""
    for method in TRAINING_METHODS.values():
        match = re.fullmatch(rf"{re.escape(method.round_prefix)}round(\d+)-step(\d+)", model)
        if match:
            return method.name, int(match.group(1)), int(match.group(2))
    return None


def tuned_model_parts(model: str) -> tuple[str, int] | None:
    """(method, round) of a tuned model's name; ``None`` for any other name."""
    for method in TRAINING_METHODS.values():
        match = re.fullmatch(rf"{re.escape(method.round_prefix)}round(\d+)", model)
        if match:
            return method.name, int(match.group(1))
    return None
