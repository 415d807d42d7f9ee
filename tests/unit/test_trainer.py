"""What every trainer shares (snakeskills.training.trainer): saving in the checkpoint's dtype, and a training stopped
by SIGTERM or Ctrl-C saying on the console and in the job's log what it kept."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest


@pytest.mark.parametrize(
    ("keys", "expected"),
    [({}, {"dtype"}), ({"torch_dtype": "float32"}, {"torch_dtype"}), ({"dtype": "a", "torch_dtype": "b"}, None)],
    ids=["neither", "older-name", "both"],
)
def test_cast_saved_weights_names_the_dtype_under_every_key_the_config_uses(tmp_path, keys, expected):
    import torch
    from safetensors.torch import load_file, save_file

    from snakeskills.training.trainer import cast_saved_weights

    save_file({"weight": torch.ones(2), "steps": torch.arange(2)}, str(tmp_path / "model.safetensors"))
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama", **keys}))
    cast_saved_weights(tmp_path, torch.bfloat16)
    tensors = load_file(str(tmp_path / "model.safetensors"))
    assert tensors["weight"].dtype == torch.bfloat16 and tensors["steps"].dtype == torch.int64
    config = json.loads((tmp_path / "config.json").read_text())
    written = {key for key in ("dtype", "torch_dtype") if key in config}
    assert written == (expected or {"dtype", "torch_dtype"})
    assert {config[key] for key in written} == {"bfloat16"}


# a trainer stopped by SIGTERM at step 5 of 9, with checkpoint 3 on disk (and checkpoint 5 half-written)
SIGTERMED_TRAINING = """
import os, signal, sys, time
from types import SimpleNamespace
from snakeskills.job import script_logging
from snakeskills.training.checkpoints import checkpoint_timer
from snakeskills.training.trainer import run_trainer

class Trainer:
    def __init__(self, output_dir):
        self.args = SimpleNamespace(output_dir=output_dir, save_strategy="no", save_steps=500)
        self.state = SimpleNamespace(global_step=0, max_steps=9)
        self.callback_handler = SimpleNamespace(callbacks=[checkpoint_timer(10)])

    def remove_callback(self, callback):
        pass

    def train(self, resume_from_checkpoint):
        self.state.global_step = 5
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(60)

with script_logging(sys.argv[1]):
    run_trainer(Trainer(sys.argv[2]), None, 10)
"""


def test_a_training_stopped_by_sigterm_says_on_the_console_and_in_its_log_what_it_kept(tmp_path):
    """SIGTERM (SLURM's time limit, scancel) interrupts a training as Ctrl-C does: one line, no traceback, exit 130."""
    log, trainer_dir = tmp_path / "train.log", tmp_path / ".adapter-trainer"
    (trainer_dir / "checkpoint-3").mkdir(parents=True)
    state = trainer_dir / "checkpoint-3" / "trainer_state.json"
    state.write_text(json.dumps({"global_step": 3}))
    os.utime(state, (time.time() - 3600, time.time() - 3600))  # saved an hour before
    (trainer_dir / "checkpoint-5").mkdir()
    command = [sys.executable, "-c", SIGTERMED_TRAINING, str(log), str(trainer_dir)]
    process = subprocess.run(command, capture_output=True, text=True, timeout=120)
    message = (
        "training interrupted (SIGTERM) at step 5 of 9 (56 %); kept: the checkpoint of step 3, saved 1h00m ago; "
        "rerunning the same command resumes from step 3"
    )
    assert (process.returncode, process.stdout, process.stderr) == (130, "", f"snakeskills: {message} (log: {log})\n")
    text = log.read_text()
    assert f"WARNING: {message}\n" in text and "Traceback" not in text


@pytest.mark.parametrize("resumed_at", [0, 30])
def test_the_step_lines_give_an_eta_after_the_first_step_then_every_interval(resumed_at):
    """A long run's first step (110 s for a GRPO step on a loaded laptop) ends with a logged line, ETA included, and
    later steps only at the trainer's logging steps or after ``min_interval`` seconds; a resumed run's first step
    counts from the resume."""
    from transformers import TrainerControl, TrainerState

    from snakeskills.training.trainer import step_logger

    callback, state = step_logger(min_interval=3600.0), TrainerState(global_step=resumed_at)
    callback.on_train_begin(None, state, TrainerControl())
    logged = []
    for step in range(resumed_at + 1, resumed_at + 4):
        state.global_step = step
        logged.append(callback.on_step_end(None, state, TrainerControl()).should_log)
    assert logged == [True, False, False]
