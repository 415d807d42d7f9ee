"""DPO stage: TRL's ``DPOTrainer`` on a round's preference pairs (``preference.select_pairs``), a LoRA adapter (the
reference is the model with the adapter off) or every weight (the reference a frozen copy of the starting model).

The prompt is encoded exactly as generation encoded it when the samples were drawn (``prompts.encode_messages``:
chat template and its kwargs, special tokens once); each answer is tokenized on its own, as the model generated it
after the prompt, and ends with the tokenizer's EOS. TRL's own dataset preparation re-renders prompt + answer with
the chat template and cuts where the two diverge, which for some templates is not where generation put the prompt;
here the trainer gets the token ids directly."""

from __future__ import annotations

import logging
from pathlib import Path

from snakeskills.errors import SnakeskillsError
from snakeskills.io import iter_jsonl
from snakeskills.prompts import encode_messages
from snakeskills.sft import METHODS, run_identity

logger = logging.getLogger(__name__)


def tokenize_pairs(records: list[dict], tokenizer, *, chat_template: bool, chat_template_kwargs: dict) -> list[dict]:
    """Each pair as ``prompt_ids`` (as generation built them), ``chosen_ids`` and ``rejected_ids`` (the answer's
    tokens and EOS), the columns ``DPOTrainer``'s collator reads."""
    if tokenizer.eos_token_id is None:
        raise SnakeskillsError("the tokenizer has no eos_token; DPO needs one to end each answer")
    rows = []
    for record in records:
        prompt_ids = encode_messages(
            record["prompt"],
            chat_template=chat_template,
            chat_template_kwargs=chat_template_kwargs,
            tokenizer=tokenizer,
        )
        answers = {}
        for side in ("chosen", "rejected"):
            text = record[side][-1]["content"]
            answers[f"{side}_ids"] = tokenizer(text, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
        rows.append({"prompt_ids": list(prompt_ids), **answers})
    return rows


def dpo_trainer_class():
    """``DPOTrainer`` taking an already tokenized dataset (``prompt_ids``, ``chosen_ids``, ``rejected_ids``) as it
    is: its own preparation would extract and re-tokenize text prompts."""
    from trl import DPOTrainer

    class TokenizedDPOTrainer(DPOTrainer):
        def _prepare_dataset(self, dataset, processing_class, args, dataset_name):
            if {"prompt_ids", "chosen_ids", "rejected_ids"} <= set(dataset.column_names):
                if args.max_length is not None:  # a prompt that fills max_length leaves no answer to compare
                    dataset = dataset.filter(lambda row: len(row["prompt_ids"]) < args.max_length)
                return dataset
            return super()._prepare_dataset(dataset, processing_class, args, dataset_name)

    return TokenizedDPOTrainer


def train_dpo(
    *,
    method: str,
    base_model_path: str,
    pairs_path: str | Path,
    output_dir: str | Path,
    lora: dict | None,
    training: dict,
    beta: float,
    loss: str,
    nll_weight: float,
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
    """Train on the pairs with DPO (``loss``: sigmoid, ipo, hinge, robust; ``nll_weight`` > 0 adds the chosen
    answer's NLL, RPO) and save the result, with its tokenizer and metrics, to ``output_dir`` (atomically), as
    ``sft.train_sft`` does (lora: an adapter; full: a checkpoint in the starting checkpoint's dtype). Resumes from
    the newest complete Trainer checkpoint of the same run (training.checkpoint_steps)."""
    import datasets
    import torch
    from trl import DPOConfig

    from snakeskills.checkpoints import claim_checkpoints, trainer_dir_for
    from snakeskills.training import (
        load_trainable_model,
        run_trainer,
        save_tuned,
        section_trainer_arguments,
        step_logger,
    )

    if method not in METHODS:
        raise SnakeskillsError(f"dpo.method: {method!r} is not one of {', '.join(METHODS)}")
    if training.get("packing"):
        raise SnakeskillsError("dpo.training.packing: preference pairs are not packed")
    torch.manual_seed(seed)
    model, tokenizer, stored_dtype = load_trainable_model(
        method, base_model_path, init_path, lora, dtype, trust_remote_code
    )
    records = list(iter_jsonl(pairs_path))
    if not records:
        raise SnakeskillsError(f"{pairs_path}: no preference pairs to train on")
    rows = tokenize_pairs(records, tokenizer, chat_template=chat_template, chat_template_kwargs=chat_template_kwargs)
    common = section_trainer_arguments(
        training,
        output_dir=trainer_dir_for(output_dir),
        seed=seed,
        threads=threads,
        processes=processes,
        distributed=distributed,
    )
    losses = [loss, "sft"] if nll_weight > 0 else [loss]
    weights = [1.0, nll_weight] if nll_weight > 0 else None
    arguments = DPOConfig(
        max_length=training["max_length"],
        truncation_mode="keep_start",
        beta=beta,
        loss_type=losses,
        loss_weights=weights,
        **common,
    )
    hyperparameters = {**common, "max_length": training["max_length"], "beta": beta, "loss": losses, "w": weights}
    resume_from = claim_checkpoints(
        arguments,
        run_identity(method, base_model_path, init_path, lora),
        hyperparameters,
        rows,
        training["checkpoint_steps"],
    )
    trainer = dpo_trainer_class()(
        model=model,
        args=arguments,
        train_dataset=datasets.Dataset.from_list(rows),
        processing_class=tokenizer,
        callbacks=[step_logger()],
    )
    metrics = run_trainer(trainer, resume_from, len(rows))
    metrics["method"] = method
    metrics["training_method"] = "dpo"
    metrics["init_path"] = None if init_path is None else str(init_path)
    save_tuned(trainer, output_dir, tokenizer=tokenizer, metrics=metrics, stored_dtype=stored_dtype)
    return metrics


if __name__ == "__main__":
    # one of the processes `launch_training` starts: train_dpo's arguments come as one JSON argument
    from snakeskills.training import training_process_main

    training_process_main(train_dpo)
