"""DPO's trainer: TRL's ``DPOTrainer`` on a round's preference pairs (``preference_pairs.select_pairs``), a LoRA
adapter (the reference is the model with the adapter off) or every weight (the reference a frozen copy of the starting
model).

The prompt is encoded exactly as generation encoded it when the samples were drawn (``prompts.encode_messages``:
chat template and its kwargs, special tokens once); each answer is tokenized on its own, as the model generated it
after the prompt, and ends with the tokenizer's EOS. TRL's own dataset preparation re-renders prompt + answer with
the chat template and cuts where the two diverge, which for some templates is not where generation put the prompt;
here the trainer gets the token ids directly."""

from __future__ import annotations

import logging

from snakeskills.errors import SnakeskillsError
from snakeskills.io import iter_jsonl
from snakeskills.training import trl_names
from snakeskills.training.rounds import RoundRun, run_round
from snakeskills.training.tool_masks import TOOL_OUTPUT_SPANS, LossMaskedTrainer, fill_loss_masks
from snakeskills.training.trainer import (
    check_batch_divides,
    completion_positions_only,
    tokenized_answers,
    tokenized_trainer,
)

logger = logging.getLogger(__name__)


SIDES = ("chosen", "rejected")
# the private methods of TRL's DPOTrainer that TokenizedDPOTrainer overrides: the parameters it passes, and why
OVERRIDDEN = {
    "_prepare_dataset": (
        ("dataset", "processing_class", "args", "dataset_name"),
        "overrides to train on the pairs' token ids as generation encoded them",
    ),
    "_compute_loss": (
        ("model", "inputs", "return_outputs"),
        "overrides to project only the answers' positions onto the vocabulary",
    ),
    "compute_ref_log_probs": (
        ("model", "inputs"),
        "overrides to project only the answers' positions onto the vocabulary",
    ),
}


def tokenize_pairs(records: list[dict], tokenizer, run: RoundRun) -> list[dict]:
    """Each pair as ``prompt_ids`` (as generation built them), ``chosen_ids`` and ``rejected_ids`` (the answer's
    tokens and EOS), the columns ``DPOTrainer``'s collator reads; where an answer of the pairs has tool output
    (``chosen_tool_output_spans``, ``rejected_tool_output_spans``), every row also has ``chosen_loss_mask`` and
    ``rejected_loss_mask`` (0 on the tools' tokens: ``tool_masks``)."""
    return fill_loss_masks(
        [
            tokenized_answers(
                record["prompt"],
                {f"{side}_ids": record[side][-1]["content"] for side in SIDES},
                tokenizer,
                run,
                "DPO",
                spans={f"{side}_ids": record.get(f"{side}_{TOOL_OUTPUT_SPANS}") for side in SIDES},
            )
            for record in records
        ]
    )


def dpo_trainer_class():
    """``DPOTrainer`` taking an already tokenized dataset (``prompt_ids``, ``chosen_ids``, ``rejected_ids``) as it
    is: its own preparation would extract and re-tokenize text prompts. Its forwards (the policy's, the reference's
    in each step or precomputed) project only the answers' positions onto the vocabulary
    (``completion_positions_only``). Rows with loss masks (``chosen_loss_mask``, ``rejected_loss_mask``) leave the
    tools' tokens out of the completion mask its collator builds (``tool_masks.LossMaskedTrainer``), which every
    sum of log-probabilities reads: the policy's, the reference's, RPO's NLL term. The private TRL names it overrides
    are checked first (``trl_names``)."""
    from trl import DPOTrainer

    trl_names.require_methods(DPOTrainer, OVERRIDDEN)

    class TokenizedDPOTrainer(LossMaskedTrainer, DPOTrainer):
        LOSS_MASKED = {"completion_mask": tuple(f"{side}_ids" for side in SIDES)}

        def _prepare_dataset(self, dataset, processing_class, args, dataset_name):
            if {"prompt_ids", "chosen_ids", "rejected_ids"} <= set(dataset.column_names):
                if args.max_length is not None:  # a prompt that fills max_length leaves no answer to compare
                    dataset = dataset.filter(lambda row: len(row["prompt_ids"]) < args.max_length)
                return dataset
            return super()._prepare_dataset(dataset, processing_class, args, dataset_name)

        def _compute_loss(self, model, inputs, return_outputs):
            with completion_positions_only():
                return super()._compute_loss(model, inputs, return_outputs)

        def compute_ref_log_probs(self, model, inputs):
            with completion_positions_only():
                return super().compute_ref_log_probs(model, inputs)

    return TokenizedDPOTrainer


def train(run: RoundRun, *, beta: float, loss: str, nll_weight: float, precompute_reference: bool = True) -> dict:
    """Train on the round's pairs (``run.data_path``) with DPO (``loss``: sigmoid, ipo, hinge, robust; ``nll_weight``
    > 0 adds the chosen answer's NLL, RPO) and save the result (``rounds.run_round``). Resumes from the newest
    complete Trainer checkpoint of the same run (training.checkpoint_minutes, checkpoint_steps).

    ``precompute_reference`` (dpo.precompute_reference): score every pair under the reference once, before the first
    step (TRL's ``precompute_ref_log_probs``), instead of a reference forward in every step of every epoch. In
    several training processes the reference is scored in each step: TRL writes the precomputed scores of an
    in-memory dataset to the main process's own temporary folder, where the other processes cannot read them."""
    if run.training.get("packing"):
        raise SnakeskillsError("dpo.training.packing: preference pairs are not packed")
    if precompute_reference and run.world_size > 1:
        logger.info(
            "dpo.precompute_reference: the reference is scored in each step in %d training processes (TRL keeps "
            "precomputed scores in a per-process temporary file)",
            run.world_size,
        )
        precompute_reference = False
    records = list(iter_jsonl(run.data_path))
    if not records:
        raise SnakeskillsError(f"{run.data_path}: no preference pairs to train on")

    def build(model, tokenizer):
        from trl import DPOConfig

        rows = tokenize_pairs(records, tokenizer, run)
        common = run.trainer_arguments()
        losses = [loss, "sft"] if nll_weight > 0 else [loss]
        weights = [1.0, nll_weight] if nll_weight > 0 else None
        arguments = DPOConfig(
            max_length=run.training["max_length"],
            truncation_mode="keep_start",
            beta=beta,
            loss_type=losses,
            loss_weights=weights,
            precompute_ref_log_probs=precompute_reference,
            **common,
        )
        hyperparameters = {**common, "max_length": run.training["max_length"], "beta": beta, "loss": losses}
        hyperparameters["w"] = weights
        # the reference's log-probabilities of a pair, scored in a batch of their own (precomputed, in the pairs'
        # order) or in the step's shuffled batch, are padded to other lengths: the same up to rounding, not bit for
        # bit, so a run does not resume from the other's checkpoints
        hyperparameters["precompute_reference"] = precompute_reference
        resume_from = run.claim_checkpoints(arguments, hyperparameters, rows)
        trainer = tokenized_trainer(dpo_trainer_class(), model, tokenizer, arguments, rows, training=run.training)
        return trainer, resume_from, len(rows)

    return run_round(run, "dpo", build)


def check_config(config: dict, processes: int) -> None:
    """The dpo section's cross-key rules (plan time)."""
    training = config["dpo"]["training"]
    if training["packing"]:
        raise SnakeskillsError("config key dpo.training.packing: preference pairs are not packed; set it false")
    check_batch_divides(training["batch_size"], processes, training["gradient_accumulation_steps"], "dpo.training")
