"""GRPO's completions go through the model in passes of similar lengths (``group_forward.length_buckets``): every
row in exactly one pass, and the fewest positions (padding included) with each pass's cost, against all ways of
cutting the rows sorted by length."""

from __future__ import annotations

import itertools
import random

import pytest

from snakeskills.training.group_forward import BUCKET_SAVING, MOST_BUCKETS, length_buckets


def cost(lengths: list[int], buckets: list[list[int]]) -> float:
    penalty = BUCKET_SAVING * len(lengths) * max(max(lengths), 1)
    return sum(len(bucket) * max(1, *(lengths[row] for row in bucket)) + penalty for bucket in buckets)


def least_cost(lengths: list[int]) -> float:
    order = sorted(range(len(lengths)), key=lambda row: -lengths[row])
    best = float("inf")
    for passes in range(1, MOST_BUCKETS + 1):
        for cuts in itertools.combinations(range(1, len(order)), passes - 1):
            edges = [0, *cuts, len(order)]
            buckets = [order[start:end] for start, end in itertools.pairwise(edges)]
            best = min(best, cost(lengths, buckets))
    return best


@pytest.mark.parametrize("seed", range(40))
def test_each_row_in_one_pass_and_the_fewest_positions(seed):
    rng = random.Random(seed)
    lengths = [rng.choice([rng.randint(0, 48), 48]) for _ in range(rng.randint(1, 12))]
    buckets = length_buckets(lengths)
    assert sorted(row for bucket in buckets for row in bucket) == list(range(len(lengths)))
    assert all(bucket == sorted(bucket) for bucket in buckets)
    assert 1 <= len(buckets) <= MOST_BUCKETS
    assert cost(lengths, buckets) == pytest.approx(least_cost(lengths))


def test_equal_lengths_are_one_pass_and_two_heights_two():
    assert length_buckets([30] * 16) == [list(range(16))]
    assert length_buckets([48, 5] * 4) == [[0, 2, 4, 6], [1, 3, 5, 7]]
    assert length_buckets([]) == []
