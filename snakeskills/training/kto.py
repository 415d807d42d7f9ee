"""KTO's trainer: TRL's ``KTOTrainer`` on a round's labelled samples (``kto_samples.select_kto_samples``), a LoRA
adapter (the reference is the model with the adapter off) or every weight (the reference a frozen copy of the
starting model). KTO (Ethayarajh et al., 2024) learns from unpaired feedback: each sample is desirable or undesirable
on its own, so every judged sample counts, not only problems with both a correct and an incorrect one.

As for DPO, the prompt is encoded exactly as generation encoded it (``prompts.encode_messages``) and the completion
on its own with the tokenizer's EOS; the trainer gets token ids, not text to re-render. The KL estimate pairs each
completion with another prompt of its batch, so TRL samples batches in order: the samples are shuffled here, by the
round's seed, so that a batch mixes problems and labels."""

from __future__ import annotations

import logging
import random

from snakeskills.errors import SnakeskillsError
from snakeskills.io import iter_jsonl
from snakeskills.training.rounds import RoundRun, run_round
from snakeskills.training.tool_masks import TOOL_OUTPUT_SPANS, LossMaskedTrainer, fill_loss_masks
from snakeskills.training.trainer import (
    check_batch_divides,
    completion_positions_only,
    tokenized_answers,
    tokenized_trainer,
)

logger = logging.getLogger(__name__)


def tokenize_samples(records: list[dict], tokenizer, run: RoundRun) -> list[dict]:
    """Each sample as ``prompt_ids`` (as generation built them), ``completion_ids`` (the answer's tokens and EOS) and
    ``label``, the columns ``KTOTrainer``'s collator reads; where a sample has tool output (``tool_output_spans``),
    every row also has ``completion_loss_mask`` (0 on the tools' tokens: ``tool_masks``)."""
    return fill_loss_masks(
        [
            tokenized_answers(
                record["prompt"],
                {"completion_ids": record["completion"][-1]["content"]},
                tokenizer,
                run,
                "KTO",
                spans={"completion_ids": record.get(TOOL_OUTPUT_SPANS)},
            )
            | {"label": bool(record["label"])}
            for record in records
        ]
    )


def balanced_weights(desirable: int, undesirable: int, desirable_weight, undesirable_weight) -> tuple[float, float]:
    """The weights of the desirable and undesirable losses: a weight given (kto.desirable_weight,
    kto.undesirable_weight) is kept; a null one is set so that both sides weigh the same in total (weight x count),
    which lies in the range the KTO paper recommends (desirable total / undesirable total in [1, 4/3]); both null:
    the larger side keeps weight 1."""
    if desirable_weight is None and undesirable_weight is None:
        if desirable <= undesirable:
            return undesirable / desirable, 1.0
        return 1.0, desirable / undesirable
    if desirable_weight is None:
        return undesirable_weight * undesirable / desirable, float(undesirable_weight)
    if undesirable_weight is None:
        return float(desirable_weight), desirable_weight * desirable / undesirable
    return float(desirable_weight), float(undesirable_weight)


def kto_trainer_class():
    """``KTOTrainer`` taking an already tokenized dataset (``prompt_ids``, ``completion_ids``, ``label``) as it is:
    its own preparation would re-render and re-tokenize text. What it still does here: drop a sample whose prompt
    fills max_length, and add each sample's mismatched completion for the KL estimate (the previous one of its
    batch, as TRL does). Its forwards project only the answers' positions onto the vocabulary
    (``trainer.completion_positions_only``). Rows with a loss mask (``completion_loss_mask``, and the mismatched
    completion's ``KL_completion_loss_mask``) leave the tools' tokens out of the completion masks its collator builds
    (``tool_masks.LossMaskedTrainer``), which the policy's, the reference's and the KL estimate's sums read."""
    from trl import KTOTrainer

    from snakeskills.training import trl_names

    trl_names.require_methods(
        KTOTrainer,
        {
            "_prepare_dataset": (
                ("dataset", "processing_class", "args", "dataset_name"),
                "overrides it to take an already tokenized dataset as it is",
            )
        },
    )

    class TokenizedKTOTrainer(LossMaskedTrainer, KTOTrainer):
        LOSS_MASKED = {"completion_mask": ("completion_ids",), "KL_completion_mask": ("KL_completion_ids",)}

        def _prepare_dataset(self, dataset, processing_class, args, dataset_name):
            if not {"prompt_ids", "completion_ids", "label"} <= set(dataset.column_names):
                return super()._prepare_dataset(dataset, processing_class, args, dataset_name)
            if args.max_length is not None:
                dataset = dataset.filter(lambda row: len(row["prompt_ids"]) < args.max_length)
            if self.calculate_KL:

                def add_kl_completion_ids(rows):
                    for column in ("completion_ids", "completion_loss_mask"):
                        if column in rows:
                            rows[f"KL_{column}"] = [rows[column][-1]] + rows[column][:-1]
                    return rows

                dataset = dataset.map(add_kl_completion_ids, batched=True, batch_size=args.per_device_train_batch_size)
            return dataset

        def compute_loss(self, *arguments, **keywords):
            with completion_positions_only():  # the policy's, the reference's and the KL estimate's forwards
                return super().compute_loss(*arguments, **keywords)

    return TokenizedKTOTrainer


def train(
    run: RoundRun, *, beta: float, loss: str, desirable_weight: float | None, undesirable_weight: float | None
) -> dict:
    """Train on the round's labelled samples (``run.data_path``) with KTO (``loss``: kto, or apo_zero_unpaired) and
    save the result (``rounds.run_round``). Resumes from the newest complete Trainer checkpoint of the same run
    (training.checkpoint_minutes, checkpoint_steps)."""
    if run.training.get("packing"):
        raise SnakeskillsError("kto.training.packing: KTO samples are not packed")
    records = list(iter_jsonl(run.data_path))
    desirable = sum(bool(record["label"]) for record in records)
    if not desirable or desirable == len(records):
        raise SnakeskillsError(f"{run.data_path}: KTO needs both desirable and undesirable samples")
    weights = balanced_weights(desirable, len(records) - desirable, desirable_weight, undesirable_weight)
    logger.info(
        "%d desirable and %d undesirable samples, weighted %.3g and %.3g",
        desirable,
        len(records) - desirable,
        *weights,
    )
    random.Random(run.seed).shuffle(records)

    def build(model, tokenizer):
        from trl import KTOConfig

        rows = tokenize_samples(records, tokenizer, run)
        common = run.trainer_arguments()
        settings = {
            "max_length": run.training["max_length"],
            "beta": beta,
            "loss_type": loss,
            "desirable_weight": weights[0],
            "undesirable_weight": weights[1],
        }
        arguments = KTOConfig(**settings, train_sampling_strategy="sequential", **common)
        resume_from = run.claim_checkpoints(arguments, {**common, **settings}, rows)
        trainer = tokenized_trainer(kto_trainer_class(), model, tokenizer, arguments, rows, training=run.training)
        return trainer, resume_from, len(rows)

    return run_round(run, "kto", build)


def check_config(config: dict, processes: int) -> None:
    """The kto section's cross-key rules (plan time)."""
    kto = config["kto"]
    training = kto["training"]
    if training["packing"]:
        raise SnakeskillsError("config key kto.training.packing: KTO samples are not packed; set it false")
    check_batch_divides(training["batch_size"], processes, training["gradient_accumulation_steps"], "kto.training")
    share = training["batch_size"] // (processes * training["gradient_accumulation_steps"])
    if kto["loss"] == "kto" and share < 2:
        raise SnakeskillsError(
            f"config key kto.training.batch_size ({training['batch_size']}): each forward pass takes {share} "
            "sample(s), but KTO's KL estimate pairs each sample with another of its batch; raise it to at least 2 "
            "per process and accumulation step"
        )
