"""The one model loader's dtype policies (snakeskills.models.loading)."""

from __future__ import annotations


def test_dtype_auto_generates_in_float32_on_a_cpu_without_bf16_instructions(monkeypatch):
    import torch

    from snakeskills.models import loading as models
    from snakeskills.models.loading import FROZEN_BASE, INFERENCE, TRAINED_WEIGHTS, load_dtype

    monkeypatch.setattr(models, "cpu_has_native_bf16", lambda: False)  # AVX2, most AVX-512: bf16 is emulated
    assert load_dtype("auto", INFERENCE, on_gpu=False) is torch.float32
    assert load_dtype("auto", INFERENCE, on_gpu=True) == "auto"  # the checkpoint's own
    monkeypatch.setattr(models, "cpu_has_native_bf16", lambda: True)  # AVX512_BF16 or AMX
    assert load_dtype("auto", INFERENCE, on_gpu=False) == "auto"
    assert load_dtype("bfloat16", INFERENCE, on_gpu=False) is torch.bfloat16  # asked for, so given
    assert load_dtype("auto", FROZEN_BASE, on_gpu=False) is torch.float32
    assert load_dtype("bfloat16", TRAINED_WEIGHTS, on_gpu=True) is torch.float32
