"""One model loader: generation (hf, and so the shared model server), SFT (LoRA and full) and merging load
checkpoints here, each under a named dtype policy, so ``model.dtype`` means the same thing everywhere.

Dtype policies (``model.dtype``: auto, float32, float16, bfloat16):

- ``INFERENCE`` (generation, the model server): auto is the checkpoint's dtype on a GPU and on a CPU with bf16
  instructions (``cpu_has_native_bf16``), float32 on other CPUs, which emulate bf16 about 3x slower
  (BENCHMARKS.md, "HF generation").
- ``FROZEN_BASE`` (the base under a LoRA being trained): auto is float32 on a CPU (bench/sft.py), bfloat16 on a GPU
  that supports it (the Trainer then uses bf16 mixed precision), else float32.
- ``TRAINED_WEIGHTS`` (a full fine-tune's weights, a merge of base + adapter): always float32, since small updates
  of bf16 weights round away; saved in ``saved_dtype``: ``model.dtype``, or with auto the starting checkpoint's."""

from __future__ import annotations

from pathlib import Path

from snakeskills.errors import SnakeskillsError

INFERENCE = "inference"
FROZEN_BASE = "frozen_base"
TRAINED_WEIGHTS = "trained_weights"
POLICIES = (INFERENCE, FROZEN_BASE, TRAINED_WEIGHTS)


def gpu_supports_bf16() -> bool:
    import torch

    return torch.cuda.is_available() and torch.cuda.is_bf16_supported()


def cpu_has_native_bf16() -> bool:
    """Whether this CPU multiplies bf16 matrices in hardware (AVX512_BF16 or AMX); torch emulates bf16 on others."""
    import torch

    checks = ("_is_avx512_bf16_supported", "_is_amx_tile_supported")
    return any(getattr(torch.cpu, check, lambda: False)() for check in checks)


def load_dtype(setting: str, policy: str, *, on_gpu: bool | None = None):
    """The dtype to load weights in under ``policy`` for ``model.dtype`` ``setting``: a torch dtype, or "auto"
    (the checkpoint's own). ``on_gpu``: whether training runs on a GPU (default: whether CUDA is present)."""
    import torch

    if policy not in POLICIES:
        raise ValueError(f"unknown dtype policy {policy!r}; known: {', '.join(POLICIES)}")
    if policy == TRAINED_WEIGHTS:
        return torch.float32
    if setting != "auto":
        return getattr(torch, setting)
    on_gpu = torch.cuda.is_available() if on_gpu is None else on_gpu
    if policy == INFERENCE:
        return "auto" if on_gpu or cpu_has_native_bf16() else torch.float32
    return torch.bfloat16 if on_gpu and gpu_supports_bf16() else torch.float32


def saved_dtype(setting: str, checkpoint: str | Path, trust_remote_code: bool):
    """The dtype a trained or merged checkpoint is saved in: ``model.dtype``, or with auto the dtype that
    ``checkpoint`` is stored in (float32 when its config names none)."""
    import torch
    from transformers import AutoConfig

    if setting != "auto":
        return getattr(torch, setting)
    stored = AutoConfig.from_pretrained(checkpoint, trust_remote_code=trust_remote_code).dtype or torch.float32
    return getattr(torch, stored) if isinstance(stored, str) else stored


def _check_folder(path: str | Path, what: str) -> None:
    if not Path(path).is_dir():
        raise SnakeskillsError(f"{what} {str(path)!r} is not a folder")


def load_tokenizer(path: str | Path, *, trust_remote_code: bool):
    """The checkpoint's tokenizer, with the EOS token as padding when it has no pad token."""
    from transformers import AutoTokenizer

    _check_folder(path, "model path")
    try:
        tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=trust_remote_code)
    except (OSError, ValueError) as error:
        raise SnakeskillsError(
            f"{path}: cannot load its tokenizer ({str(error).splitlines()[0]}); a checkpoint folder needs "
            "tokenizer.json or tokenizer.model with tokenizer_config.json"
        ) from None
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def load_model(
    path: str | Path,
    *,
    dtype: str,
    policy: str,
    trust_remote_code: bool,
    adapter_path: str | Path | None = None,
    trainable_adapter: bool = False,
    on_gpu: bool | None = None,
):
    """A causal LM from a checkpoint folder, in the dtype ``policy`` gives ``model.dtype`` (``dtype``), with an
    optional LoRA adapter on top (not merged; ``trainable_adapter`` to train it further)."""
    from transformers import AutoModelForCausalLM

    _check_folder(path, "model path")
    model = AutoModelForCausalLM.from_pretrained(
        path, dtype=load_dtype(dtype, policy, on_gpu=on_gpu), trust_remote_code=trust_remote_code
    )
    if adapter_path is not None:
        from peft import PeftModel

        _check_folder(adapter_path, "adapter")
        model = PeftModel.from_pretrained(model, str(adapter_path), is_trainable=trainable_adapter)
    return model
