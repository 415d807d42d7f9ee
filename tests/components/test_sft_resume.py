"""SFT killed mid-training resumes from its last Trainer checkpoint (real peft + Trainer, tiny model), for a LoRA
and for a full fine-tune."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import training_section

from snakeskills.io import write_jsonl
from snakeskills.training.rounds import RoundRun
from snakeskills.training.sft import train as train_sft

TRAINING = training_section(
    num_epochs=3, learning_rate=1e-3, batch_size=4, max_length=32, weight_decay=0.0, warmup_steps=0, checkpoint_steps=20
)
LORA = {"r": 4, "alpha": 8, "dropout": 0.0, "target_modules": "all-linear"}


@pytest.fixture()
def sft_data(tmp_path):
    records = [
        {
            "id": f"p{i}",
            "messages": [
                {"role": "user", "content": f"{i}+{i}="},
                {"role": "assistant", "content": f"\\boxed{{{2 * i}}}"},
            ],
        }
        for i in range(200)
    ]
    path = tmp_path / "data.jsonl"
    write_jsonl(path, records)
    return path


def _arguments(tiny_checkpoint, sft_data, output_dir, method) -> dict:
    return {
        "weights": method,
        "base_model_path": str(tiny_checkpoint),
        "data_path": str(sft_data),
        "output_dir": str(output_dir),
        "lora": LORA if method == "lora" else None,
        "training": TRAINING,
        "chat_template": False,
        "chat_template_kwargs": {},
        "seed": 0,
        "threads": 1,
        "dtype": "auto",
        "trust_remote_code": False,
    }


def _tuned_weights(folder):
    from safetensors.torch import load_file

    (weights,) = folder.glob("*.safetensors")  # adapter_model.safetensors (lora), model.safetensors (full)
    return load_file(str(weights))


@pytest.mark.parametrize("method", ["lora", "full"])
def test_killed_sft_resumes_from_its_last_checkpoint(tiny_checkpoint, sft_data, tmp_path, method):
    import torch

    reference = tmp_path / "reference" / "tuned"
    metrics = train_sft(RoundRun(**_arguments(tiny_checkpoint, sft_data, reference, method)))
    assert metrics["global_step"] == 150 and metrics["resumed_from_checkpoint"] is None
    assert not (reference.parent / ".tuned-trainer").exists(), "a finished training keeps no checkpoints"

    # train in a separate process and SIGKILL it once its first checkpoint is on disk
    killed = tmp_path / "killed" / "tuned"
    arguments = json.dumps(_arguments(tiny_checkpoint, sft_data, killed, method))
    script = (
        "import json; from snakeskills.training.rounds import RoundRun; from snakeskills.training.sft import train; "
    )
    script += f"train(RoundRun(**json.loads({arguments!r})))"
    process = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    trainer_dir = killed.parent / ".tuned-trainer"
    deadline = time.monotonic() + 300
    while not (trainer_dir / "checkpoint-20" / "trainer_state.json").exists():
        assert process.poll() is None, "training ended before its first checkpoint"
        assert time.monotonic() < deadline, "no checkpoint within 300 s"
        time.sleep(0.02)
    time.sleep(0.2)  # kill a moment later: mid-step or mid-save, both must resume
    os.kill(process.pid, signal.SIGKILL)
    process.wait()
    assert not killed.exists(), "a killed training leaves no adapter or checkpoint behind"

    # the kill may land while a checkpoint is being written; make that case certain: a newer checkpoint
    # with weights but no trainer state (killed before its last file), and one with a cut-off state
    complete = sorted(trainer_dir.glob("checkpoint-*/trainer_state.json"), key=lambda p: int(p.parent.name[11:]))
    newest_complete = complete[-1].parent
    partial, cut_off = trainer_dir / "checkpoint-140", trainer_dir / "checkpoint-145"
    shutil.copytree(newest_complete, partial)
    (partial / "trainer_state.json").unlink()
    shutil.copytree(newest_complete, cut_off)
    (cut_off / "trainer_state.json").write_text('{"global_step": 14')

    # checkpoints belong to one training run: the same leftovers under a run with another learning rate
    # are discarded, not resumed from
    changed = tmp_path / "changed" / "tuned"
    shutil.copytree(trainer_dir, changed.parent / ".tuned-trainer")
    changed_run = train_sft(
        RoundRun(
            **{
                **_arguments(tiny_checkpoint, sft_data, changed, method),
                "training": {**TRAINING, "learning_rate": 5e-4},
            }
        )
    )
    assert changed_run["resumed_from_checkpoint"] is None and changed_run["global_step"] == 150

    resumed = train_sft(RoundRun(**_arguments(tiny_checkpoint, sft_data, killed, method)))
    assert resumed["resumed_from_checkpoint"] is not None
    resumed_step = int(Path(resumed["resumed_from_checkpoint"]).name.removeprefix("checkpoint-"))
    assert 20 <= resumed_step < 140, resumed["resumed_from_checkpoint"]
    assert resumed_step >= int(newest_complete.name.removeprefix("checkpoint-"))
    assert resumed["global_step"] == 150
    assert not trainer_dir.exists()
    expected, actual = _tuned_weights(reference), _tuned_weights(killed)
    assert expected.keys() == actual.keys()
    for name in expected:
        torch.testing.assert_close(actual[name], expected[name], rtol=1e-4, atol=1e-5)
