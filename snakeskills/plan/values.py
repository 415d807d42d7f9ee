"""Checks of single config values that several sections share: a model's name, a regular expression, a batch size."""

from __future__ import annotations

import re

from snakeskills.errors import SnakeskillsError
from snakeskills.training.methods import TRAINING_METHODS


def check_model_name(name: str, key: str) -> None:
    """A model's name must not look like a tuned round's (sft-round1, dpo-round1, ...: every training method's)."""
    reserved = [method.tuned_model_name(1).removesuffix("1") for method in TRAINING_METHODS.values()]
    reserved.append("round")  # SFT rounds' names in older results (round<r>)
    if name.startswith(tuple(reserved)):
        *others, last = (f"'{prefix}'" for prefix in reserved)
        raise SnakeskillsError(
            f"config key {key} must not start with {', '.join(others)} or {last} (reserved for tuned models)"
        )


def check_regex(pattern: str | None, key: str) -> None:
    if pattern is None:
        return
    try:
        re.compile(pattern)
    except re.error as error:
        raise SnakeskillsError(f"config key {key}: {pattern!r} does not compile: {error}") from None
