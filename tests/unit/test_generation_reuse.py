"""A finished generate job reused by content (generation/reuse.py): the key follows the weights' bytes, the problems,
the settings and the job, not a trainer's metrics nor the order peft writes target_modules in; kept rows come back
only for the same key."""

from __future__ import annotations

import json

import pytest

from snakeskills.generation import reuse


@pytest.fixture()
def job(tmp_path):
    weights = tmp_path / "adapter"
    weights.mkdir()
    (weights / "adapter_model.safetensors").write_bytes(b"weights")
    (weights / "adapter_config.json").write_text(json.dumps({"r": 4, "target_modules": ["q_proj", "v_proj"]}))
    (weights / "training_metrics.json").write_text(json.dumps({"train_runtime": 1.0}))
    base = tmp_path / "base"
    base.mkdir()
    (base / "model.safetensors").write_bytes(b"base")
    split = tmp_path / "validation.jsonl"
    split.write_text('{"id": "1", "problem": "1+1"}\n')
    return {"weights": weights, "base": base, "split": split}


def key_of(job, settings=None, **wildcards) -> str:
    return reuse.content_key(
        settings or {"split": str(job["split"]), "generation": {"seed": 0}},
        weights=str(job["weights"]),
        base_model=str(job["base"]),
        split=str(job["split"]),
        wildcards={"seed": "0", "chunk": "0", "num_chunks": "2", **wildcards},
    )


def test_the_key_follows_what_decides_the_rows(job):
    key = key_of(job)
    # a rerun's trainer metrics and peft's target_modules order are not the weights
    (job["weights"] / "training_metrics.json").write_text(json.dumps({"train_runtime": 2.0}))
    (job["weights"] / "adapter_config.json").write_text(json.dumps({"target_modules": ["v_proj", "q_proj"], "r": 4}))
    assert key_of(job) == key
    assert key_of(job, {"split": "elsewhere/validation.jsonl", "generation": {"seed": 0}}) == key, "paths do not count"
    assert key_of(job, seed="1") != key and key_of(job, chunk="1") != key
    assert key_of(job, {"split": str(job["split"]), "generation": {"seed": 1}}) != key
    (job["weights"] / "adapter_model.safetensors").write_bytes(b"other weights")
    assert key_of(job) != key
    (job["weights"] / "adapter_model.safetensors").write_bytes(b"weights")
    job["split"].write_text('{"id": "1", "problem": "1+2"}\n')
    assert key_of(job) != key


def test_kept_rows_come_back_for_the_same_key_only(tmp_path):
    output = tmp_path / "chunk0-of-2.jsonl"
    assert not reuse.restore(output, "a")
    output.write_text('{"generation": "2"}\n')
    reuse.keep(output, "a")
    output.unlink()  # what Snakemake does before it runs the job again
    assert not reuse.restore(output, "b") and not output.exists()
    assert reuse.restore(output, "a") and output.read_text() == '{"generation": "2"}\n'
    output.unlink()
    output.write_text('{"generation": "3"}\n')
    reuse.keep(output, "b")  # a run with other weights replaces what was kept
    output.unlink()
    assert not reuse.restore(output, "a")
    assert reuse.restore(output, "b") and output.read_text() == '{"generation": "3"}\n'
