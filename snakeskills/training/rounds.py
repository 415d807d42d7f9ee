"""One round of any training method: the arguments every trainer shares (``RoundRun``, as TRL's trainer configs
share a base config), the skeleton every trainer runs (load the weights to train, build the method's trainer, train,
save complete or not at all) and the round run in one process or in several, on one node or several (``launch``).

A method's trainer module (``methods.TrainingMethod.trainer``) has ``train(run, **options)``: its own options only
(DPO's beta and loss, GRPO's group size and rewards, ...); it calls ``run_round`` with a function building its TRL
trainer."""

from __future__ import annotations

import dataclasses
import json
import logging
import shutil
import sys
from pathlib import Path

from snakeskills.errors import SnakeskillsError
from snakeskills.io import fingerprint
from snakeskills.settings.training import Round
from snakeskills.training.methods import WEIGHTS, training_method

logger = logging.getLogger(__name__)


@dataclasses.dataclass
class RoundRun:
    """What every round trains from and with, whatever its method."""

    weights: str  # lora: an adapter on the base model; full: every weight (config key <method>.method)
    base_model_path: str
    data_path: str  # the method's data file (SFT examples, DPO pairs, KTO samples, GRPO problems)
    output_dir: str
    lora: dict | None  # LoRA settings (weights lora)
    training: dict  # the section's training settings
    chat_template: bool
    chat_template_kwargs: dict
    seed: int
    threads: int
    dtype: str  # model.dtype
    trust_remote_code: bool
    init_path: str | None = None  # the previous round's adapter or checkpoint (init: continue)
    processes: int = 1  # on each node
    distributed: str = "ddp"
    nodes: int = 1
    # tools called through the chat template (tools.format chat_template): the functions the prompts offer and the
    # template that replaces the model's (``Round.chat_tools``)
    functions: list | None = None
    template: str | None = None
    # a training segment (plan/validation.py): the step it stops at, the previous segment's trainer state it resumes
    # (None for the first), and the folder its own trainer state goes to for the next one
    stop_at_step: int | None = None
    resume_state: str | None = None
    state_dir: str | None = None

    def prompt_format(self) -> dict:
        """How the round's prompts become token ids: ``prompts.encode_messages``' keyword arguments."""
        formatting = {"chat_template": self.chat_template, "chat_template_kwargs": self.chat_template_kwargs}
        if self.functions:
            formatting.update(functions=self.functions, template=self.template)
        return formatting

    @property
    def world_size(self) -> int:
        """The training processes of the round, on all its nodes."""
        return self.processes * self.nodes

    def identity(self) -> dict:
        """What the round's model is, for its checkpoints' fingerprint: the model folders by identity (a re-trained
        adapter or checkpoint is a new folder, renamed into place), lora or full, and the LoRA settings."""
        folders = [self.base_model_path, *(path for path in (self.init_path, self.resume_state) if path is not None)]
        return {
            "models": fingerprint(folders, {}),
            "method": self.weights,
            "lora": self.lora if self.weights == "lora" else None,
        }

    def trainer_arguments(self) -> dict:
        """The keyword arguments of the method's TRL config from the section's training settings
        (``trainer.section_trainer_arguments``), checkpoints beside the output folder."""
        from snakeskills.training.checkpoints import trainer_dir_for
        from snakeskills.training.trainer import section_trainer_arguments

        return section_trainer_arguments(
            self.training,
            output_dir=trainer_dir_for(self.output_dir),
            seed=self.seed,
            threads=self.threads,
            processes=self.world_size,
            distributed=self.distributed,
        )

    def claim_checkpoints(self, arguments, hyperparameters: dict, rows: list) -> str | None:
        """The checkpoint to resume from: the newest complete one of this same run (``checkpoints``)."""
        from snakeskills.training.checkpoints import claim_checkpoints

        return claim_checkpoints(arguments, self.identity(), hyperparameters, rows)


def run_round(run: RoundRun, method: str, build_trainer) -> dict:
    """Train a round and save it, with its tokenizer and ``training_metrics.json``, to ``run.output_dir``
    (atomically): lora an adapter, full a checkpoint in the dtype of the checkpoint it started from (or model.dtype
    when not auto). ``build_trainer(model, tokenizer)`` returns (TRL trainer, checkpoint to resume from or None,
    examples it trains on); ``method`` names the training method in the metrics."""
    import torch

    from snakeskills.training.trainer import load_trainable_model, run_trainer, save_tuned

    if run.weights not in WEIGHTS:
        raise SnakeskillsError(f"{method}.method: {run.weights!r} is not one of {', '.join(WEIGHTS)}")
    torch.manual_seed(run.seed)
    model, tokenizer, stored_dtype = load_trainable_model(
        run.weights, run.base_model_path, run.init_path, run.lora, run.dtype, run.trust_remote_code
    )
    trainer, resume_from, num_examples = build_trainer(model, tokenizer)
    if run.stop_at_step is not None:
        resume_from = segment_start(trainer, resume_from, run)
    metrics = run_trainer(trainer, resume_from, num_examples)
    metrics["method"] = run.weights  # named as its config key, <method>.method
    metrics["training_method"] = method
    if hasattr(trainer, "completions_sampled"):
        metrics["completions_sampled"] = trainer.completions_sampled
    metrics["init_path"] = run.init_path
    if run.stop_at_step is not None:
        metrics["segment"] = {"stop_at_step": run.stop_at_step, "resumed_state": run.resume_state}
        keep_segment_state(trainer, run.state_dir)
    save_tuned(trainer, run.output_dir, tokenizer=tokenizer, metrics=metrics, stored_dtype=stored_dtype)
    return metrics


def segment_start(trainer, resume_from: str | None, run: RoundRun) -> str | None:
    """Where a training segment (``run.stop_at_step``) starts: its own newest checkpoint (a rerun after a kill inside
    it), else the previous segment's trainer state (``run.resume_state``; none for the first segment). A checkpoint of
    its own already at its stop step (a kill after it was saved) is dropped and the one before it taken: the Trainer
    always takes a step before it stops. The segment stops at its step and saves its trainer state there
    (``segment_end``)."""
    from snakeskills.training.checkpoints import CHECKPOINT_NAME, last_complete_checkpoint

    while resume_from is not None and int(CHECKPOINT_NAME.match(Path(resume_from).name).group(1)) >= run.stop_at_step:
        trainer.accelerator.wait_for_everyone()
        if trainer.is_world_process_zero():
            logger.info("dropping checkpoint %s: it is at the segment's end, step %d", resume_from, run.stop_at_step)
            shutil.rmtree(resume_from)
        trainer.accelerator.wait_for_everyone()
        resume_from = last_complete_checkpoint(trainer.args.output_dir)
    trainer.add_callback(segment_end(run.stop_at_step))
    return resume_from if resume_from is not None else run.resume_state


def segment_end(step: int):
    """A TrainerCallback that ends the training at optimizer step ``step`` with a checkpoint of it (the trainer state
    the next segment resumes: ``keep_segment_state``)."""
    from transformers import TrainerCallback

    class SegmentEnd(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            if state.global_step >= step:
                control.should_training_stop = True
                control.should_save = True
            return control

    return SegmentEnd()


def keep_segment_state(trainer, state_dir: str | Path) -> None:
    """Move the checkpoint a segment ended with (``segment_end``) from the trainer's folder to ``state_dir``, where
    the next segment resumes it."""
    from snakeskills.training.checkpoints import last_complete_checkpoint

    trainer.accelerator.wait_for_everyone()
    if trainer.is_world_process_zero():
        checkpoint = last_complete_checkpoint(trainer.args.output_dir)
        step = trainer.state.global_step
        if checkpoint is None or not checkpoint.endswith(f"checkpoint-{step}"):
            raise SnakeskillsError(f"the training segment ended at step {step} without its checkpoint ({checkpoint})")
        state_dir = Path(state_dir)
        shutil.rmtree(state_dir, ignore_errors=True)
        state_dir.parent.mkdir(parents=True, exist_ok=True)
        Path(checkpoint).rename(state_dir)
    trainer.accelerator.wait_for_everyone()


def trainer_options(method: str, settings: Round, judging: dict) -> dict:
    """The keyword arguments ``method``'s ``train`` takes beside the ``RoundRun``: its own options of the round's
    settings, and for a method rewarded online the train benchmarks' judges and the student's reasoning settings
    (``judging``)."""
    entry = training_method(method)
    return {**{key: getattr(settings, key) for key in entry.options}, **(judging if entry.judges_rewards else {})}


def train_round(method: str, run: RoundRun, options: dict, *, log_path: str | Path) -> dict:
    """Train ``method``'s round: its trainer's ``train(run, **options)`` in this process, or in ``run.processes``
    processes on each of ``run.nodes`` nodes (``launch.launch_training``: each runs this module's ``__main__``).
    Interrupted (SIGINT or SIGTERM: ``trainer.stop_signals_interrupt``), it raises
    ``checkpoints.TrainingInterrupted`` saying what was kept, once the processes it started have ended; a failed
    process fails it naming the rank and host, and what a rerun resumes from."""
    entry = training_method(method)
    if run.world_size == 1:
        return entry.trainer_module().train(run, **options)
    from snakeskills.training.checkpoints import (
        TrainingInterrupted,
        interruption_message,
        kept_checkpoint,
        trainer_dir_for,
    )
    from snakeskills.training.launch import LaunchFailed, launch_training
    from snakeskills.training.trainer import stop_signals_interrupt

    arguments = {"method": method, "run": dataclasses.asdict(run), "options": options}
    try:
        with stop_signals_interrupt():
            return launch_training(
                "snakeskills.training.rounds",
                arguments,
                processes=run.processes,
                nodes=run.nodes,
                cpus_per_node=run.threads * run.processes,
                output_dir=run.output_dir,
                log_path=log_path,
            )
    except KeyboardInterrupt as interruption:
        # launch_training passed the signal on to the training processes and waited for them: the main one said the
        # step it reached in the log, this one says what the disk kept
        message = interruption_message(
            cause=str(interruption) or "Ctrl-C",
            step=None,
            max_steps=0,
            kept=kept_checkpoint(trainer_dir_for(run.output_dir)),
            minutes=run.training["checkpoint_minutes"],
            steps=run.training["checkpoint_steps"],
        )
        raise TrainingInterrupted(message) from None
    except LaunchFailed as failed:
        kept = kept_checkpoint(trainer_dir_for(run.output_dir))
        rerun = (
            f"a rerun resumes from the checkpoint of step {kept[0]}"
            if kept is not None
            else "no checkpoint was kept: a rerun starts the round over"
        )
        raise SnakeskillsError(f"{method} round: {failed}; {rerun}") from None


def main(argument: str) -> None:
    """One of the processes ``launch_training`` started: its round as one JSON argument. It says where it runs and
    records how it ended (``launch.record_rank``). Interrupted, the main process logs what was kept
    (``checkpoints.interruption_message``) and every process exits with status 130."""
    from snakeskills.job import quiet_libraries
    from snakeskills.training.launch import record_rank, this_process

    quiet_libraries()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s: %(message)s")
    arguments = json.loads(argument)
    run, records = RoundRun(**arguments["run"]), arguments.get("records")
    place = this_process()
    logger.info(
        "training process rank %d of %d on %s (node rank %d, local rank %d, pid %d)",
        place["rank"],
        run.world_size,
        place["host"],
        place["node_rank"],
        place["local_rank"],
        place["pid"],
    )
    record_rank(records, "started")
    try:
        training_method(arguments["method"]).trainer_module().train(run, **arguments["options"])
    except KeyboardInterrupt as interruption:
        record_rank(records, "interrupted")
        if place["rank"] == 0:
            logger.warning("%s", str(interruption) or "training interrupted")
        raise SystemExit(130) from None
    except BaseException as failed:
        record_rank(records, "failed", f"{type(failed).__name__}: {str(failed).splitlines()[0] if str(failed) else ''}")
        raise
    record_rank(records, "done")


if __name__ == "__main__":
    main(sys.argv[1])
