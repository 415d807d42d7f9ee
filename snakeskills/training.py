"""Supervised fine-tuning of causal LMs on prompt/completion pairs with transformers' Trainer.

Used twice: the embedded default's bootstrap (full training of the tiny model) and the SFT stage
(LoRA via peft on judged-correct generations). Loss is on completion tokens only.
"""

from __future__ import annotations

import json
import logging
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

from snakeskills.io import fingerprint, publish_directory

logger = logging.getLogger(__name__)

IGNORE_INDEX = -100

CHECKPOINT_NAME = re.compile(r"^checkpoint-(\d+)$")
# Trainer._save_checkpoint writes the weights, optimizer, scheduler and RNG state first and the trainer
# state last, so a checkpoint whose trainer state is on disk and parses is complete.
TRAINER_STATE_FILE = "trainer_state.json"


def _is_complete_checkpoint(folder: Path) -> bool:
    try:
        json.loads((folder / TRAINER_STATE_FILE).read_text())
    except (OSError, ValueError):
        return False
    return True


def last_complete_checkpoint(trainer_dir: str | Path) -> str | None:
    """The newest complete ``checkpoint-N`` folder under ``trainer_dir``, or None.

    A training killed while saving leaves a newer checkpoint without its trainer state (transformers'
    ``get_last_checkpoint`` would pick it and resuming would fail). Such partial checkpoints are
    removed, so the resumed run's checkpoint rotation never counts them.
    """
    trainer_dir = Path(trainer_dir)
    if not trainer_dir.is_dir():
        return None
    checkpoints = sorted(
        (int(match.group(1)), path)
        for path in trainer_dir.iterdir()
        if path.is_dir() and (match := CHECKPOINT_NAME.match(path.name))
    )
    for _step, path in reversed(checkpoints):
        if _is_complete_checkpoint(path):
            return str(path)
        logger.warning("removing partial checkpoint %s (no readable %s)", path, TRAINER_STATE_FILE)
        shutil.rmtree(path)
    return None


RUN_FINGERPRINT_FILE = "run_fingerprint.json"


def trainer_dir_for(output_dir: str | Path) -> Path:
    """The folder of the Trainer's checkpoints for a model saved to ``output_dir``: ``.<name>-trainer`` beside it."""
    output_dir = Path(output_dir)
    return output_dir.parent / f".{output_dir.name}-trainer"


def training_fingerprint(run_identity: dict, hyperparameters: dict, examples: list[dict]) -> str:
    """A hash of everything that decides a training run's weights: model, settings and examples."""
    return fingerprint([], {"run": run_identity, "hyperparameters": hyperparameters, "examples": examples})


def claim_trainer_dir(trainer_dir: str | Path, run_fingerprint: str) -> None:
    """Make ``trainer_dir`` this run's: checkpoints left by a run with another fingerprint are removed.

    A checkpoint only resumes the run that wrote it; resuming one written with other settings or other
    examples (a rerun after a config change) would silently give the old run's weights.
    """
    trainer_dir = Path(trainer_dir)
    marker = trainer_dir / RUN_FINGERPRINT_FILE
    if trainer_dir.exists():
        try:
            same_run = json.loads(marker.read_text())["fingerprint"] == run_fingerprint
        except (OSError, ValueError, KeyError, TypeError):
            same_run = False
        if same_run:
            return
        logger.info("discarding checkpoints in %s: they belong to another training run", trainer_dir)
        shutil.rmtree(trainer_dir)
    trainer_dir.mkdir(parents=True)
    marker.write_text(json.dumps({"fingerprint": run_fingerprint}) + "\n")


def discard_trainer_dir(trainer_dir: str | Path) -> None:
    """Remove a finished run's checkpoints (they only serve to resume a killed run)."""
    shutil.rmtree(trainer_dir, ignore_errors=True)


def tokenize_prompt_completion(tokenizer, examples: list[dict], max_length: int):
    """A ``datasets.Dataset`` of ``input_ids``/``labels``; prompt tokens are masked out of the loss.

    ``prompt_ids`` are the model input as generation builds it (``prompts.encode_messages``: chat template
    applied, special tokens exactly once); the completion is tokenized on its own, as the model generates
    it after the prompt, and followed by the tokenizer's EOS so the model learns to stop.
    """
    import datasets

    if tokenizer.eos_token_id is None:
        raise ValueError("tokenizer has no eos_token; SFT needs one to teach the model where to stop")
    rows = []
    for example in examples:
        prompt_ids = list(example["prompt_ids"])
        completion_ids = tokenizer(example["completion"], add_special_tokens=False)["input_ids"]
        completion_ids = completion_ids + [tokenizer.eos_token_id]
        input_ids = (prompt_ids + completion_ids)[:max_length]
        labels = ([IGNORE_INDEX] * len(prompt_ids) + completion_ids)[:max_length]
        rows.append({"input_ids": input_ids, "labels": labels})
    return datasets.Dataset.from_list(rows)


@dataclass
class PadCollator:
    """Right-pads ``input_ids`` with the pad token and ``labels`` with the ignore index."""

    pad_token_id: int

    def __call__(self, features: list[dict]) -> dict:
        import torch

        width = max(len(feature["input_ids"]) for feature in features)
        input_ids, labels, attention_mask = [], [], []
        for feature in features:
            padding = width - len(feature["input_ids"])
            input_ids.append(list(feature["input_ids"]) + [self.pad_token_id] * padding)
            labels.append(list(feature["labels"]) + [IGNORE_INDEX] * padding)
            attention_mask.append([1] * len(feature["input_ids"]) + [0] * padding)
        return {
            "input_ids": torch.tensor(input_ids),
            "labels": torch.tensor(labels),
            "attention_mask": torch.tensor(attention_mask),
        }


def train_on_examples(
    model,
    tokenizer,
    examples: list[dict],
    *,
    output_dir: str | Path,
    run_identity: dict,
    num_epochs: float,
    learning_rate: float,
    batch_size: int,
    seed: int,
    max_length: int,
    weight_decay: float = 0.0,
    warmup_steps: float = 0.0,
    checkpoint_steps: int = 0,
    threads: int = 1,
    processes: int = 1,
    distributed: str = "ddp",
    callbacks: list | None = None,
):
    """Train ``model`` in place on ``examples`` (``prompt_ids``, ``completion``); returns (metrics, trainer).

    With ``checkpoint_steps > 0`` a checkpoint is saved every so many steps under ``output_dir`` and
    training resumes from the newest complete one found there (a rerun after a kill continues, not
    restarts), provided it was written by the same run: ``run_identity`` (what the model is, e.g. its
    paths), the hyperparameters and the examples must match, or the old checkpoints are discarded.
    The caller saves the model (``save_trained``), which also discards ``output_dir``.

    With ``processes > 1`` this runs in each of the processes ``accelerate launch`` started (its
    ``WORLD_SIZE`` must match): each takes ``batch_size / processes`` examples of every optimizer step, and
    ``distributed`` "fsdp" shards the model across them instead of replicating it (DDP).
    """
    import os

    import torch
    from transformers import Trainer, TrainingArguments

    if not examples:
        raise ValueError("no training examples: nothing to fine-tune on")
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    if world_size != processes:
        raise ValueError(f"training for {processes} process(es) runs in a world of {world_size}")
    if batch_size % processes:
        raise ValueError(f"batch_size {batch_size} is not a multiple of the {processes} training processes")
    torch.set_num_threads(threads)
    dataset = tokenize_prompt_completion(tokenizer, examples, max_length)
    output_dir = Path(output_dir)
    hyperparameters = {
        "num_epochs": num_epochs,
        "learning_rate": learning_rate,
        "batch_size": batch_size,
        "seed": seed,
        "max_length": max_length,
        "weight_decay": weight_decay,
        "warmup_steps": warmup_steps,
        "checkpoint_steps": checkpoint_steps,
        "processes": processes,
        "distributed": distributed,
    }
    # FSDP (GPUs only): full_shard of every transformer block (the model's _no_split_modules)
    sharding = (
        {"fsdp": "full_shard auto_wrap", "fsdp_config": {"use_orig_params": True}} if distributed == "fsdp" else {}
    )
    arguments = TrainingArguments(
        output_dir=str(output_dir),
        num_train_epochs=num_epochs,
        learning_rate=learning_rate,
        per_device_train_batch_size=batch_size // processes,
        weight_decay=weight_decay,
        warmup_steps=warmup_steps,
        lr_scheduler_type="linear",
        seed=seed,
        data_seed=seed,
        logging_steps=20,
        save_strategy="steps" if checkpoint_steps > 0 else "no",
        save_steps=checkpoint_steps if checkpoint_steps > 0 else 500,
        save_total_limit=2,
        report_to=[],
        disable_tqdm=True,
        dataloader_num_workers=0,
        remove_unused_columns=False,
        use_cpu=not torch.cuda.is_available(),
        ddp_find_unused_parameters=False,
        **sharding,
    )
    # creating the arguments set up the processes' group; the main process claims the checkpoint folder
    # (and drops partial checkpoints) first, the others then find it claimed and the same last checkpoint
    with arguments.main_process_first(desc="checkpoint folder", local=False):
        claim_trainer_dir(output_dir, training_fingerprint(run_identity, hyperparameters, examples))
        resume_from = last_complete_checkpoint(output_dir) if checkpoint_steps > 0 else None
    trainer = Trainer(
        model=model,
        args=arguments,
        train_dataset=dataset,
        data_collator=PadCollator(tokenizer.pad_token_id),
        callbacks=callbacks,
    )
    if resume_from:
        logger.info("resuming training from checkpoint %s", resume_from)
    result = trainer.train(resume_from_checkpoint=resume_from)
    metrics = dict(result.metrics)
    metrics["num_examples"] = len(examples)
    metrics["resumed_from_checkpoint"] = resume_from
    metrics["global_step"] = trainer.state.global_step
    metrics["processes"] = processes
    return metrics, trainer


def save_trained(trainer, output_dir: str | Path, finish) -> None:
    """Save the trained model to ``output_dir``, complete or not at all, then drop the run's checkpoints.

    Every process takes part in ``trainer.save_model`` (FSDP gathers the shards; only the main process
    writes), into a staging folder beside ``output_dir``. The main process then calls ``finish(staging)``
    (tokenizer, metrics, dtype) and renames the folder into place.
    """
    output_dir = Path(output_dir)
    staging = output_dir.parent / f".{output_dir.name}.staging"
    main = trainer.is_world_process_zero()
    if main:
        shutil.rmtree(staging, ignore_errors=True)
    trainer.accelerator.wait_for_everyone()
    trainer.save_model(str(staging))
    trainer.accelerator.wait_for_everyone()
    if main:
        try:
            (staging / "training_args.bin").unlink(missing_ok=True)
            finish(staging)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        publish_directory(staging, output_dir)
        discard_trainer_dir(trainer.args.output_dir)
    trainer.accelerator.wait_for_everyone()


def cast_saved_weights(folder: str | Path, dtype) -> None:
    """Store the floating-point weights of the checkpoint in ``folder`` as ``dtype`` (and say so in its config)."""
    from safetensors.torch import load_file, save_file

    folder = Path(folder)
    for path in sorted(folder.glob("*.safetensors")):
        tensors = {
            name: tensor.to(dtype) if tensor.is_floating_point() else tensor
            for name, tensor in load_file(str(path)).items()
        }
        save_file(tensors, str(path), metadata={"format": "pt"})
    config_path = folder / "config.json"
    config = json.loads(config_path.read_text())
    config["dtype" if "dtype" in config or "torch_dtype" not in config else "torch_dtype"] = str(dtype).removeprefix(
        "torch."
    )
    config_path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
