"""A training run's checkpoints: where the Trainer keeps them beside the model folder, which run they belong to
(a fingerprint of the model, settings and examples), and the newest complete one to resume from after a kill."""

from __future__ import annotations

import json
import logging
import re
import shutil
from pathlib import Path

from snakeskills.io import fingerprint

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


def claim_checkpoints(arguments, run_identity: dict, hyperparameters: dict, examples, checkpoint_steps: int):
    """Claim the trainer's checkpoint folder for this run (``claim_trainer_dir``) and return the checkpoint to resume
    from (``None``: start afresh). Creating ``arguments`` set up the processes' group; the main process claims the
    folder (and drops partial checkpoints) first, the others then find it claimed and the same last checkpoint."""
    output_dir = Path(arguments.output_dir)
    with arguments.main_process_first(desc="checkpoint folder", local=False):
        claim_trainer_dir(output_dir, training_fingerprint(run_identity, hyperparameters, examples))
        return last_complete_checkpoint(output_dir) if checkpoint_steps > 0 else None
