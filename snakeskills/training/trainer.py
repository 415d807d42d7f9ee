"""What every trainer shares, on TRL's trainers: the weights a round trains (a LoRA or every weight), the trainer
arguments a training section gives, running a trainer with step lines in the job's log and a checkpoint every so many
minutes, saying what an interruption (Ctrl-C, SIGTERM) kept and saving the result complete or not at all (starting
several processes: ``launch``). Each method's trainer (``training/sft.py``, ``dpo.py``, ``kto.py``,
``grpo.py``) builds its TRL trainer from these pieces; a round's skeleton is ``rounds.run_round``; checkpoints:
``checkpoints``.
"""

from __future__ import annotations

import contextlib
import json
import logging
import shutil
from collections.abc import Iterator
from pathlib import Path

from snakeskills.errors import SnakeskillsError
from snakeskills.io import publish_directory, write_json
from snakeskills.training.checkpoints import (
    TrainingInterrupted,
    checkpoint_minutes_of,
    checkpoint_timer,
    discard_trainer_dir,
    interruption_message,
    kept_checkpoint,
)

logger = logging.getLogger(__name__)


def check_batch_divides(batch_size: int, processes: int, accumulation: int, section: str) -> None:
    """``{section}.batch_size`` must split evenly over processes x gradient accumulation steps."""
    if batch_size % (processes * accumulation):
        by_processes = (
            f"the {processes} training processes (training.nodes x training.processes) x " if processes > 1 else ""
        )
        raise SnakeskillsError(
            f"config key {section}.batch_size ({batch_size}) must be a multiple of {by_processes}{accumulation} "
            f"{section}.gradient_accumulation_steps: each forward pass takes an equal share"
        )


def trainer_arguments(
    *,
    output_dir: str | Path,
    num_epochs: float,
    learning_rate: float,
    batch_size: int,
    seed: int,
    weight_decay: float,
    warmup_steps: float,
    checkpoint_steps: int,
    gradient_accumulation_steps: int,
    gradient_checkpointing: bool,
    bf16: str | bool,
    threads: int,
    processes: int,
    distributed: str,
    max_steps: int | None = None,
) -> dict:
    """The keyword arguments every TRL trainer's config (SFTConfig, DPOConfig, GRPOConfig) gets from a training
    section: the schedule, batch split over processes and accumulation steps, precision, seeds, checkpoints,
    logging, CPU or GPU, DDP or FSDP. Also checks the processes' world and sets the CPU threads.

    ``batch_size`` is the examples per optimizer step: each of the ``processes`` takes ``batch_size / (processes x
    gradient_accumulation_steps)`` per forward pass. ``bf16`` "auto" trains in bfloat16 mixed precision where the
    GPU supports it (float32 on a CPU)."""
    import os

    import torch

    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    if world_size != processes:
        raise ValueError(f"training for {processes} process(es) runs in a world of {world_size}")
    share = processes * gradient_accumulation_steps
    if batch_size % share:
        raise ValueError(
            f"batch_size {batch_size} is not a multiple of {processes} process(es) x {gradient_accumulation_steps} "
            "accumulation step(s)"
        )
    torch.set_num_threads(threads)
    on_gpu = torch.cuda.is_available()
    use_bf16 = (on_gpu and torch.cuda.is_bf16_supported()) if bf16 == "auto" else bool(bf16)
    # FSDP (GPUs only): full_shard of every transformer block (the model's _no_split_modules)
    sharding = (
        {"fsdp": "full_shard auto_wrap", "fsdp_config": {"use_orig_params": True}} if distributed == "fsdp" else {}
    )
    return {
        "output_dir": str(output_dir),
        "num_train_epochs": num_epochs,
        "max_steps": max_steps if max_steps is not None else -1,
        "learning_rate": learning_rate,
        "per_device_train_batch_size": batch_size // share,
        "gradient_accumulation_steps": gradient_accumulation_steps,
        "gradient_checkpointing": gradient_checkpointing,
        "bf16": use_bf16,
        "weight_decay": weight_decay,
        "warmup_steps": warmup_steps,
        "lr_scheduler_type": "linear",
        "seed": seed,
        "data_seed": seed,
        "logging_steps": 20,
        "save_strategy": "steps" if checkpoint_steps > 0 else "no",
        "save_steps": checkpoint_steps if checkpoint_steps > 0 else 500,
        "save_total_limit": 2,
        "report_to": [],
        "disable_tqdm": True,
        "dataloader_num_workers": 0,
        "remove_unused_columns": False,
        "use_cpu": not on_gpu,
        "ddp_find_unused_parameters": False,
        **sharding,
    }


def section_trainer_arguments(
    training: dict, *, output_dir, seed: int, threads: int, processes: int, distributed: str
) -> dict:
    """``trainer_arguments`` from a DPO or GRPO section's ``training`` (max_steps where the section has it)."""
    keys = ("learning_rate", "batch_size", "weight_decay", "warmup_steps", "checkpoint_steps")
    keys += ("gradient_accumulation_steps", "gradient_checkpointing", "bf16")
    return trainer_arguments(
        output_dir=output_dir,
        num_epochs=training["num_epochs"],
        max_steps=training.get("max_steps"),
        seed=seed,
        threads=threads,
        processes=processes,
        distributed=distributed,
        **{key: training[key] for key in keys},
    )


# what a DPO or GRPO trainer logs beside the loss, and how the job's log names it
LOGGED_METRICS = {
    "rewards/margins": "reward margin",
    "rewards/accuracies": "preference accuracy",
    "reward": "reward mean",
    "reward_std": "reward spread",
    "kl": "KL",
    "completions/mean_length": "completion length",
}


def step_logger(min_interval: float = 30.0):
    """A TrainerCallback writing ``step i/N``, loss, learning rate, examples/s, elapsed time and ETA to the job's
    log (through logging, not the console) after the first step (a first ETA), at the trainer's logging steps and at
    least every ``min_interval`` seconds, and the total time at the end."""
    import time

    from transformers import TrainerCallback

    from snakeskills.progress import format_duration

    class StepLogger(TrainerCallback):
        def on_train_begin(self, args, state, control, **kwargs):
            self.started = self.last_logged = time.monotonic()
            self.first_step = state.global_step  # above 0 when resumed from a checkpoint

        def on_step_end(self, args, state, control, **kwargs):
            first = state.global_step == self.first_step + 1  # an ETA early: a long run's first step can take minutes
            if first or time.monotonic() - self.last_logged >= min_interval:
                control.should_log = True  # the trainer then computes and logs the loss at this step
            return control

        def on_log(self, args, state, control, logs=None, **kwargs):
            if not state.is_world_process_zero or not logs or "loss" not in logs:
                return
            now = time.monotonic()
            self.last_logged = now
            elapsed = max(now - self.started, 1e-9)
            steps = state.global_step - self.first_step
            per_step = args.train_batch_size * args.gradient_accumulation_steps * args.world_size
            eta = (state.max_steps - state.global_step) * elapsed / steps if steps else 0.0
            extra = "".join(f", {label} {float(logs[key]):.4g}" for key, label in LOGGED_METRICS.items() if key in logs)
            logger.info(
                "step %d/%d, loss %.4f%s, learning rate %.3g, %.1f examples/s, elapsed %s, ETA %s",
                state.global_step,
                state.max_steps,
                float(logs["loss"]),
                extra,
                float(logs.get("learning_rate", "nan")),
                steps * per_step / elapsed,
                format_duration(elapsed),
                format_duration(eta),
            )

        def on_train_end(self, args, state, control, **kwargs):
            if state.is_world_process_zero:
                elapsed = time.monotonic() - self.started
                logger.info(
                    "training done: %d steps in %s", state.global_step - self.first_step, format_duration(elapsed)
                )

    return StepLogger()


def training_callbacks(training: dict) -> list:
    """The callbacks every trainer gets from its training section: the step lines in the job's log
    (``step_logger``) and a checkpoint every ``checkpoint_minutes`` of training (``checkpoints.checkpoint_timer``)."""
    return [step_logger(), checkpoint_timer(training["checkpoint_minutes"])]


def tokenized_answers(
    prompt: list[dict], answers: dict[str, str], tokenizer, run, method: str, spans: dict[str, list] | None = None
) -> dict:
    """A trainer's row: ``prompt_ids``, the prompt's messages exactly as generation encodes them
    (``prompts.encode_messages`` with the round's chat template settings, ``run``), and each answer, by its column,
    tokenized on its own as the model generated it after the prompt and ended with the tokenizer's EOS (a preference
    method scores the whole answer, its end included). An answer with tool output (``spans``: its column's tool
    output spans, ``tool_masks``) also gets its loss mask (``tool_masks.loss_mask_column``: 0 on the tools' tokens,
    1 on the rest and the EOS)."""
    from snakeskills.prompts import encode_messages
    from snakeskills.training.tool_masks import completion_ids_and_mask, loss_mask_column

    if tokenizer.eos_token_id is None:
        raise SnakeskillsError(f"the tokenizer has no eos_token; {method} needs one to end each answer")
    prompt_ids = encode_messages(prompt, tokenizer=tokenizer, **run.prompt_format())
    row = {"prompt_ids": list(prompt_ids)}
    for column, text in answers.items():
        answer_spans = (spans or {}).get(column) or []
        ids, loss_mask = completion_ids_and_mask(tokenizer, text, answer_spans)
        row[column] = ids + [tokenizer.eos_token_id]
        if answer_spans:
            row[loss_mask_column(column)] = loss_mask + [1]
    return row


@contextlib.contextmanager
def completion_positions_only():
    """Inside: TRL's fused LM head (``trl.trainer.utils.add_fused_lm_head``, every TRL trainer's forward here: DPO's,
    KTO's, GRPO's) projects only the positions whose next token is scored (the answers' tokens) onto the vocabulary
    on a CPU too. TRL does that on a GPU with Triton only
    and elsewhere scores every position, prompt and padding included (its reason: a device that recompiles for
    every shape), which on a CPU is about 3 times the vocabulary projection, its softmax statistics and their
    backward. The log-probabilities of the answers' tokens are the same either way. A TRL without the private
    ``trl.trainer.utils._use_triton`` it overrides is an error naming its version."""
    import trl
    from trl.trainer import utils as trl_utils

    original = getattr(trl_utils, "_use_triton", None)
    if original is None:
        raise SnakeskillsError(
            f"TRL {trl.__version__} has no trl.trainer.utils._use_triton, the private name snakeskills overrides to "
            "score only the answers' positions (training/trainer.py completion_positions_only); install the TRL "
            "version pyproject.toml pins"
        )
    trl_utils._use_triton = lambda device: device.type == "cpu" or original(device)
    try:
        yield
    finally:
        trl_utils._use_triton = original


def tokenized_trainer(trainer_class, model, tokenizer, arguments, rows: list[dict], *, training: dict, **extra):
    """``trainer_class`` (a TRL trainer taking its dataset as token ids) on ``rows``, with the callbacks of its
    ``training`` section (``training_callbacks``); ``extra``: the trainer's own arguments (GRPO's reward functions)."""
    import datasets

    return trainer_class(
        model=model,
        args=arguments,
        train_dataset=datasets.Dataset.from_list(rows),
        processing_class=tokenizer,
        callbacks=training_callbacks(training),
        **extra,
    )


# the stop signals a training turns into KeyboardInterrupt, and the cause its interruption line names
STOP_SIGNALS = {"SIGINT": "Ctrl-C", "SIGTERM": "SIGTERM"}


@contextlib.contextmanager
def stop_signals_interrupt() -> Iterator[None]:
    """Inside: SIGINT (Ctrl-C, or Snakemake cancelled) and SIGTERM (what SLURM sends at a job's time limit or
    ``scancel``, and ``kill``) raise KeyboardInterrupt naming the cause (``STOP_SIGNALS``), so that an interrupted
    training says what it kept. Only the first one does: from then on both are ignored in this process, which is
    ending (a Ctrl-C in a terminal reaches a job twice, from the terminal and from Snakemake, and the second must not
    cut the first one's line). A signal with a handler of its own (not Python's default), or the main thread not
    running this, keeps its own handling."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {number: signal.getsignal(number) for number in (signal.SIGINT, signal.SIGTERM)}
    handled = [
        number for number, handler in previous.items() if handler in (signal.SIG_DFL, signal.default_int_handler)
    ]
    stopped = []

    def interrupt(signum, frame):
        for number in handled:
            signal.signal(number, signal.SIG_IGN)
        stopped.append(signum)
        raise KeyboardInterrupt(STOP_SIGNALS[signal.Signals(signum).name])

    for number in handled:
        signal.signal(number, interrupt)
    try:
        yield
    finally:
        if not stopped:
            for number in handled:
                signal.signal(number, previous[number])


def stop_signal_of(interruption: BaseException) -> int:
    """The signal that raised ``interruption`` (``stop_signals_interrupt``): SIGTERM, else SIGINT (Ctrl-C)."""
    import signal

    return signal.SIGTERM if str(interruption) == STOP_SIGNALS["SIGTERM"] else signal.SIGINT


def run_trainer(trainer, resume_from: str | None, num_examples: int) -> dict:
    """Train (from ``resume_from``, a checkpoint, when given); returns the run's metrics: the trainer's, the examples
    trained on, the checkpoint resumed from, steps, processes, and the logged history (loss, rewards by step).

    Ctrl-C or SIGTERM while it trains raises ``TrainingInterrupted``, whose message says the step reached and the
    checkpoint a rerun resumes from (``checkpoints.interruption_message``)."""
    from transformers import PrinterCallback

    # with tqdm off the Trainer prints every logged dict to stdout; the step lines in the job's log say it instead
    trainer.remove_callback(PrinterCallback)
    if resume_from:
        logger.info("resuming training from checkpoint %s", resume_from)
    try:
        with stop_signals_interrupt():
            result = trainer.train(resume_from_checkpoint=resume_from)
    except KeyboardInterrupt as interruption:
        raise TrainingInterrupted(trainer_interruption(trainer, str(interruption) or "Ctrl-C")) from None
    metrics = dict(result.metrics)
    metrics["num_examples"] = num_examples
    metrics["resumed_from_checkpoint"] = resume_from
    metrics["global_step"] = trainer.state.global_step
    metrics["processes"] = trainer.args.world_size
    metrics["log_history"] = [
        {key: value for key, value in entry.items() if isinstance(value, (int, float))}
        for entry in trainer.state.log_history
    ]
    return metrics


def trainer_interruption(trainer, cause: str) -> str:
    """``interruption_message`` for ``trainer``, stopped by ``cause``: its step, its newest complete checkpoint on
    disk, its checkpoint schedule."""
    args = trainer.args
    return interruption_message(
        cause=cause,
        step=trainer.state.global_step,
        max_steps=trainer.state.max_steps,
        kept=kept_checkpoint(args.output_dir),
        minutes=checkpoint_minutes_of(trainer),
        steps=args.save_steps if args.save_strategy == "steps" else 0,
    )


def load_trainable_model(
    weights: str, base_model_path: str, init_path, lora: dict | None, dtype: str, trust_remote_code: bool
):
    """The model a round trains and its tokenizer, and the dtype a full fine-tune is saved in (``None`` for lora).

    ``weights`` lora: the base model (frozen, in the FROZEN_BASE dtype) with a LoRA to train, round r-1's adapter
    (``init_path``) or a fresh one from ``lora``; full: every weight in float32 (TRAINED_WEIGHTS), from round r-1's
    checkpoint (``init_path``, tokenizer included) or the base model."""
    from snakeskills.models.loading import FROZEN_BASE, TRAINED_WEIGHTS, load_model, load_tokenizer, saved_dtype

    if init_path is not None and not Path(init_path).is_dir():
        kind = "adapter" if weights == "lora" else "checkpoint"
        raise SnakeskillsError(f"{kind} {str(init_path)!r} to continue from does not exist (init: continue)")
    start_path = str(init_path) if weights == "full" and init_path is not None else base_model_path
    tokenizer = load_tokenizer(start_path, trust_remote_code=trust_remote_code)
    if weights == "full":
        logger.info("fully fine-tuning %s (float32 weights)", start_path)
        model = load_model(start_path, dtype=dtype, policy=TRAINED_WEIGHTS, trust_remote_code=trust_remote_code)
        return model, tokenizer, saved_dtype(dtype, start_path, trust_remote_code)
    if init_path is not None:
        logger.info("continuing from adapter %s", init_path)
        model = load_model(
            base_model_path,
            dtype=dtype,
            policy=FROZEN_BASE,
            trust_remote_code=trust_remote_code,
            adapter_path=init_path,
            trainable_adapter=True,
        )
        return model, tokenizer, None
    from peft import LoraConfig, get_peft_model

    model = load_model(base_model_path, dtype=dtype, policy=FROZEN_BASE, trust_remote_code=trust_remote_code)
    logger.info("training a fresh LoRA on %s (base weights in %s)", base_model_path, model.dtype)
    adapter = LoraConfig(
        r=lora["r"],
        lora_alpha=lora["alpha"],
        lora_dropout=lora["dropout"],
        target_modules=lora["target_modules"],
        task_type="CAUSAL_LM",
    )
    return get_peft_model(model, adapter), tokenizer, None


def save_tuned(trainer, output_dir: str | Path, *, tokenizer, metrics: dict, stored_dtype) -> None:
    """Save a round's trained model with its tokenizer and ``training_metrics.json`` (``save_trained``); a full
    fine-tune's weights are stored in ``stored_dtype``."""
    if stored_dtype is not None:
        metrics["saved_dtype"] = str(stored_dtype).removeprefix("torch.")

    def finish(staging: Path) -> None:
        if stored_dtype is not None:
            cast_saved_weights(staging, stored_dtype)
        tokenizer.save_pretrained(staging)
        write_json(staging / "training_metrics.json", metrics)

    save_trained(trainer, output_dir, finish)


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
    # "torch_dtype" is the name older transformers versions wrote; a config with both keys gets both
    for key in [key for key in ("dtype", "torch_dtype") if key in config] or ["dtype"]:
        config[key] = str(dtype).removeprefix("torch.")
    config_path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
