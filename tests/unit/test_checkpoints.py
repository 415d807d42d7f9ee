"""Trainer checkpoints of one run only, complete ones only, saved by time or steps, and what an interrupted training
says it kept (snakeskills.training.checkpoints)."""

from __future__ import annotations

import json


def test_last_complete_checkpoint_skips_and_removes_partial_ones(tmp_path):
    from snakeskills.training.checkpoints import last_complete_checkpoint

    assert last_complete_checkpoint(tmp_path / "absent") is None
    assert last_complete_checkpoint(tmp_path) is None
    for step in (20, 40, 100):
        (tmp_path / f"checkpoint-{step}").mkdir()
        (tmp_path / f"checkpoint-{step}" / "trainer_state.json").write_text(json.dumps({"global_step": step}))
    (tmp_path / "checkpoint-120").mkdir()  # weights only: killed before the trainer state was written
    (tmp_path / "checkpoint-120" / "adapter_model.safetensors").write_bytes(b"")
    (tmp_path / "checkpoint-140").mkdir()  # killed while writing the trainer state
    (tmp_path / "checkpoint-140" / "trainer_state.json").write_text('{"global_st')
    (tmp_path / "checkpoint-9x").mkdir()  # not a checkpoint name: left alone
    # numeric, not lexical, order: 100 is newer than 40
    assert last_complete_checkpoint(tmp_path) == str(tmp_path / "checkpoint-100")
    assert sorted(path.name for path in tmp_path.iterdir()) == [
        "checkpoint-100",
        "checkpoint-20",
        "checkpoint-40",
        "checkpoint-9x",
    ]


def test_claim_trainer_dir_keeps_only_the_same_runs_checkpoints(tmp_path):
    from snakeskills.training.checkpoints import claim_trainer_dir, training_fingerprint

    examples, other_examples = [{"prompt": "1+1=", "completion": "2"}], [{"prompt": "1+1=", "completion": "3"}]
    fingerprint = training_fingerprint({"base_model_path": "m"}, {"learning_rate": 1e-3}, examples)
    assert fingerprint == training_fingerprint({"base_model_path": "m"}, {"learning_rate": 1e-3}, examples)
    for other in (
        training_fingerprint({"base_model_path": "other"}, {"learning_rate": 1e-3}, examples),
        training_fingerprint({"base_model_path": "m"}, {"learning_rate": 2e-3}, examples),
        training_fingerprint({"base_model_path": "m"}, {"learning_rate": 1e-3}, other_examples),
    ):
        assert other != fingerprint

    trainer_dir = tmp_path / ".adapter-trainer"
    claim_trainer_dir(trainer_dir, fingerprint)
    (trainer_dir / "checkpoint-20").mkdir()
    claim_trainer_dir(trainer_dir, fingerprint)  # the same run, resumed: its checkpoints stay
    assert (trainer_dir / "checkpoint-20").is_dir()
    claim_trainer_dir(trainer_dir, "another run")  # a changed run: they go
    assert not (trainer_dir / "checkpoint-20").exists()
    (trainer_dir / "checkpoint-20").mkdir()
    (trainer_dir / "run_fingerprint.json").unlink()  # leftovers nobody vouches for: they go too
    claim_trainer_dir(trainer_dir, "another run")
    assert not (trainer_dir / "checkpoint-20").exists()
    assert json.loads((trainer_dir / "run_fingerprint.json").read_text()) == {"fingerprint": "another run"}


def test_claim_checkpoints_resumes_whatever_schedule_saved_the_checkpoint(tmp_path):
    """A run's checkpoint is resumed whether checkpoint_steps is set or not, and a changed checkpoint schedule (the
    trainer's save arguments) is the same run: its checkpoints stay."""
    from snakeskills.training.checkpoints import claim_checkpoints, training_fingerprint

    class Arguments:  # what claim_checkpoints reads of a TRL config: its folder and the processes' turn taking
        output_dir = str(tmp_path / ".adapter-trainer")

        @staticmethod
        def main_process_first(**_):
            import contextlib

            return contextlib.nullcontext()

    by_time = {"learning_rate": 1e-3, "save_strategy": "no", "save_steps": 500, "save_total_limit": 2}
    by_steps = {**by_time, "save_strategy": "steps", "save_steps": 20}
    assert training_fingerprint({}, by_time, []) == training_fingerprint({}, by_steps, [])
    assert claim_checkpoints(Arguments, {}, by_time, []) is None
    checkpoint = tmp_path / ".adapter-trainer" / "checkpoint-7"
    checkpoint.mkdir()
    (checkpoint / "trainer_state.json").write_text(json.dumps({"global_step": 7}))
    assert claim_checkpoints(Arguments, {}, by_time, []) == str(checkpoint)
    assert claim_checkpoints(Arguments, {}, by_steps, []) == str(checkpoint)
    assert claim_checkpoints(Arguments, {}, {**by_time, "learning_rate": 2e-3}, []) is None  # another run


def test_checkpoint_timer_saves_at_the_first_step_its_minutes_after_the_start_or_the_last_save():
    from transformers import TrainerControl, TrainerState

    from snakeskills.training.checkpoints import checkpoint_timer

    now = [0.0]
    timer = checkpoint_timer(10, clock=lambda: now[0])
    state, control = TrainerState(max_steps=100), TrainerControl()

    def steps(*minutes: float) -> list[bool]:
        """Whether the timer asks for a checkpoint at the end of each of the next steps, which take ``minutes``."""
        asked = []
        for duration in minutes:
            now[0] += 60 * duration
            state.global_step += 1
            control.should_save = False  # the Trainer resets it when a step begins
            asked.append(timer.on_step_end(None, state, control).should_save)
            if asked[-1]:
                timer.on_save(None, state, control)  # the Trainer saved the checkpoint
        return asked

    timer.on_train_begin(None, state, control)
    assert steps(4, 4, 4, 4, 4, 2) == [False, False, True, False, False, True]  # minute 12, then 10 after it
    assert steps(9.9, 0.1) == [False, True]
    assert steps(30) == [True]  # one long step: one checkpoint
    steps(5)
    timer.on_save(None, state, control)  # a checkpoint saved by checkpoint_steps counts too
    assert steps(6, 4) == [False, True]
    now[0] += 3600  # time before training (re)starts does not count: loading, a resumed run's checkpoint
    timer.on_train_begin(None, state, control)
    assert steps(9) == [False]
    state.global_step = 98
    assert steps(20, 20) == [True, False]  # not at the last step: the trained model is saved right after it
    now[0] += 3600  # nor where training stops early (the bootstrap reached its accuracy)
    stopping = TrainerControl(should_training_stop=True)
    assert not timer.on_step_end(None, TrainerState(max_steps=100, global_step=50), stopping).should_save

    off = checkpoint_timer(0, clock=lambda: now[0])
    off.on_train_begin(None, state, control)
    now[0] += 10**6
    assert not off.on_step_end(None, TrainerState(max_steps=100, global_step=1), TrainerControl()).should_save


def test_kept_checkpoint_is_the_newest_complete_one_and_its_age(tmp_path):
    import os
    import time

    from snakeskills.training.checkpoints import kept_checkpoint

    assert kept_checkpoint(tmp_path / "absent") is None
    for step, age in ((10, 600), (20, 250)):
        (tmp_path / f"checkpoint-{step}").mkdir()
        state = tmp_path / f"checkpoint-{step}" / "trainer_state.json"
        state.write_text(json.dumps({"global_step": step}))
        os.utime(state, (time.time() - age, time.time() - age))
    (tmp_path / "checkpoint-30").mkdir()  # being saved when the training was interrupted: not kept, not removed
    step, age = kept_checkpoint(tmp_path)
    assert step == 20 and 249 < age < 260
    assert (tmp_path / "checkpoint-30").is_dir()


def test_the_interruption_message_says_the_step_reached_what_was_kept_and_what_a_rerun_does():
    from snakeskills.training.checkpoints import interruption_message

    assert interruption_message(cause="Ctrl-C", step=37, max_steps=120, kept=(30, 250), minutes=10, steps=0) == (
        "training interrupted (Ctrl-C) at step 37 of 120 (31 %); kept: the checkpoint of step 30, saved 4m10s ago; "
        "rerunning the same command resumes from step 30"
    )
    assert interruption_message(cause="SIGTERM", step=7, max_steps=120, kept=None, minutes=10, steps=0) == (
        "training interrupted (SIGTERM) at step 7 of 120 (6 %); no checkpoint yet (one is saved every 10 minutes of "
        "training, training.checkpoint_minutes): a rerun starts over"
    )
    assert interruption_message(cause="Ctrl-C", step=3, max_steps=9, kept=None, minutes=0.5, steps=50) == (
        "training interrupted (Ctrl-C) at step 3 of 9 (33 %); no checkpoint yet (one is saved every 0.5 minutes of "
        "training, training.checkpoint_minutes, and every 50 steps, training.checkpoint_steps): a rerun starts over"
    )
    assert interruption_message(cause="Ctrl-C", step=3, max_steps=9, kept=None, minutes=0, steps=0) == (
        "training interrupted (Ctrl-C) at step 3 of 9 (33 %); no checkpoint yet (none is saved: "
        "training.checkpoint_minutes and checkpoint_steps are 0): a rerun starts over"
    )
    # several processes trained: the job that launched them knows what the disk kept, not the step reached
    assert interruption_message(cause="SIGTERM", step=None, max_steps=0, kept=(8, 5), minutes=10, steps=0) == (
        "training interrupted (SIGTERM); kept: the checkpoint of step 8, saved 5s ago; rerunning the same command "
        "resumes from step 8"
    )
