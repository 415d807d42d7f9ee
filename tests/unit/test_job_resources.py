"""What a model job asks a cluster for: memory and runtime from its model's size, overridable per rule."""

from __future__ import annotations

import copy
import json

import pytest
from conftest import QWEN25_15B

from snakeskills.errors import SnakeskillsError
from snakeskills.plan.config import default_config, prepare_config
from snakeskills.plan.job_resources import (
    UNKNOWN,
    checkpoint_parameters,
    sampling_job_resources,
    tiny_model_parameters,
    training_job_resources,
    with_overrides,
)
from snakeskills.settings.generation import Generation

# config.json sizes of two real checkpoints, with their true parameter counts
SMOLLM2_135M = {
    "hidden_size": 576,
    "num_hidden_layers": 30,
    "num_attention_heads": 9,
    "num_key_value_heads": 3,
    "head_dim": 64,
    "intermediate_size": 1536,
    "vocab_size": 49152,
    "tie_word_embeddings": True,
    "dtype": "bfloat16",
}


def checkpoint(tmp_path, sizes: dict):
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "config.json").write_text(json.dumps(sizes))
    return str(tmp_path)


@pytest.mark.parametrize(("sizes", "true_count"), [(SMOLLM2_135M, 134_515_008), (QWEN25_15B, 1_543_714_304)])
def test_parameters_from_config_json_within_a_tenth_of_a_percent(tmp_path, sizes, true_count):
    """Norm weights and biases aside, the count is the model's (SmolLM2's counted on the converted checkpoint,
    Qwen2.5-1.5B's on transformers' Qwen2 built from these sizes on the meta device)."""
    assert checkpoint_parameters(checkpoint(tmp_path, sizes)) == pytest.approx(true_count, rel=1e-3)


def test_the_tiny_models_parameters_from_its_shape():
    architecture = default_config()["tiny_model"]["architecture"]
    assert tiny_model_parameters(architecture) == 341_120, "the built default checkpoint's count"


def test_a_folder_without_sizes_counts_its_weight_files(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "gpt2", "torch_dtype": "float16"}))
    (tmp_path / "model.safetensors").write_bytes(b"\0" * 2000)
    assert checkpoint_parameters(tmp_path) == 1000
    assert checkpoint_parameters(tmp_path / "missing") is None


def test_the_demo_asks_a_few_gigabytes_and_a_real_model_more(tmp_path):
    config = default_config()
    generation = Generation.from_dict(config["generation"], "generation")
    demo = sampling_job_resources(config["model"], generation, config)
    assert demo == {"mem_mb": 4000, "runtime": 21}
    assert training_job_resources(config) == {"mem_mb": 5000, "runtime": 31}
    real = {"path": checkpoint(tmp_path / "qwen", QWEN25_15B), "dtype": "auto", "trust_remote_code": False}
    hf = sampling_job_resources(real, generation.replace(backend="hf"), config)
    assert hf == {"mem_mb": 11000, "runtime": 82}, "3 GB + 2.5 x 3.1 GB of bf16 weights"
    assert sampling_job_resources(real, generation.replace(backend="vllm"), config)["mem_mb"] == 16000
    assert sampling_job_resources(real, generation.replace(backend="openai"), config) == {"mem_mb": 2000, "runtime": 30}
    lora = {**config, "model": {**real, "build_tiny": False}}
    assert training_job_resources(lora)["mem_mb"] == 13000
    full = copy.deepcopy(lora)
    full["sft"]["method"] = "full"
    assert training_job_resources(full)["mem_mb"] == 34000, "20 bytes a parameter: weights, gradients, AdamW"
    unknown = {"path": str(tmp_path / "written-by-the-run"), "dtype": "auto"}
    assert sampling_job_resources(unknown, generation, config) == UNKNOWN


def test_the_config_replaces_an_estimate_per_rule_and_key():
    config = default_config()
    config["resources"]["generate"]["runtime"] = 240
    prepare_config(config)
    assert with_overrides("generate", {"mem_mb": 4000, "runtime": 21}, config) == {"mem_mb": 4000, "runtime": 240}
    assert with_overrides("sft", {"mem_mb": 5000, "runtime": 31}, config) == {"mem_mb": 5000, "runtime": 31}
    config["resources"]["sft"] = {"memory": 9}
    with pytest.raises(SnakeskillsError, match="resources.sft"):
        prepare_config(config)
