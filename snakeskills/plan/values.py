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
