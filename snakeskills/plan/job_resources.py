"""What a model job asks a cluster for (memory, runtime), from the size of its model and the job.

Jobs that load a model (generate, the LLM judge, the contamination check, sft) declare ``mem_mb`` and ``runtime``
(minutes) from the parameter count (the tiny model's shape, else ``config.json``, else the weight files' sizes).
``resources.<rule>`` replaces either; a profile's ``set-resources`` wins over both, so the SLURM profile omits them.

Generous estimates, not measurements:
- generate and the LLM judge: hf 3 GB plus 2.5x the weights; vLLM 8 GB plus 2.5x; an OpenAI-compatible model 2 GB;
- sft: LoRA 4 GB plus 3x the weights; full 4 GB plus 20 bytes per parameter (weights, gradients, AdamW in float32);
- runtime: generate 20 minutes plus 40 per billion parameters; sft 30 plus 60 per billion parameters per epoch.
  Raise them for long generations or large chunks (``resources.generate.runtime``)."""

from __future__ import annotations

import functools
import json
import math
from pathlib import Path

from snakeskills.backends.specs import backend_spec
from snakeskills.settings.generation import Generation
from snakeskills.training.methods import training_method

MB = 2**20
DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}
# a model whose size cannot be known when the plan is made (a folder written by the run itself)
UNKNOWN = {"mem_mb": 16000, "runtime": 60}
MODEL_RULES = ("generate", "llm_judge", "synthesis_llm_check", "sft")


def tiny_model_parameters(architecture: dict, vocabulary: int = 100) -> int:
    """The built tiny Llama's parameters (``models.tiny_model.build_tiny_llama``: intermediate 2x hidden, tied
    embeddings, a character vocabulary of about 100 symbols)."""
    hidden, layers = architecture["hidden_size"], architecture["num_layers"]
    return vocabulary * hidden + layers * (4 * hidden * hidden + 3 * hidden * 2 * hidden + 2 * hidden) + hidden


@functools.cache
def checkpoint_parameters(folder: str | Path) -> int | None:
    """Parameters of a checkpoint folder, from its config.json's sizes (Llama-like decoders), else from its weight
    files' bytes at the config's dtype; ``None`` when neither can be read."""
    folder = Path(folder)
    try:
        config = json.loads((folder / "config.json").read_text())
    except (OSError, ValueError):
        return None
    config = config.get("text_config", config)
    try:
        hidden, layers = config["hidden_size"], config["num_hidden_layers"]
        heads = config["num_attention_heads"]
        kv_heads = config.get("num_key_value_heads") or heads
        head_dim = config.get("head_dim") or hidden // heads
        attention = hidden * head_dim * (2 * heads + 2 * kv_heads)
        embeddings = config["vocab_size"] * hidden * (1 if config.get("tie_word_embeddings", True) else 2)
        return embeddings + layers * (attention + 3 * hidden * config["intermediate_size"])
    except (KeyError, TypeError, ZeroDivisionError):
        pass
    weights = sum(path.stat().st_size for pattern in ("*.safetensors", "*.bin") for path in folder.glob(pattern))
    return weights // checkpoint_dtype_bytes(folder) if weights else None


def checkpoint_dtype_bytes(folder: str | Path) -> int:
    """Bytes per parameter of a checkpoint's own dtype (config.json's torch_dtype or dtype; 4 when unsaid)."""
    try:
        config = json.loads((Path(folder) / "config.json").read_text())
    except (OSError, ValueError):
        return 4
    return DTYPE_BYTES.get(config.get("torch_dtype") or config.get("dtype"), 4)


def model_size(model: dict, config: dict) -> tuple[int, int] | None:
    """(parameters, bytes per parameter as loaded) of a model section (``model``, a teacher's or the LLM judge's);
    ``None`` when unknown (no local folder, or one the run writes itself)."""
    if model.get("build_tiny"):
        return tiny_model_parameters(config["tiny_model"]["architecture"]), 4
    if not model.get("path"):
        return None
    parameters = checkpoint_parameters(model["path"])
    if parameters is None:
        return None
    dtype = model.get("dtype", "auto")
    return parameters, DTYPE_BYTES.get(dtype) or max(2, checkpoint_dtype_bytes(model["path"]))


def _rounded_mb(megabytes: float) -> int:
    return int(math.ceil(megabytes / 1000) * 1000)


def sampling_job_resources(model: dict, generation: Generation, config: dict) -> dict:
    """``mem_mb`` and ``runtime`` of a job that samples from ``model`` with ``generation`` (generate, LLM judge)."""
    spec = backend_spec(generation)
    if not spec.needs_local_model:  # a server does the work
        return {"mem_mb": spec.job_memory_mb, "runtime": 30}
    size = model_size(model, config)
    if size is None:
        return dict(UNKNOWN)
    parameters, dtype_bytes = size
    base = spec.job_memory_mb
    return {
        "mem_mb": _rounded_mb(base + 2.5 * parameters * dtype_bytes / MB),
        "runtime": 20 + math.ceil(40 * parameters / 1e9),
    }


def training_job_resources(config: dict, method: str = "sft") -> dict:
    """``mem_mb`` and ``runtime`` of a training job of ``method`` (a training method's name): the student's model,
    the section's weights (lora or full) and its training length. DPO and KTO hold a reference model (none with lora:
    the adapter is switched off) and run extra forward passes; GRPO also samples num_generations completions per
    problem, so its runtime grows with the completions it draws (``TrainingMethod.runtime_factor``)."""
    size = model_size(config["model"], config)
    if size is None:
        return dict(UNKNOWN)
    parameters, dtype_bytes = size
    section = config[method]
    full = section["method"] == "full"
    memory = 4000 + 20 * parameters / MB if full else 4000 + 3 * parameters * dtype_bytes / MB
    entry = training_method(method)
    if full and entry.frozen_reference and section["beta"] > 0:  # a frozen reference copy
        memory += parameters * dtype_bytes / MB
    training = section["training"]
    epochs = math.ceil(training["num_epochs"]) if training.get("max_steps") is None else 1
    return {
        "mem_mb": _rounded_mb(memory),
        "runtime": 30 + math.ceil(60 * entry.runtime_factor * parameters / 1e9 * epochs),
    }


def with_overrides(rule: str, estimate: dict, config: dict) -> dict:
    """``estimate`` with the config's ``resources.<rule>`` values in place of its own (null keeps the estimate)."""
    overrides = config["resources"].get(rule) or {}
    return {key: overrides.get(key) if overrides.get(key) is not None else value for key, value in estimate.items()}
