"""The prompt the training benchmarks (bench/sft.py, bench/dpo.py, bench/grpo.py) give SmolLM2: the generic-math
template through the model's chat template, as a run with ``prompt.template: generic-math`` renders it."""

from __future__ import annotations


def generic_math_chat_prompt() -> dict:
    from snakeskills.prompts import resolve_prompt

    return resolve_prompt(
        {
            "template": "generic-math",
            "system": None,
            "user": None,
            "num_few_shot": None,
            "chat_template": True,
            "chat_template_kwargs": {},
        }
    )
