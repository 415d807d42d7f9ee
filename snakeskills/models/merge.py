"""Base model + a round's LoRA adapter as one full checkpoint (rule merge_adapter, sft.merge), for tools that
cannot load adapters."""

from __future__ import annotations

import logging
from pathlib import Path

from snakeskills.io import atomic_directory

logger = logging.getLogger(__name__)


def merge_adapter(
    *, base_model_path: str, adapter_path: str | Path, output_dir: str | Path, dtype: str, trust_remote_code: bool
) -> None:
    """Write base + LoRA as one full checkpoint (``merge_and_unload``, in float32), saved in the base's dtype
    (or ``dtype``, model.dtype, when it is not auto), with the tokenizer, atomically."""
    from snakeskills.models.loading import TRAINED_WEIGHTS, load_model, load_tokenizer, saved_dtype

    model = load_model(
        base_model_path,
        dtype=dtype,
        policy=TRAINED_WEIGHTS,
        trust_remote_code=trust_remote_code,
        adapter_path=adapter_path,
    )
    merged = model.merge_and_unload().to(saved_dtype(dtype, base_model_path, trust_remote_code))
    tokenizer = load_tokenizer(adapter_path, trust_remote_code=trust_remote_code)
    with atomic_directory(output_dir) as staging:
        merged.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
    logger.info("merged %s + %s into %s", base_model_path, adapter_path, output_dir)
