"""GRPO's trainer: online RL on TRL's ``GRPOTrainer``. Each step samples ``num_generations`` completions of each of its
train problems (``rl_problems.write_rl_problems``) from the model being trained, and rewards each with the
benchmark's own rule-based judge (``judge.judge_records``: the verdict the judge stage would give the same text),
plus optional answer-format, length and tool terms (``grpo_rewards``); a LoRA adapter (the reference is the model
with the adapter off) or every weight is trained.

Prompts are encoded exactly as generation encodes them (``prompts.encode_messages``), not re-rendered by the
trainer, so the policy is trained on the inputs it is evaluated on."""

from __future__ import annotations

import json
import logging
import os

from snakeskills.backends.specs import backend_spec
from snakeskills.errors import SnakeskillsError
from snakeskills.io import iter_jsonl
from snakeskills.judging.extraction_routes import ROUTES, is_fallback
from snakeskills.prompts import encode_messages
from snakeskills.settings.generation import Generation, Sampling
from snakeskills.training import trl_names
from snakeskills.training.group_forward import shared_prompt_logps, trl_forward_reason
from snakeskills.training.grpo_rewards import (
    CREDITED,
    CREDITED_BY_FALLBACK,
    REWARD_TERMS,
    TRL_TOOL_MASK,
    JudgeRewards,
    credited_counts_of,
    reward_weight,
    reward_weights,
)
from snakeskills.training.rollouts import BackendRollouts
from snakeskills.training.rounds import RoundRun, run_round
from snakeskills.training.trainer import check_batch_divides, completion_positions_only, tokenized_trainer

logger = logging.getLogger(__name__)


def rl_dataset_rows(problems: list[dict], tokenizer, **formatting):
    """The trainer's rows (``prompt``: the prompt's text, a key into the returned token ids; ``row``: the problem's
    fields as JSON, for the judge) and each prompt's token ids as generation builds them (``formatting``:
    ``RoundRun.prompt_format``)."""
    rows, prompt_ids = [], {}
    for problem in problems:
        ids = list(encode_messages(problem["prompt"], tokenizer=tokenizer, **formatting))
        text = tokenizer.decode(ids)
        if prompt_ids.setdefault(text, ids) != ids:
            raise SnakeskillsError(f"two GRPO prompts read {text!r} but differ in their tokens")
        fields = {key: value for key, value in problem.items() if key != "prompt"}
        rows.append({"prompt": text, "row": json.dumps(fields)})
    return rows, prompt_ids


# the attributes of TRL's RepeatSampler that EpochRepeatSampler reads (its constructor's arguments first) or sets
SAMPLER_ARGUMENTS = ("data_source", "mini_repeat_count", "batch_size", "repeat_count", "shuffle", "seed")
SAMPLER_STATE = ("num_samples", "generator")


def epoch_sampler_class():
    """TRL's ``RepeatSampler`` whose order in epoch e is a function of its seed and e alone: the order TRL's sampler
    draws in epoch e of an uninterrupted run (its generator, seeded once, carries on from epoch to epoch: epoch e takes
    the generator's permutation e + 1), drawn again from the seed. The Trainer gives the sampler its epoch
    (``set_epoch``) before each epoch's first batch; a resumed run starts in a new process and no longer iterates the
    epochs it already trained, so TRL's own sampler would give the epoch it resumes in, and each after it, the order of
    the run's first epochs again."""
    import torch
    from trl.trainer.utils import RepeatSampler

    shuffled = RepeatSampler(data_source=[0], mini_repeat_count=1, batch_size=1, repeat_count=1, shuffle=True, seed=0)
    trl_names.require_attributes(
        shuffled, SAMPLER_ARGUMENTS + SAMPLER_STATE, "reads to draw each epoch's order of problems from the seed"
    )

    class EpochRepeatSampler(RepeatSampler):
        epoch = 0

        def set_epoch(self, epoch: int) -> None:
            self.epoch = epoch

        def __iter__(self):
            if self.shuffle:
                self.generator = torch.Generator()
                self.generator.manual_seed(self.seed)
                for _ in range(self.epoch):  # the permutations the epochs before this one took
                    torch.randperm(self.num_samples, generator=self.generator)
            return super().__iter__()

    return EpochRepeatSampler


# the private methods of TRL's GRPOTrainer that TokenizedGRPOTrainer overrides: the parameters it passes, and why
OVERRIDDEN = {
    "_tokenize_prompts": (("prompts",), "overrides to give the prompts' token ids as generation encodes them"),
    "_get_per_token_logps_and_entropies": (
        (
            "model",
            "input_ids",
            "attention_mask",
            "logits_to_keep",
            "batch_size",
            "compute_entropy",
            "compute_aux_loss",
        ),
        "overrides to compute each group's prompt once",
    ),
    "_get_train_sampler": (("dataset",), "overrides to draw each epoch's order of problems from the seed"),
}


def runs_adapter(model, adapter: str | None) -> bool:
    """Whether ``model`` computes with these weights now: a peft model with its adapters on and ``adapter`` the
    active one (TRL's reference forward switches them off, or to a copy named ``ref`` when an adapter is trained
    further); any other model, with ``adapter`` None."""
    from peft.tuners.tuners_utils import BaseTunerLayer

    if getattr(model, "active_adapter", None) != adapter:
        return False
    return not any(module.disable_adapters for module in model.modules() if isinstance(module, BaseTunerLayer))


def grpo_trainer_class():
    """``GRPOTrainer`` whose prompts are token ids given with the dataset (``prompt_ids``, set on the trainer), not
    text for it to tokenize, whose problems come in each epoch's order however the run was interrupted and
    resumed (``epoch_sampler_class``), and whose forwards compute each group's prompt once
    (``group_forward.shared_prompt_logps``, each path taken logged once with its reason) and project only the
    completions' positions onto the vocabulary (``trainer.completion_positions_only``). With ``judge_rewards`` (the
    correct term's ``JudgeRewards``), each logged step counts the completions it rewarded and those a fallback
    extraction credited (``CREDITED``, ``CREDITED_BY_FALLBACK``). The private TRL names it overrides or reads are
    checked first (``trl_names``)."""
    from trl import GRPOTrainer

    trl_names.require_methods(GRPOTrainer, OVERRIDDEN)
    sampler_class = epoch_sampler_class()

    class TokenizedGRPOTrainer(GRPOTrainer):
        prompt_token_ids: dict[str, list[int]] = {}
        judge_rewards: JudgeRewards | None = None

        def __init__(self, *arguments, **keywords):
            # the forwards logged this round: (with gradients, why TRL's own; None: the shared prompt's)
            self.forward_paths: set[tuple[bool, str | None]] = set()
            # the project's last sampling (``rollouts.BackendRollouts`` sets it): each completion's ids, each drawn
            # token's log-probability under the weights that drew it, and the policy's active adapter then
            self.sampled: tuple[list[list[int]], list[list[float]], str | None] | None = None
            self.sampled_logps_logged = False
            super().__init__(*arguments, **keywords)

        def log_forward_path(self, reason: str | None) -> None:
            """Say once a round which forward computes the log-probabilities, with gradients (the policy's) and
            without (the reference's, the old policy's), and why TRL's own."""
            import torch

            path = (torch.is_grad_enabled(), reason)
            if path in self.forward_paths:
                return
            self.forward_paths.add(path)
            if self.accelerator.is_main_process:
                forwards = f"GRPO forwards {'with' if path[0] else 'without'} gradients"
                if reason is None:
                    logger.info("%s: each group's prompt computed once (group_forward.shared_prompt_logps)", forwards)
                else:
                    logger.info("%s: TRL's own, over whole sequences, since %s", forwards, reason)

        def _tokenize_prompts(self, prompts):
            return [list(self.prompt_token_ids[prompt]) for prompt in prompts], None, {}

        def _get_per_token_logps_and_entropies(
            self,
            model,
            input_ids,
            attention_mask,
            logits_to_keep,
            batch_size=None,
            compute_entropy=False,
            compute_aux_loss=False,
            **inputs,
        ):
            import torch

            old_policy = self.sampled_logps(model, input_ids, attention_mask, logits_to_keep, compute_entropy)
            if old_policy is not None:
                return old_policy, None, None
            with completion_positions_only():  # the policy's, the reference's and the old policy's forwards
                reason = trl_forward_reason(
                    model,
                    input_ids,
                    attention_mask,
                    logits_to_keep,
                    processes=self.accelerator.num_processes,
                    compute_aux_loss=compute_aux_loss,
                    inputs=inputs,
                )
                self.log_forward_path(reason)
                if reason is not None:
                    return super()._get_per_token_logps_and_entropies(
                        model,
                        input_ids,
                        attention_mask,
                        logits_to_keep,
                        batch_size,
                        compute_entropy,
                        compute_aux_loss,
                        **inputs,
                    )
                batch_size = batch_size or input_ids.size(0)
                chunks = [
                    shared_prompt_logps(
                        model,
                        input_ids[start : start + batch_size],
                        attention_mask[start : start + batch_size],
                        logits_to_keep,
                        compute_entropy,
                        self.accelerator.autocast,
                    )
                    for start in range(0, input_ids.size(0), batch_size)
                ]
            logps = torch.cat([chunk[0] for chunk in chunks])
            entropies = torch.cat([chunk[1] for chunk in chunks]) if compute_entropy else None
            return logps, entropies, None

        def sampled_logps(self, model, input_ids, attention_mask, logits_to_keep: int, compute_entropy: bool):
            """The old policy's log-probabilities as the last sampling drew them, where this forward is the old
            policy's (TRL's, once per sampled batch, when a sampling serves several steps: ``steps_per_generation``,
            ``num_iterations``) over that sampling's completions; else None. The sampling drew them from the
            policy's weights of then, under the temperature-scaled softmax as TRL's forward scores
            (``hf.drawn_logprobs``), so they equal what that forward computes up to rounding, without it. Used once."""
            import torch

            if torch.is_grad_enabled():  # a policy forward to train on: the sampling's weights are past
                self.sampled = None
            if (
                self.sampled is None
                or compute_entropy
                or model is not self.model
                or not runs_adapter(self.accelerator.unwrap_model(model), self.sampled[2])  # the reference's
            ):
                return None
            ids, logprobs, _ = self.sampled
            completions = input_ids[:, input_ids.shape[1] - logits_to_keep :].tolist()
            if len(ids) != len(completions):
                return None
            values = torch.zeros((len(ids), logits_to_keep), dtype=torch.float32, device=input_ids.device)
            for row, (row_ids, row_logprobs, completion) in enumerate(zip(ids, logprobs, completions, strict=True)):
                width = min(len(row_ids), logits_to_keep)
                if len(row_logprobs) != len(row_ids) or completion[:width] != row_ids[:width]:
                    return None
                values[row, :width] = torch.tensor(row_logprobs[:width])
            self.sampled = None
            if not self.sampled_logps_logged and self.accelerator.is_main_process:
                self.sampled_logps_logged = True
                logger.info("GRPO: the old policy's log-probabilities are the sampling's own (no forward)")
            return values

        def _get_train_sampler(self, dataset=None):
            sampler = super()._get_train_sampler(dataset)
            self.epoch_sampler = sampler_class(**{key: getattr(sampler, key) for key in SAMPLER_ARGUMENTS})
            return self.epoch_sampler

        def get_train_dataloader(self):
            loader = super().get_train_dataloader()
            # the loader passes set_epoch on to the sampler its batch sampler holds; in several processes, where a
            # shard of each batch wraps the batch sampler, the shard holds it only once set so (as accelerate sets
            # its own seeded sampler), and without it a run resumed inside an epoch would not reach it
            if hasattr(loader, "set_sampler"):
                loader.set_sampler(self.epoch_sampler)
            return loader

        def log(self, logs, start_time=None):
            if "loss" in logs and self.judge_rewards is not None:  # a step's line (every process logs it)
                logs.update(self.credited_counts())
            super().log(logs, start_time)

        def credited_counts(self) -> dict[str, int]:
            """The completions the correct term rewarded since the last logged step, over every process, and those
            a fallback extraction credited (in all and by route, the routes that credited any)."""
            import torch

            fallbacks = [route for route in ROUTES if is_fallback(route)]
            routes = self.judge_rewards.take_credited()
            counts = torch.tensor(
                [len(routes), *(routes.count(route) for route in fallbacks)], device=self.accelerator.device
            )
            counts = self.accelerator.reduce(counts, reduction="sum").tolist()
            logged = {CREDITED: counts[0], CREDITED_BY_FALLBACK: sum(counts[1:])}
            by_route = zip(fallbacks, counts[1:], strict=True)
            logged.update({f"{CREDITED_BY_FALLBACK}/{route}": count for route, count in by_route if count})
            return logged

        @property
        def completions_sampled(self) -> int:
            """The completions sampled so far: a step's batch is that many completions (groups of a problem)."""
            args = self.args
            return (
                self.state.global_step
                * args.per_device_train_batch_size
                * args.gradient_accumulation_steps
                * (args.world_size)
            )

    return TokenizedGRPOTrainer


def train(
    run: RoundRun,
    *,
    num_generations: int,
    beta: float,
    loss: str,
    sampling: dict,
    rewards: dict,
    judges: dict[str, dict],
    reasoning: dict,
    rollouts: str = "hf",
    steps_per_generation: int | None = None,
    num_iterations: int = 1,
    vllm_mode: str | None = None,
    tools: dict | None = None,
) -> dict:
    """Train with GRPO on the round's problems (``run.data_path``) and save the result (``rounds.run_round``), with
    the logged reward, KL and completion length by step in its metrics' ``log_history``. The completions are sampled
    by vLLM inside the trainer (``vllm_mode``), else by ``rollouts``: ``hf`` the project's decoding loop
    (``rollouts.BackendRollouts``), ``trl`` TRL's own generate. Resumes from the newest complete Trainer checkpoint of
    the same run (training.checkpoint_minutes, checkpoint_steps). With ``tools`` (the config's section) the hf
    rollouts call the tool between turns (``tools.loop``); TRL masks the tools' outputs out of the loss."""
    sampling = typed_sampling(sampling)
    if not sampling.temperature:
        raise SnakeskillsError(
            "grpo.sampling.temperature is 0: a group of greedy completions has no spread to learn from"
        )
    problems = list(iter_jsonl(run.data_path))
    if not problems:
        raise SnakeskillsError(f"{run.data_path}: no GRPO problems to train on")
    terms = [term for term in REWARD_TERMS if rewards.get(term) and any(reward_weights(rewards, term))]
    if not terms:
        raise SnakeskillsError("grpo.rewards: every weight is 0, so every completion has the same reward")

    def build(model, tokenizer):
        from trl import GRPOConfig

        rows, prompt_ids = rl_dataset_rows(problems, tokenizer, **run.prompt_format())
        common = run.trainer_arguments()
        common["logging_steps"] = 1  # every step's reward: the report plots reward by step
        settings = {
            "num_generations": num_generations,
            "max_completion_length": sampling.max_new_tokens,
            "temperature": sampling.temperature,
            "top_p": sampling.top_p,
            "top_k": sampling.top_k,
            "beta": beta,
            "loss_type": loss,
            "reward_weights": [reward_weight(rewards, term) for term in terms],
            "steps_per_generation": steps_per_generation,
            "num_iterations": num_iterations,
        }
        vllm = {"use_vllm": True, "vllm_mode": vllm_mode} if vllm_mode is not None else {}
        arguments = GRPOConfig(**settings, **vllm, **common)
        sampler = rollouts if vllm_mode is None else "vllm"
        hyperparameters = {**common, **settings, "rollouts": sampler, "reasoning": reasoning, "judges": judges}
        if tools is not None:
            hyperparameters["tools"] = tools
        hyperparameters["vllm_mode"] = vllm_mode
        resume_from = run.claim_checkpoints(arguments, hyperparameters, rows)
        # the judge logs a line per batch it judges; here that is every step, which the step lines already summarize
        logging.getLogger("snakeskills.judging.judge").setLevel(logging.WARNING)
        reward = JudgeRewards(
            judges,
            reasoning,
            sampling.max_new_tokens,
            num_workers=max(1, run.threads),
            tool_preference=rewards.get("tool_preference"),
        )
        functions = dict(zip(REWARD_TERMS, reward.functions(), strict=True))
        trainer_class = grpo_trainer_class()
        trainer_class.prompt_token_ids = prompt_ids
        trainer_class.judge_rewards = reward if "correct" in terms else None
        reward_funcs = [functions[term] for term in terms]
        extra = {}
        if sampler == "hf":
            batch = arguments.per_device_train_batch_size * arguments.steps_per_generation
            use = None
            if tools is not None:
                from trl import GRPOTrainer

                from snakeskills.settings.tools import Tools
                from snakeskills.tools.loop import tool_use

                trl_names.require_key(GRPOTrainer, TRL_TOOL_MASK, "gives as the mask of the tools' tokens")
                use = tool_use(Tools.from_dict(tools, "tools"), run.chat_template_kwargs)
            extra["rollout_func"] = BackendRollouts(prompt_ids, sampling, seed=run.seed, batch_size=batch, tools=use)
        trainer = tokenized_trainer(
            trainer_class, model, tokenizer, arguments, rows, training=run.training, reward_funcs=reward_funcs, **extra
        )
        trainer.add_callback(saving_at_samplings(sampling_cycle(arguments)))
        return trainer, resume_from, len(rows)

    metrics = run_round(run, "grpo", build)
    counts = credited_counts_of(metrics["log_history"])
    if counts.get("fallback_credited") and os.environ.get("RANK", "0") == "0":  # the main process says it
        routes = ", ".join(f"{count} by {route}" for route, count in counts["fallback_credited_by_route"].items())
        logger.info(
            "%d of the %d completions the correct term rewarded were credited by a fallback extraction (%s)",
            counts["fallback_credited"],
            counts["credited"],
            routes,
        )
    return metrics


def sampling_cycle(arguments) -> int:
    """Optimizer steps that one sampling serves: TRL samples once every steps_per_generation x num_iterations
    micro-steps (batches), and trains on what it sampled until then."""
    micro_steps = arguments.steps_per_generation * arguments.num_iterations
    return max(1, micro_steps // arguments.gradient_accumulation_steps)


def saving_at_samplings(cycle: int):
    """A callback (the trainer's last) that lets a checkpoint be saved only at a step where a new sampling starts
    (every ``cycle`` steps): the completions sampled for the steps after it are not in the checkpoint, so a run
    resumed between two samplings would sample again from newer weights. A save due by steps or by time in between
    is saved at the next such step (or, at the last step, with the trained model)."""
    from transformers import TrainerCallback

    class SaveAtSamplings(TrainerCallback):
        def __init__(self):
            self.due = False  # a save asked for since the last sampling

        def on_step_end(self, args, state, control, **kwargs):
            if state.global_step >= state.max_steps:
                return control
            if state.global_step % cycle:
                self.due = self.due or control.should_save
                control.should_save = False
            elif self.due and not control.should_training_stop:  # stopping: the trained model is saved instead
                control.should_save = True
            return control

        def on_save(self, args, state, control, **kwargs):
            self.due = False

    return SaveAtSamplings()


def filled_sampling(config: dict, method: str) -> dict:
    """How a method samples while it trains: ``<method>.sampling``, its null keys the student's
    generation.sampling."""
    student, own = config["generation"]["sampling"], config[method]["sampling"]
    return {key: student[key] if own[key] is None else own[key] for key in own}


def typed_sampling(sampling: dict) -> Sampling:
    """``filled_sampling``'s dict (a rule's params) as the trainer samples with it: without stop strings (a
    completion ends at EOS or max_new_tokens)."""
    return Sampling.from_dict({**sampling, "stop": []}, "grpo.sampling")


def check_config(config: dict, processes: int) -> None:
    """The grpo section's cross-key rules (plan time)."""
    import importlib.util

    grpo = config["grpo"]
    training, group = grpo["training"], grpo["num_generations"]
    if training["batch_size"] % group:
        raise SnakeskillsError(
            f"config key grpo.training.batch_size ({training['batch_size']}) must be a multiple of "
            f"grpo.num_generations ({group}): a step scores whole groups of completions of one problem"
        )
    check_batch_divides(training["batch_size"], processes, training["gradient_accumulation_steps"], "grpo.training")
    accumulation, steps_per_generation = training["gradient_accumulation_steps"], grpo["steps_per_generation"]
    if steps_per_generation is not None and steps_per_generation % accumulation:
        raise SnakeskillsError(
            f"config key grpo.steps_per_generation ({steps_per_generation}) must be a multiple of "
            f"grpo.training.gradient_accumulation_steps ({accumulation}): one sampling serves whole optimizer steps"
        )
    if not typed_sampling(filled_sampling(config, "grpo")).temperature:
        raise SnakeskillsError(
            "config key grpo.sampling.temperature is 0 (or null and generation.sampling.temperature is 0): a "
            "group of greedy completions is all alike and GRPO learns nothing; sample with a temperature above 0"
        )
    if not any(grpo["rewards"].values()):
        raise SnakeskillsError("config key grpo.rewards: every weight is 0, so every completion gets the same reward")
    student_runs_vllm = backend_spec(
        Generation.from_dict(config["generation"], "generation")
    ).runs_vllm  # then vLLM is installed where jobs run
    if grpo["vllm_mode"] is not None and not student_runs_vllm and importlib.util.find_spec("vllm") is None:
        raise SnakeskillsError(
            f"config key grpo.vllm_mode is {grpo['vllm_mode']!r}, but vllm is not installed here; install it "
            "on the GPU node that trains, or set grpo.vllm_mode: null (grpo.rollouts samples)"
        )
