"""Tuned-model checkpoints: merging a LoRA into a full checkpoint (vLLM on them: tests/external/test_vllm.py)."""

from __future__ import annotations

import pytest
import yaml
from conftest import DEFAULT_CONFIG, dry_run_counts, hf_backend, nonzero_lora, resolved_prompt

from snakeskills.backends import SamplingParams, build_request

PROMPT = resolved_prompt(user="{problem}=")


@pytest.fixture()
def adapter(tiny_checkpoint, tmp_path):
    """A LoRA adapter on the tiny checkpoint with non-zero weights (so merging changes the model)."""
    from transformers import AutoTokenizer

    model = nonzero_lora(tiny_checkpoint, seed=0)
    folder = tmp_path / "adapter"
    model.save_pretrained(folder)
    AutoTokenizer.from_pretrained(tiny_checkpoint).save_pretrained(folder)
    return folder


def test_merged_checkpoint_generates_like_base_plus_adapter(tiny_checkpoint, adapter, tmp_path):
    from snakeskills.models.merge import merge_adapter

    merged = tmp_path / "merged"
    merge_adapter(
        base_model_path=str(tiny_checkpoint),
        adapter_path=adapter,
        output_dir=merged,
        dtype="auto",
        trust_remote_code=False,
    )
    assert (merged / "config.json").exists() and not (merged / "adapter_config.json").exists()
    sampling = SamplingParams(temperature=0.0, top_p=1.0, top_k=0, max_new_tokens=6)
    with_adapter = hf_backend(str(tiny_checkpoint), adapter_path=str(adapter), device="cpu", threads=1)
    requests = [build_request(with_adapter, PROMPT, {"problem": f"{a}+{a}"}, a) for a in range(8)]
    full = hf_backend(str(merged), device="cpu", threads=1)
    plain = hf_backend(str(tiny_checkpoint), device="cpu", threads=1)
    assert full.generate(requests, sampling) == with_adapter.generate(requests, sampling)
    assert plain.generate(requests, sampling) != with_adapter.generate(requests, sampling)


def test_merge_option_plans_one_merge_per_round(tmp_path):
    config = yaml.safe_load(DEFAULT_CONFIG.read_text())
    config["sft"]["merge"] = True
    configfile = tmp_path / "config.yaml"
    configfile.write_text(yaml.safe_dump(config))
    counts = dry_run_counts(tmp_path, "--config", "rounds=2", configfile=configfile)
    assert counts["merge_adapter"] == 2
    assert "merge_adapter" not in dry_run_counts(tmp_path, "--config", "rounds=2")
