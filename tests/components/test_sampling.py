"""The hf backend's seeded sampler: draws follow the filtered softmax, and a row's draw is a function of its
seed, its decoding step and its own logits only (no neighbour, batch size or generator state enters).
Its Gumbel noise is a hash of (row seed, step, token id), computed as tensor operations on the device."""

from __future__ import annotations

import math

import pytest
import torch

from snakeskills.backends import SamplingParams
from snakeskills.backends.hf import PerRequestSampler, counter_bits, counter_gumbel

PROMPT_LENGTH = 5
QWEN_VOCABULARY = 151_936


def sampling(temperature=1.0, top_p=1.0, top_k=0):
    return SamplingParams(temperature=temperature, top_p=top_p, top_k=top_k, max_new_tokens=8)


def draw(seeds, logits, step=0, **settings):
    """The tokens PerRequestSampler picks for rows with these seeds and logits at this decoding step."""
    sampler = PerRequestSampler(list(seeds), sampling(**settings), PROMPT_LENGTH)
    input_ids = torch.zeros(len(seeds), PROMPT_LENGTH + step, dtype=torch.long)
    # generate picks the argmax of what the sampler returns
    return sampler(input_ids, logits.clone()).argmax(dim=-1)


def test_noise_depends_on_seed_step_and_token_only():
    seeds = torch.tensor([0, 1, 2**31, 2**32, 2**62 + 12345, 2**63 - 1])
    noise = counter_gumbel(seeds, 3, torch.arange(1000))
    assert noise.shape == (6, 1000) and noise.dtype == torch.float32
    assert torch.isfinite(noise).all()
    # each seed alone, in another order, or beside others: the same noise
    for index in range(len(seeds)):
        assert torch.equal(counter_gumbel(seeds[index : index + 1], 3, torch.arange(1000))[0], noise[index])
    assert torch.equal(counter_gumbel(seeds.flip(0), 3, torch.arange(1000)), noise.flip(0))
    # a token's noise does not depend on the vocabulary size, nor on which other tokens are candidates
    assert torch.equal(counter_gumbel(seeds, 3, torch.arange(400)), noise[:, :400])
    candidates = torch.randint(0, 1000, (6, 50), generator=torch.Generator().manual_seed(0))
    assert torch.equal(counter_gumbel(seeds, 3, candidates), noise.gather(1, candidates))
    assert not torch.equal(counter_gumbel(seeds, 4, torch.arange(1000)), noise)
    assert len({tuple(row.tolist()) for row in noise}) == len(seeds)


MASK32 = 2**32 - 1


def reference_bits(seed: int, step: int, token: int) -> int:
    """counter_bits in exact Python integer arithmetic (what the int32 and int64 tensor code must equal)."""

    def mix(value):
        value ^= value >> 16
        value = value * 0x7FEB352D & MASK32
        value ^= value >> 15
        value = value * 0x5BD1E995 & MASK32
        return value ^ (value >> 16)

    key = mix(mix(mix((seed >> 32) ^ 0x2545F491) ^ (seed & MASK32)) ^ step)
    value = (token * 0x61C88647 & MASK32) ^ key
    value = value * 0x7FEB352D & MASK32
    value ^= value >> 15
    value = value * 0x846CA68B & MASK32
    return value >> 9


def test_hash_equals_exact_integer_arithmetic():
    """int32 products wrap and shifts are masked: the tensor hash is the exact one, whatever the sign bits."""
    seeds = [0, 1, 2**31 - 1, 2**31, 2**32 + 5, 2**62 + 12345, 2**63 - 1]
    tokens = [0, 1, 2, 1000, 49_151, 151_935, 2**31 - 1]
    for step in (0, 1, 255, 2**31 + 3):
        bits = counter_bits(torch.tensor(seeds), step, torch.tensor(tokens))
        expected = [[reference_bits(seed, step, token) for token in tokens] for seed in seeds]
        assert bits.tolist() == expected, step


def test_noise_is_standard_gumbel():
    """Mean 0.5772 (Euler's constant) and variance pi**2/6, across tokens and across steps."""
    across_tokens = counter_gumbel(torch.tensor([7, 8]), 0, torch.arange(200_000)).double()
    ten = torch.arange(10)
    across_steps = torch.cat([counter_gumbel(torch.tensor([7]), step, ten)[0] for step in range(20_000)]).double()
    for sample in (across_tokens, across_steps):
        assert abs(sample.mean().item() - 0.5772) < 0.01
        assert abs(sample.var().item() - math.pi**2 / 6) < 0.03
    # P(G <= 0) = exp(-1): checks the shape, not only the moments
    assert abs((across_tokens <= 0).double().mean().item() - math.exp(-1)) < 0.005


@pytest.mark.parametrize(
    ("settings", "allowed"),
    [
        ({}, [0.5, 0.3, 0.15, 0.05, 0.0]),
        ({"top_k": 2}, [0.625, 0.375, 0.0, 0.0, 0.0]),
        ({"top_p": 0.7}, [0.625, 0.375, 0.0, 0.0, 0.0]),  # 0.5 < 0.7: the second token completes the nucleus
        # temperature 0.5 squares the probabilities: 0.25, 0.09, 0.0225, 0.0025 (sum 0.365)
        ({"temperature": 0.5}, [25 / 36.5, 9 / 36.5, 2.25 / 36.5, 0.25 / 36.5, 0.0]),
    ],
)
def test_draws_follow_the_filtered_softmax(settings, allowed):
    rows = 40_000
    logits = torch.log(torch.tensor([0.5, 0.3, 0.15, 0.05, 0.0])).expand(rows, 5)
    counts = torch.bincount(draw(range(rows), logits, **settings), minlength=5)
    for token, probability in enumerate(allowed):
        if probability == 0:
            assert counts[token] == 0, (token, counts)
        else:
            sigma = math.sqrt(rows * probability * (1 - probability))
            assert abs(counts[token] - rows * probability) < 5 * sigma, (token, counts, settings)


def test_a_rows_draw_ignores_its_neighbours_and_the_batch_size():
    generator = torch.Generator().manual_seed(0)
    logits = torch.randn(16, 1000, generator=generator) * 3
    seeds = [int(s) for s in torch.randint(0, 2**62, (16,), generator=generator)]
    for step in (0, 1, 17):
        together = draw(seeds, logits, step, top_p=0.9)
        alone = torch.cat([draw([seed], row[None], step, top_p=0.9) for seed, row in zip(seeds, logits, strict=True)])
        reversed_batch = draw(seeds[::-1], logits.flip(0), step, top_p=0.9).flip(0)
        assert torch.equal(together, alone)
        assert torch.equal(together, reversed_batch)
    # the step matters: a row with a flat distribution does not repeat one draw at every step
    flat = torch.zeros(1, 1000)
    assert len({draw(seeds[:1], flat, step).item() for step in range(30)}) > 25


def test_real_vocabulary_draws_are_valid_and_reproducible():
    """Qwen2.5's vocabulary size, one filtered token per row, bf16 logits as a real model returns them."""
    logits = torch.randn(8, QWEN_VOCABULARY, generator=torch.Generator().manual_seed(1)).to(torch.bfloat16)
    first = draw(range(8), logits, 2, temperature=0.7, top_p=0.95)
    assert torch.equal(first, draw(range(8), logits, 2, temperature=0.7, top_p=0.95))
    assert ((first >= 0) & (first < QWEN_VOCABULARY)).all()


def test_greedy_leaves_the_scores_alone():
    logits = torch.randn(3, 50)
    sampler = PerRequestSampler([1, 2, 3], sampling(temperature=0.0), PROMPT_LENGTH)
    assert sampler(torch.zeros(3, PROMPT_LENGTH, dtype=torch.long), logits) is logits
