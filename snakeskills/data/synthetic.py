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
    pool = [
        (a, operation, b) for operation in operations for a in range(max_operand + 1) for b in range(max_operand + 1)
    ]
    needed = sum(split_sizes.values())
    if needed > len(pool):
        raise SnakeskillsError(
            f"synthetic: splits ask for {needed} problems but max_operand={max_operand} with "
            f"{len(operations)} operation(s) allows only {len(pool)} distinct ones"
        )
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
