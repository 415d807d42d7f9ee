"""A training run's checkpoints: where the Trainer keeps them beside the model folder, which run they belong to
(a fingerprint of the model, settings and examples), when they are saved (every ``checkpoint_minutes`` of training
and every ``checkpoint_steps`` steps), the newest complete one to resume from after a kill, and what an interrupted
training kept."""

from __future__ import annotations

import json
import logging
import re
import shutil
import time
from pathlib import Path

from snakeskills.io import fingerprint
from snakeskills.progress import format_duration

logger = logging.getLogger(__name__)

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


def _checkpoints_newest_first(trainer_dir: Path) -> list[Path]:
    if not trainer_dir.is_dir():
        return []
    checkpoints = sorted(
        (int(match.group(1)), path)
        for path in trainer_dir.iterdir()
        if path.is_dir() and (match := CHECKPOINT_NAME.match(path.name))
    )
    return [path for _step, path in reversed(checkpoints)]


def last_complete_checkpoint(trainer_dir: str | Path) -> str | None:
    """The newest complete ``checkpoint-N`` folder under ``trainer_dir``, or None.

    A training killed while saving leaves a newer checkpoint without its trainer state (transformers'
    ``get_last_checkpoint`` would pick it and resuming would fail). Such partial checkpoints are
    removed, so the resumed run's checkpoint rotation never counts them.
    """
    for path in _checkpoints_newest_first(Path(trainer_dir)):
        if _is_complete_checkpoint(path):
            return str(path)
        logger.warning("removing partial checkpoint %s (no readable %s)", path, TRAINER_STATE_FILE)
        shutil.rmtree(path)
    return None


def kept_checkpoint(trainer_dir: str | Path) -> tuple[int, float] | None:
    """The step of the newest complete checkpoint under ``trainer_dir`` and its age in seconds (since its trainer
    state was written), or None; partial checkpoints are skipped, not removed (a process may still write one)."""
    for path in _checkpoints_newest_first(Path(trainer_dir)):
        if _is_complete_checkpoint(path):
            saved = (path / TRAINER_STATE_FILE).stat().st_mtime
            return int(CHECKPOINT_NAME.match(path.name).group(1)), max(0.0, time.time() - saved)
    return None


RUN_FINGERPRINT_FILE = "run_fingerprint.json"


def trainer_dir_for(output_dir: str | Path) -> Path:
    """The folder of the Trainer's checkpoints for a model saved to ``output_dir``: ``.<name>-trainer`` beside it."""
    output_dir = Path(output_dir)
    return output_dir.parent / f".{output_dir.name}-trainer"


# the trainer arguments that say when checkpoints are saved: they do not change the weights, so a run resumed with
# another checkpoint schedule is the same run
CHECKPOINT_SCHEDULE = ("save_strategy", "save_steps", "save_total_limit")


def training_fingerprint(run_identity: dict, hyperparameters: dict, examples: list[dict]) -> str:
    """A hash of everything that decides a training run's weights: model, settings and examples (not when its
    checkpoints are saved: ``CHECKPOINT_SCHEDULE``)."""
    decisive = {key: value for key, value in hyperparameters.items() if key not in CHECKPOINT_SCHEDULE}
    return fingerprint([], {"run": run_identity, "hyperparameters": decisive, "examples": examples})


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


def claim_checkpoints(arguments, run_identity: dict, hyperparameters: dict, examples) -> str | None:
    """Claim the trainer's checkpoint folder for this run (``claim_trainer_dir``) and return the checkpoint to resume
    from: the newest complete one of this run, whatever schedule saved it (``None``: start afresh). Creating
    ``arguments`` set up the processes' group; the main process claims the folder (and drops partial checkpoints)
    first, the others then find it claimed and the same last checkpoint."""
    output_dir = Path(arguments.output_dir)
    with arguments.main_process_first(desc="checkpoint folder", local=False):
        claim_trainer_dir(output_dir, training_fingerprint(run_identity, hyperparameters, examples))
        return last_complete_checkpoint(output_dir)


def checkpoint_timer(minutes: float, clock=time.monotonic):
    """A TrainerCallback that saves a checkpoint at the end of the first step that ends ``minutes`` or more (by
    ``clock``, in seconds) after training started or resumed, or after the last checkpoint was saved (by it or by
    ``checkpoint_steps``); 0: never. Not at the last step, nor where training stops: the
    trained model is saved right after. In several processes the main process's clock decides for all (they
    save together). Saving does not change the weights: the Trainer saves the RNG states with the checkpoint and
    restores them when it resumes. Each checkpoint saved, whatever asked for it, is a line in the job's log."""
    from transformers import TrainerCallback

    class CheckpointTimer(TrainerCallback):
        def __init__(self):
            self.minutes, self.clock = minutes, clock

        def on_train_begin(self, args, state, control, **kwargs):
            self.last_saved = self.clock()

        def on_step_end(self, args, state, control, **kwargs):
            if self.minutes <= 0 or state.global_step >= state.max_steps or control.should_training_stop:
                return control
            if main_process_decides(self.clock() - self.last_saved >= 60 * self.minutes):
                control.should_save = True
            return control

        def on_save(self, args, state, control, **kwargs):
            self.last_saved = self.clock()
            if state.is_world_process_zero:
                logger.info(
                    "saved the checkpoint of step %d (a rerun after an interruption resumes from it)", state.global_step
                )

    return CheckpointTimer()


def main_process_decides(decision: bool) -> bool:
    """The main process's ``decision``, in every process of the training's group (the decision itself alone)."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return decision
    decisions = [decision]
    dist.broadcast_object_list(decisions, src=0)
    return bool(decisions[0])


def checkpoint_minutes_of(trainer) -> float:
    """The minutes between the time-saved checkpoints of ``trainer`` (its ``checkpoint_timer``; 0 without one)."""
    callbacks = trainer.callback_handler.callbacks
    return next((callback.minutes for callback in callbacks if type(callback).__name__ == "CheckpointTimer"), 0)


class TrainingInterrupted(KeyboardInterrupt):
    """A training stopped by SIGINT (Ctrl-C) or SIGTERM (``trainer.stop_signals_interrupt``); its message says how
    far it got and what was kept (``interruption_message``)."""


def interruption_message(
    *, cause: str, step: int | None, max_steps: int, kept: tuple[int, float] | None, minutes: float, steps: int
) -> str:
    """One line on an interrupted training: ``cause`` (Ctrl-C, SIGTERM), the ``step`` it reached of ``max_steps``
    (None: unknown, several processes trained), the checkpoint ``kept`` (its step and age in seconds) and what a
    rerun does; without a checkpoint, when one is saved (``minutes``: training.checkpoint_minutes, ``steps``:
    training.checkpoint_steps)."""
    interrupted = f"training interrupted ({cause})"
    if step is not None and max_steps:
        interrupted += f" at step {step} of {max_steps} ({round(100 * step / max_steps)} %)"
    if kept is not None:
        kept_step, age = kept
        return (
            f"{interrupted}; kept: the checkpoint of step {kept_step}, saved {format_duration(age)} ago; "
            f"rerunning the same command resumes from step {kept_step}"
        )
    schedule = [f"every {minutes:g} minutes of training, training.checkpoint_minutes"] if minutes > 0 else []
    schedule += [f"every {steps} steps, training.checkpoint_steps"] if steps > 0 else []
    off = "none is saved: training.checkpoint_minutes and checkpoint_steps are 0"
    when = f"one is saved {', and '.join(schedule)}" if schedule else off
    return f"{interrupted}; no checkpoint yet ({when}): a rerun starts over"
