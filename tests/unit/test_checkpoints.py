"""Trainer checkpoints of one run only, complete ones only (snakeskills.training.checkpoints)."""

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
