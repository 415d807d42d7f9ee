"""GRPO stage: online RL on TRL's ``GRPOTrainer``. Each step samples ``num_generations`` completions of each of its
train problems (``training_problems.write_rl_problems``) from the model being trained, and rewards each with the
benchmark's own rule-based judge (``judge.judge_records``: the verdict the judge stage would give the same text),
plus optional answer-format and length terms; a LoRA adapter (the reference is the model with the adapter off) or
every weight is trained.

Prompts are encoded exactly as generation encodes them (``prompts.encode_messages``), not re-rendered by the
trainer, so the policy is trained on the inputs it is evaluated on."""

from __future__ import annotations

import json
import logging
from pathlib import Path

from snakeskills.errors import SnakeskillsError
from snakeskills.io import iter_jsonl
from snakeskills.model_job import text_fields
from snakeskills.prompts import encode_messages
from snakeskills.sft import METHODS, run_identity

logger = logging.getLogger(__name__)

# the reward terms, in the order their weights are given to the trainer (grpo.rewards)
REWARD_TERMS = ("correct", "answer_format", "length")


class JudgeRewards:
    """The reward terms of a batch of completions, from one judging of each completion: ``correct`` (1 when the
    benchmark's judge says correct), ``answer_format`` (1 when it reads an answer), ``length`` (the completion's
    tokens as a share of ``max_new_tokens``). ``judges``: each benchmark's judge section; ``reasoning``: the
    student's parse_reasoning settings (the judge reads the answer after the thinking, as for generated samples)."""

    def __init__(self, judges: dict[str, dict], reasoning: dict, max_new_tokens: int, num_workers: int):
        self.judges, self.reasoning = judges, reasoning
        self.max_new_tokens, self.num_workers = max_new_tokens, num_workers
        # the last batch's completions (held, so that no other list can take their identity) and verdicts
        self._batch: tuple[list[str], list[dict]] | None = None

    def judged(self, completions: list[str], rows: list[str]) -> list[dict]:
        """The batch's records judged (once per batch: every term reads the same verdicts)."""
        from snakeskills.judge import judge_records

        if self._batch is not None and self._batch[0] is completions:
            return self._batch[1]
        records = [
            {**json.loads(row), **text_fields(completion, "generation", self.reasoning)}
            for completion, row in zip(completions, rows, strict=True)
        ]
        judged: list[dict | None] = [None] * len(records)
        for benchmark, judge in self.judges.items():
            indices = [index for index, record in enumerate(records) if record["benchmark"] == benchmark]
            if indices:
                verdicts = judge_records([records[i] for i in indices], judge, num_workers=self.num_workers)
                for index, record in zip(indices, verdicts, strict=True):
                    judged[index] = record
        missing = [records[i]["benchmark"] for i, record in enumerate(judged) if record is None]
        if missing:
            raise SnakeskillsError(f"no judge for benchmark {missing[0]!r} of a GRPO problem")
        self._batch = (completions, judged)
        return judged

    def functions(self) -> list:
        """One reward function per term (TRL logs each as rewards/<name>)."""

        def correct(prompts, completions, completion_ids, row, **_):
            return [float(record["symbolic_correct"]) for record in self.judged(completions, row)]

        def answer_format(prompts, completions, completion_ids, row, **_):
            return [float(record["predicted_answer"] is not None) for record in self.judged(completions, row)]

        def length(prompts, completions, completion_ids, row, **_):
            return [len(ids) / self.max_new_tokens for ids in completion_ids]

        return [correct, answer_format, length]


def rl_dataset_rows(problems: list[dict], tokenizer, *, chat_template: bool, chat_template_kwargs: dict):
    """The trainer's rows (``prompt``: the prompt's text, a key into the returned token ids; ``row``: the problem's
    fields as JSON, for the judge) and each prompt's token ids as generation builds them."""
    rows, prompt_ids = [], {}
    for problem in problems:
        ids = list(
            encode_messages(
                problem["prompt"],
                chat_template=chat_template,
                chat_template_kwargs=chat_template_kwargs,
                tokenizer=tokenizer,
            )
        )
        text = tokenizer.decode(ids)
        if prompt_ids.setdefault(text, ids) != ids:
            raise SnakeskillsError(f"two GRPO prompts read {text!r} but differ in their tokens")
        fields = {key: value for key, value in problem.items() if key != "prompt"}
        rows.append({"prompt": text, "row": json.dumps(fields)})
    return rows, prompt_ids


def grpo_trainer_class():
    """``GRPOTrainer`` whose prompts are token ids given with the dataset (``prompt_ids``, set on the trainer), not
    text for it to tokenize."""
    from trl import GRPOTrainer

    class TokenizedGRPOTrainer(GRPOTrainer):
        prompt_token_ids: dict[str, list[int]] = {}

        def _tokenize_prompts(self, prompts):
            return [list(self.prompt_token_ids[prompt]) for prompt in prompts], None, {}

    return TokenizedGRPOTrainer


def train_grpo(
    *,
    method: str,
    base_model_path: str,
    problems_path: str | Path,
    output_dir: str | Path,
    lora: dict | None,
    training: dict,
    num_generations: int,
    beta: float,
    loss: str,
    sampling: dict,
    rewards: dict,
    judges: dict[str, dict],
    reasoning: dict,
    vllm_mode: str | None,
    chat_template: bool,
    chat_template_kwargs: dict,
    seed: int,
    threads: int,
    dtype: str,
    trust_remote_code: bool,
    init_path: str | Path | None = None,
    processes: int = 1,
    distributed: str = "ddp",
) -> dict:
    """Train with GRPO on the problems and save the result, with its tokenizer and metrics (the logged reward, KL
    and completion length by step in ``log_history``), to ``output_dir`` (atomically), as ``sft.train_sft`` does.
    Resumes from the newest complete Trainer checkpoint of the same run (training.checkpoint_steps)."""
    import datasets
    import torch
    from trl import GRPOConfig

    from snakeskills.checkpoints import claim_checkpoints, trainer_dir_for
    from snakeskills.training import (
        load_trainable_model,
        run_trainer,
        save_tuned,
        section_trainer_arguments,
        step_logger,
    )

    if method not in METHODS:
        raise SnakeskillsError(f"grpo.method: {method!r} is not one of {', '.join(METHODS)}")
    if not sampling["temperature"]:
        raise SnakeskillsError(
            "grpo.sampling.temperature is 0: a group of greedy completions has no spread to learn from"
        )
    torch.manual_seed(seed)
    model, tokenizer, stored_dtype = load_trainable_model(
        method, base_model_path, init_path, lora, dtype, trust_remote_code
    )
    problems = list(iter_jsonl(problems_path))
    if not problems:
        raise SnakeskillsError(f"{problems_path}: no GRPO problems to train on")
    rows, prompt_ids = rl_dataset_rows(
        problems, tokenizer, chat_template=chat_template, chat_template_kwargs=chat_template_kwargs
    )
    common = section_trainer_arguments(
        training,
        output_dir=trainer_dir_for(output_dir),
        seed=seed,
        threads=threads,
        processes=processes,
        distributed=distributed,
    )
    common["logging_steps"] = 1  # every step's reward: the report plots reward by step
    terms = [term for term in REWARD_TERMS if rewards[term] != 0]
    if not terms:
        raise SnakeskillsError("grpo.rewards: every weight is 0, so every completion has the same reward")
    settings = {
        "num_generations": num_generations,
        "max_completion_length": sampling["max_new_tokens"],
        "temperature": sampling["temperature"],
        "top_p": sampling["top_p"],
        "top_k": sampling["top_k"],
        "beta": beta,
        "loss_type": loss,
        "reward_weights": [float(rewards[term]) for term in terms],
    }
    vllm = {"use_vllm": True, "vllm_mode": vllm_mode} if vllm_mode is not None else {}
    arguments = GRPOConfig(**settings, **vllm, **common)
    hyperparameters = {**common, **settings, "vllm_mode": vllm_mode, "reasoning": reasoning, "judges": judges}
    resume_from = claim_checkpoints(
        arguments,
        run_identity(method, base_model_path, init_path, lora),
        hyperparameters,
        rows,
        training["checkpoint_steps"],
    )
    # the judge logs a line per batch it judges; here that is every step, which the step lines already summarize
    logging.getLogger("snakeskills.judge").setLevel(logging.WARNING)
    reward = JudgeRewards(judges, reasoning, sampling["max_new_tokens"], num_workers=max(1, threads))
    functions = dict(zip(REWARD_TERMS, reward.functions(), strict=True))
    trainer_class = grpo_trainer_class()
    trainer_class.prompt_token_ids = prompt_ids
    trainer = trainer_class(
        model=model,
        reward_funcs=[functions[term] for term in terms],
        args=arguments,
        train_dataset=datasets.Dataset.from_list(rows),
        processing_class=tokenizer,
        callbacks=[step_logger()],
    )
    metrics = run_trainer(trainer, resume_from, len(rows))
    metrics["method"] = method
    metrics["training_method"] = "grpo"
    metrics["completions_sampled"] = trainer.state.global_step * training["batch_size"]
    metrics["init_path"] = None if init_path is None else str(init_path)
    save_tuned(trainer, output_dir, tokenizer=tokenizer, metrics=metrics, stored_dtype=stored_dtype)
    return metrics


if __name__ == "__main__":
    # one of the processes `launch_training` starts: train_grpo's arguments come as one JSON argument
    from snakeskills.training import training_process_main

    training_process_main(train_grpo)
