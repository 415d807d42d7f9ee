"""Where a training segment starts (training/rounds.py ``segment_start``): its own newest checkpoint, else the previous
segment's trainer state; a checkpoint of its own already at its stop step is dropped (the Trainer would take one more
step before stopping)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from snakeskills.training.rounds import RoundRun, segment_start


class FakeTrainer:
    """What segment_start asks of a Trainer: its checkpoint folder, its process rank, a barrier, its callbacks."""

    def __init__(self, folder: Path):
        self.args = SimpleNamespace(output_dir=str(folder))
        self.accelerator = SimpleNamespace(wait_for_everyone=lambda: None)
        self.callbacks = []

    def is_world_process_zero(self) -> bool:
        return True

    def add_callback(self, callback) -> None:
        self.callbacks.append(callback)


def checkpoint(folder: Path, step: int) -> str:
    path = folder / f"checkpoint-{step}"
    path.mkdir(parents=True)
    (path / "trainer_state.json").write_text(json.dumps({"global_step": step}))
    return str(path)


def segment(stop: int, resume_state: str | None) -> RoundRun:
    return RoundRun(
        weights="lora",
        base_model_path="base",
        data_path="data.jsonl",
        output_dir="out",
        lora=None,
        training={},
        chat_template=False,
        chat_template_kwargs={},
        seed=0,
        threads=1,
        dtype="auto",
        trust_remote_code=False,
        stop_at_step=stop,
        resume_state=resume_state,
    )


@pytest.mark.parametrize(
    ("own", "expected"),
    [([], "previous"), ([12, 15], "checkpoint-15"), ([12, 20], "checkpoint-12"), ([20], "previous")],
)
def test_a_segment_starts_from_its_own_checkpoint_before_its_end_else_the_previous_state(tmp_path, own, expected):
    folder = tmp_path / ".adapter-trainer"
    folder.mkdir()
    newest = [checkpoint(folder, step) for step in own][-1] if own else None
    trainer = FakeTrainer(folder)
    start = segment_start(trainer, newest, segment(20, "previous"))
    assert (start if start == "previous" else Path(start).name) == expected
    assert not (folder / "checkpoint-20").exists(), "a checkpoint at the stop step is dropped"
    assert len(trainer.callbacks) == 1
    # the first segment, with nothing of its own: from the start
    assert segment_start(FakeTrainer(tmp_path / "none"), None, segment(20, None)) is None
