"""A training killed mid-way resumes from its last Trainer checkpoint and ends with an uninterrupted run's weights
(real peft + TRL trainers, tiny model): SFT killed with SIGKILL, for a LoRA and for a full fine-tune; every method
(SFT, DPO, KTO, GRPO) stopped after a checkpoint at an epoch's end, inside a later epoch or at its last step, with and
without gradient accumulation; every method with the default schedule (a checkpoint by time, none by steps) stopped
by Ctrl-C after a checkpoint; GRPO's order of problems by epoch."""

from __future__ import annotations

import dataclasses
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
    # complete as the resume reads it: a trainer state that parses (the kill may cut the newest one's mid-write)
    states = [path for path in trainer_dir.glob("checkpoint-*/trainer_state.json") if _parses(path)]
    complete = sorted(states, key=lambda p: int(p.parent.name[11:]))
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


# ---------------------------------------------------------------- every method, resumed across epochs
#
# A run stopped right after its checkpoint k (an exception from the Trainer's on_save: the checkpoint is complete, as
# after a SIGKILL a moment later) and rerun must end exactly where an uninterrupted run ends: the same loss, learning
# rate, gradient norm and rewards at every step and bit-equal weights. Each data set is a few batches, so an epoch is 3
# or 4 optimizer steps and a run 2 or 3 epochs; with gradient accumulation each step is two forward passes (and the
# epoch's last step of SFT, DPO and KTO one).

PROMPTS = 10  # SFT examples, DPO pairs, KTO samples: 3 batches of 4 (4, 4, 2) an epoch
GRPO_PROBLEMS = 17  # 4 problems a step: 4 steps an epoch, one problem left over


class Killed(Exception):
    """Raised right after a checkpoint is saved: the training stops as if killed."""


def method_data(method: str) -> list[dict]:
    """A round's data file for ``method``, every row on another problem (so the order of the rows matters)."""

    def user(i):
        return [{"role": "user", "content": f"{i}+{i % 7}="}]

    def assistant(text):
        return [{"role": "assistant", "content": text}]

    if method == "sft":
        return [{"id": f"p{i}", "messages": user(i) + assistant(f"\\boxed{{{i + i % 7}}}")} for i in range(PROMPTS)]
    if method == "dpo":
        return [
            {"id": f"p{i}", "prompt": user(i), "chosen": assistant(str(i + i % 7)), "rejected": assistant(str(i))}
            for i in range(PROMPTS)
        ]
    if method == "kto":
        return [
            {"id": f"p{i}", "prompt": user(i), "completion": assistant(str(i + i % 7 + i % 2)), "label": i % 2 == 0}
            for i in range(PROMPTS)
        ]
    return [
        {"id": f"p{i}", "problem": f"{i}+{i % 7}", "expected_answer": str(i + i % 7), "benchmark": "arithmetic"}
        | {"prompt": user(i)}
        for i in range(GRPO_PROBLEMS)
    ]


def method_options(method: str) -> dict:
    from snakeskills.plan.config import default_config
    from snakeskills.plan.sections import benchmark_judge

    return {
        "sft": {},
        "dpo": {"beta": 0.1, "loss": "sigmoid", "nll_weight": 1.0},
        "kto": {"beta": 1.0, "loss": "kto", "desirable_weight": None, "undesirable_weight": None},
        "grpo": {
            "num_generations": 4,
            "beta": 0.04,
            "loss": "dapo",
            "sampling": {"temperature": 1.0, "top_p": 1.0, "top_k": 0, "max_new_tokens": 16},
            # the length term: the untrained model's completions are all wrong, but not all as long
            "rewards": {"correct": 1.0, "answer_format": 0.0, "length": 1.0},
            "judges": {"arithmetic": benchmark_judge(default_config(), "arithmetic")},
            "reasoning": {"parse_reasoning": False, "end_reasoning_string": "</think>"},
            "vllm_mode": None,
        },
    }[method]


def method_round(tiny_checkpoint, data: Path, output: Path, method: str, accumulation: int) -> RoundRun:
    """A LoRA round of ``method`` with a checkpoint every step: 3 epochs of 3 steps (GRPO: 2 of 4)."""
    grpo = method == "grpo"
    training = training_section(
        num_epochs=2 if grpo else 3,
        learning_rate=2e-2,
        batch_size=16 if grpo else 4,
        max_length=32,
        checkpoint_steps=1,
        gradient_accumulation_steps=accumulation,
    )
    return RoundRun(**{**_arguments(tiny_checkpoint, data, output, "lora"), "training": training})


def logged_steps(metrics: dict) -> list[dict]:
    """Each step's logged loss, learning rate, gradient norm, rewards...: what the run logged but its times and
    SFT's, DPO's and KTO's ``num_tokens`` (TRL's count of the tokens this process trained on, from 0 on resume)."""
    return [
        {key: value for key, value in entry.items() if "time" not in key and key != "num_tokens"}
        for entry in metrics["log_history"]
        if "loss" in entry
    ]


class StepClock:
    """The checkpoint timer's clock in a test: each training step takes ``minutes_per_step`` (so when a checkpoint
    is saved does not depend on the machine's speed)."""

    def __init__(self, minutes_per_step: float):
        self.now, self.step_seconds = 0.0, 60 * minutes_per_step

    def __call__(self) -> float:
        return self.now


@pytest.fixture()
def train_method(monkeypatch):
    """``train(method, run, options, kill_after=None, interrupt_at=None, minutes_per_step=None, saves=None)``: a round
    in this process that logs every step, stopped by ``Killed`` right after checkpoint ``kill_after`` is saved or by
    Ctrl-C (KeyboardInterrupt) at the end of step ``interrupt_at``; with ``minutes_per_step``, the checkpoint timer's
    clock says each step took that long (``StepClock``); ``saves`` gets the step of each checkpoint saved."""
    from transformers import TrainerCallback

    from snakeskills.training import trainer as trainer_module
    from snakeskills.training.rounds import train_round

    class EveryStep(TrainerCallback):
        def __init__(self, kill_after, interrupt_at, clock, saves):
            self.kill_after, self.interrupt_at, self.clock, self.saves = kill_after, interrupt_at, clock, saves

        def on_step_begin(self, args, state, control, **kwargs):
            if self.clock is not None:
                self.clock.now += self.clock.step_seconds

        def on_step_end(self, args, state, control, **kwargs):
            control.should_log = True  # every step's loss and gradient norm in the log history
            if state.global_step == self.interrupt_at:
                raise KeyboardInterrupt

        def on_save(self, args, state, control, **kwargs):
            self.saves.append(state.global_step)
            if state.global_step == self.kill_after:
                raise Killed(f"after checkpoint-{state.global_step}")

    def train(method, run, options, kill_after=None, interrupt_at=None, minutes_per_step=None, saves=None):
        original = trainer_module.run_trainer
        clock = StepClock(minutes_per_step) if minutes_per_step is not None else None

        def run_trainer(trainer, resume_from, num_examples):
            if clock is not None:
                (timer,) = [callback for callback in trainer.callback_handler.callbacks if hasattr(callback, "clock")]
                timer.clock = clock
            trainer.add_callback(EveryStep(kill_after, interrupt_at, clock, [] if saves is None else saves))
            return original(trainer, resume_from, num_examples)

        with monkeypatch.context() as patch:
            patch.setattr(trainer_module, "run_trainer", run_trainer)
            return train_round(method, run, options, log_path=Path(run.output_dir).parent / "train.log")

    return train


@pytest.mark.parametrize("accumulation", [1, 2], ids=["one-pass-a-step", "accumulation"])
@pytest.mark.parametrize("method", ["sft", "dpo", "kto", "grpo"])
def test_a_training_stopped_after_any_checkpoint_resumes_to_the_uninterrupted_weights(
    tiny_checkpoint, tmp_path, train_method, method, accumulation
):
    import torch

    data = tmp_path / "data.jsonl"
    write_jsonl(data, method_data(method))
    options = method_options(method)
    steps_per_epoch, epochs = (4, 2) if method == "grpo" else (3, 3)

    whole = train_method(
        method, method_round(tiny_checkpoint, data, tmp_path / "whole" / "adapter", method, accumulation), options
    )
    assert whole["global_step"] == steps_per_epoch * epochs
    expected_weights = _tuned_weights(tmp_path / "whole" / "adapter")
    expected_steps = logged_steps(whole)
    assert [entry["step"] for entry in expected_steps] == list(range(1, whole["global_step"] + 1))
    if method == "grpo":  # some groups' completions differ in length: an advantage to learn from, not the KL alone
        assert min(entry["frac_reward_zero_std"] for entry in expected_steps) < 1

    # the end of the first epoch; a step inside the second (the resumed run skips that epoch's first batches, then
    # crosses into the next); the last step (killed before the trained model was saved)
    for kill_after in (steps_per_epoch, steps_per_epoch + steps_per_epoch // 2, steps_per_epoch * epochs):
        output = tmp_path / f"killed-after-{kill_after}" / "adapter"
        run = method_round(tiny_checkpoint, data, output, method, accumulation)
        with pytest.raises(Killed):
            train_method(method, run, options, kill_after=kill_after)
        assert not output.exists()
        resumed = train_method(method, run, options)
        assert resumed["resumed_from_checkpoint"].endswith(f"checkpoint-{kill_after}")
        assert logged_steps(resumed) == expected_steps, f"killed after checkpoint {kill_after}"
        weights = _tuned_weights(output)
        assert weights.keys() == expected_weights.keys()
        differing = [name for name in weights if not torch.equal(weights[name], expected_weights[name])]
        assert not differing, f"killed after checkpoint {kill_after}: {differing}"


@pytest.mark.parametrize("method", ["sft", "dpo", "kto", "grpo"])
def test_with_the_default_schedule_a_training_saves_by_time_and_resumes_after_ctrl_c(
    tiny_checkpoint, tmp_path, train_method, method
):
    """The defaults save a checkpoint every checkpoint_minutes (10) of training and none by steps: with steps of 4
    minutes (the timer's clock driven by the steps), at steps 3 and 6, not at the last. Ctrl-C at step 5 says what
    was kept; the rerun resumes from checkpoint 3 (saves again 10 minutes after it resumed) and ends with the weights
    and every step's loss of a run that saved no checkpoint."""
    import torch

    from snakeskills.training.checkpoints import TrainingInterrupted

    data = tmp_path / "data.jsonl"
    write_jsonl(data, method_data(method))
    options = method_options(method)
    steps = 8 if method == "grpo" else 9
    run = method_round(tiny_checkpoint, data, tmp_path / "default" / "adapter", method, 1)
    run.training = training_section(**{key: run.training[key] for key in ("num_epochs", "learning_rate", "batch_size")})
    assert (run.training["checkpoint_minutes"], run.training["checkpoint_steps"]) == (10, 0), "the defaults"

    unsaved = dataclasses.replace(run, output_dir=str(tmp_path / "unsaved" / "adapter"))
    unsaved.training = {**run.training, "checkpoint_minutes": 0}
    whole_saves, interrupted_saves, resumed_saves = [], [], []
    whole = train_method(method, unsaved, options, minutes_per_step=4, saves=whole_saves)
    assert whole["global_step"] == steps and whole_saves == []
    with pytest.raises(TrainingInterrupted) as interrupted:
        train_method(method, run, options, interrupt_at=5, minutes_per_step=4, saves=interrupted_saves)
    assert interrupted_saves == [3]
    assert str(interrupted.value).startswith(
        f"training interrupted (Ctrl-C) at step 5 of {steps} ({round(500 / steps)} %); kept: the checkpoint of step 3, "
        "saved "
    )
    assert str(interrupted.value).endswith("ago; rerunning the same command resumes from step 3")
    resumed = train_method(method, run, options, minutes_per_step=4, saves=resumed_saves)
    assert resumed["resumed_from_checkpoint"].endswith("checkpoint-3") and resumed_saves == [6]
    assert logged_steps(resumed) == logged_steps(whole)
    expected, weights = (
        _tuned_weights(tmp_path / "unsaved" / "adapter"),
        _tuned_weights(tmp_path / "default" / "adapter"),
    )
    assert weights.keys() == expected.keys()
    assert not [name for name in weights if not torch.equal(weights[name], expected[name])]


def test_grpo_draws_each_epochs_order_from_the_seed_as_an_uninterrupted_run_draws_it():
    """Epoch e's order is TRL's sampler's e-th (an uninterrupted run's weights are as before), whichever epochs the
    sampler went through before; several processes' loaders, skipping a resumed epoch's first batches, pass the
    Trainer's set_epoch on to it."""
    from accelerate.data_loader import prepare_data_loader, skip_first_batches
    from torch.utils.data import DataLoader
    from trl.trainer.utils import RepeatSampler

    from snakeskills.training.grpo import epoch_sampler_class

    settings = {"data_source": list(range(17)), "mini_repeat_count": 2, "batch_size": 4, "repeat_count": 2, "seed": 3}
    trl_sampler = RepeatSampler(**settings)
    trl_orders = [list(trl_sampler) for _ in range(4)]
    assert trl_orders[1] != trl_orders[0]
    for epoch in (2, 0, 3, 1):
        sampler = epoch_sampler_class()(**settings)
        sampler.set_epoch(epoch)
        assert list(sampler) == trl_orders[epoch]

    sampler = epoch_sampler_class()(**settings)
    loader = DataLoader(settings["data_source"], sampler=sampler, batch_size=8)
    loader = prepare_data_loader(loader, num_processes=2, process_index=1, put_on_device=False)
    loader.set_sampler(sampler)  # as the trainer's loader does
    skipping = skip_first_batches(loader, 1)
    skipping.set_epoch(2)
    assert sampler.epoch == 2
    # process 1 takes every other batch of 8 (1, 3, 5, 7) and skips its first
    expected = [index for batch in (3, 5, 7) for index in trl_orders[2][8 * batch : 8 * batch + 8]]
    assert [int(index) for batch in skipping for index in batch] == expected


def _parses(path: Path) -> bool:
    try:
        json.loads(path.read_text())
    except ValueError:
        return False
    return True


# ---------------------------------------------------------------- a round trained in segments (eval_every_steps)
@pytest.mark.parametrize("method", ["lora", "full"])
def test_sft_in_segments_ends_with_one_jobs_weights(tiny_checkpoint, sft_data, tmp_path, method):
    """A round trained in segments (plan/validation.py: each job stops at its step and the next resumes its trainer
    state) ends with the weights one job trains, bit for bit, and each segment's weights are its step's."""
    import torch

    training = {**TRAINING, "max_steps": 30, "checkpoint_steps": 0}
    whole = tmp_path / "whole" / "tuned"
    train_sft(RoundRun(**{**_arguments(tiny_checkpoint, sft_data, whole, method), "training": training}))
    resume, histories = None, []
    for step in (10, 25, 30):
        folder = tmp_path / f"step{step}"
        arguments = _arguments(tiny_checkpoint, sft_data, folder / "tuned", method)
        state = folder / "trainer-state"
        metrics = train_sft(
            RoundRun(
                **{**arguments, "training": training},
                stop_at_step=step,
                resume_state=resume,
                state_dir=str(state),
            )
        )
        assert metrics["global_step"] == step and metrics["segment"]["resumed_state"] == resume
        assert json.loads((state / "trainer_state.json").read_text())["global_step"] == step
        assert not (folder / ".tuned-trainer").exists(), "the segment's own checkpoints are dropped"
        histories.append(metrics["log_history"])
        resume = str(state)
    expected, actual = _tuned_weights(whole), _tuned_weights(tmp_path / "step30" / "tuned")
    assert expected.keys() == actual.keys()
    assert not [name for name in expected if not torch.equal(expected[name], actual[name])]
    assert max(entry.get("step", 0) for entry in histories[-1]) == 30, "the last segment logs the whole round"
