"""A synthetic skill with exact answers: integer arithmetic.

Problems are drawn without replacement from all operand pairs, so the splits are disjoint by
construction; the same seed always gives the same problems in the same order.
"""

from __future__ import annotations

import random
import re

from snakeskills.errors import SnakeskillsError

OPERATIONS = {
    "+": lambda a, b: a + b,
    "-": lambda a, b: a - b,
    "*": lambda a, b: a * b,
}


def check_pool_size(*, operations: list[str], max_operand: int, split_sizes: dict[str, int], key: str) -> None:
    """The splits fit in the distinct problems the operations and operands allow (checked when the plan is made,
    ``key`` naming the config key, and again when the problems are drawn)."""
    distinct = len(set(operations)) * (max_operand + 1) ** 2
    needed = sum(split_sizes.values())
    if needed > distinct:
        raise SnakeskillsError(
            f"config key {key}.split_sizes: the splits ask for {needed} problems, but max_operand={max_operand} with "
            f"{len(set(operations))} operation(s) allows only {distinct} distinct ones; raise {key}.max_operand or "
            "shrink the splits"
        )


def arithmetic_splits(
    *, operations: list[str], max_operand: int, split_sizes: dict[str, int], seed: int
) -> dict[str, list[dict]]:
    """Disjoint splits of arithmetic problems, e.g. ``{"bootstrap": 1000, "train": 2000, "test": 200}``.

    Each record has ``id``, ``problem`` (``"37+48"``) and ``expected_answer`` (``"85"``).
    """
    for operation in operations:
        if operation not in OPERATIONS:
            raise SnakeskillsError(
                f"synthetic.operations: unknown operation {operation!r}; known: {sorted(OPERATIONS)}"
            )
    check_pool_size(operations=operations, max_operand=max_operand, split_sizes=split_sizes, key="synthetic")
    pool = [
        (a, operation, b)
        for operation in dict.fromkeys(operations)
        for a in range(max_operand + 1)
        for b in range(max_operand + 1)
    ]
    random.Random(seed).shuffle(pool)
    splits = {}
    start = 0
    for split_name, size in split_sizes.items():
        splits[split_name] = [
            {
                "id": f"{split_name}-{index:06d}",
                "problem": f"{a}{operation}{b}",
                "expected_answer": str(OPERATIONS[operation](a, b)),
            }
            for index, (a, operation, b) in enumerate(pool[start : start + size])
        ]
        start += size
    return splits


_ARITHMETIC = re.compile(r"^\s*(-?\d+)\s*([+*-])\s*(-?\d+)\s*=?\s*$")


def arithmetic_answer(problem: str) -> str | None:
    """The exact answer of a problem in this skill's form (``"37+48"`` -> ``"85"``); ``None`` for any other text.
    Synthesized arithmetic problems are checked with it: their majority labels can be scored."""
    match = _ARITHMETIC.match(problem)
    if not match:
        return None
    a, operation, b = match.groups()
    return str(OPERATIONS[operation](int(a), int(b)))
