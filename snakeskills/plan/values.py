"""Checks of single config values that several sections share: a model's name, a regular expression, a batch size."""

from __future__ import annotations

import re

from snakeskills.errors import SnakeskillsError


def check_model_name(name: str, key: str) -> None:
    if name.startswith(("round", "dpo-round", "grpo-round")):
        raise SnakeskillsError(
            f"config key {key} must not start with 'round', 'dpo-round' or 'grpo-round' (reserved for tuned models)"
        )


def check_regex(pattern: str | None, key: str) -> None:
    if pattern is None:
        return
    try:
        re.compile(pattern)
    except re.error as error:
        raise SnakeskillsError(f"config key {key}: {pattern!r} does not compile: {error}") from None


def check_batch_divides(batch_size: int, processes: int, accumulation: int, section: str) -> None:
    """``{section}.batch_size`` must split evenly over processes x gradient accumulation steps."""
    if batch_size % (processes * accumulation):
        by_processes = f"the {processes} training processes (sft.processes / sft.gpus) x " if processes > 1 else ""
        raise SnakeskillsError(
            f"config key {section}.batch_size ({batch_size}) must be a multiple of {by_processes}{accumulation} "
            f"{section}.gradient_accumulation_steps: each forward pass takes an equal share"
        )
