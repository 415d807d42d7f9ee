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
from snakeskills.training.rounds import RoundRun, run_round
from snakeskills.training.trainer import check_batch_divides, tokenized_answers, tokenized_trainer

logger = logging.getLogger(__name__)


SIDES = ("chosen", "rejected")


def tokenize_pairs(records: list[dict], tokenizer, run: RoundRun) -> list[dict]:
    """Each pair as ``prompt_ids`` (as generation built them), ``chosen_ids`` and ``rejected_ids`` (the answer's
    tokens and EOS), the columns ``DPOTrainer``'s collator reads."""
    return [
        tokenized_answers(
            record["prompt"], {f"{side}_ids": record[side][-1]["content"] for side in SIDES}, tokenizer, run, "DPO"
        )
        for record in records
    ]


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


def train(run: RoundRun, *, beta: float, loss: str, nll_weight: float) -> dict:
    """Train on the round's pairs (``run.data_path``) with DPO (``loss``: sigmoid, ipo, hinge, robust; ``nll_weight``
    > 0 adds the chosen answer's NLL, RPO) and save the result (``rounds.run_round``). Resumes from the newest
    complete Trainer checkpoint of the same run (training.checkpoint_minutes, checkpoint_steps)."""
    if run.training.get("packing"):
        raise SnakeskillsError("dpo.training.packing: preference pairs are not packed")
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
            **common,
        )
        hyperparameters = {**common, "max_length": run.training["max_length"], "beta": beta, "loss": losses}
        hyperparameters["w"] = weights
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
