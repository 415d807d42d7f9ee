"""generation.compile on CPU twins of its GPU paths: how often the decoding step compiles, how many static-cache
shapes a backend can meet, and finished rows leaving a static cache of a sliding-window model. (On a GPU the
same step is compiled with CUDA graphs; tests/gpu runs it there.)"""

from __future__ import annotations

import collections

import pytest
import torch
from conftest import hf_backend
from transformers import AutoConfig, MistralConfig, MistralForCausalLM

from snakeskills.backends import GenerationRequest, SamplingParams
from snakeskills.backends.hf import (
    MIN_STATIC_CACHE,
    compiled_shapes_bound,
    decoding_step,
    has_sliding_window_layers,
    static_cache_length,
    unsupported_static_cache_layers,
)
from snakeskills.models.tiny_model import build_char_tokenizer

GREEDY = SamplingParams(temperature=0.0, top_p=1.0, top_k=0, max_new_tokens=16)
SAMPLED = SamplingParams(temperature=1.0, top_p=1.0, top_k=0, max_new_tokens=12)
PROMPTS = ["1+1=", "12+30=", "7+85=", "6=", "99+9=", "40+2="]


def requests_for(backend, prompts):
    return [
        GenerationRequest(seed=seed, prompt_token_ids=tuple(backend.tokenizer(prompt)["input_ids"]))
        for seed, prompt in enumerate(prompts)
    ]


def test_compiled_step_compiles_each_shape_once(tiny_checkpoint):
    """Inductor on CPU: every tensor the step sees is made in inference mode, so dynamo compiles one graph per
    (batch size, cache length) met. (Positions made outside inference mode failed the guards of the first step
    and compiled every shape twice; on a GPU each extra compile is also a CUDA-graph recording.)"""
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    compiled = hf_backend(str(tiny_checkpoint), device="cpu", dtype="float32", batch_size=4, compile=True)
    shapes = collections.Counter()
    step = compiled._compiled_step
    compiled._compiled_step = lambda input_ids, *rest: (
        shapes.update([tuple(input_ids.shape)]),
        step(input_ids, *rest),
    )[1]
    graphs_before = counters["stats"]["unique_graphs"]
    compiled.generate(requests_for(compiled, PROMPTS[:5]), SAMPLED)
    compiled.generate(requests_for(compiled, PROMPTS[:5]), SAMPLED)  # a second job meets the same shapes
    assert len(shapes) >= 2, shapes  # a batch of 4 and one of 1
    assert counters["stats"]["unique_graphs"] - graphs_before == len(shapes)


def test_static_cache_lengths_and_step_shapes_are_bounded():
    """A long-lived model server meets every job's cache length: lengths come from a small set (2^k and
    3 x 2^(k-1) tokens, at least 128), each less than 1.5 times what is needed, so the graphs a backend can
    compile stay under the recompile limit it sets."""
    lengths = {static_cache_length(tokens) for tokens in range(1, 8193)}
    assert min(lengths) == MIN_STATIC_CACHE and max(lengths) == 8192
    assert len(lengths) == 2 * (8192 // MIN_STATIC_CACHE).bit_length() - 1  # 128, 192, 256, 384, ..., 8192
    for tokens in range(MIN_STATIC_CACHE, 8193):
        assert tokens <= static_cache_length(tokens) <= tokens * 3 / 2, tokens
    # jobs with batch_size 256 on an 8192-token context: full batches, a smaller last batch, halvings
    batch_sizes = {256, 200, *(1 << k for k in range(8))}
    assert len(batch_sizes) * len(lengths) <= compiled_shapes_bound(256, 8192) < 200


def test_compaction_refused_for_cache_layers_it_cannot_carry():
    """Full and sliding-window attention layers are carried through compaction; linear-attention (state-space)
    layers are not, and a compiled backend refuses such a model by name rather than decode it wrongly."""
    assert unsupported_static_cache_layers(AutoConfig.for_model("llama")) == []
    assert unsupported_static_cache_layers(AutoConfig.for_model("gemma2")) == []  # sliding + full
    assert unsupported_static_cache_layers(AutoConfig.for_model("qwen3_next")) == ["LinearAttentionLayer"]


@pytest.fixture(scope="module")
def sliding_window_checkpoint(tmp_path_factory):
    """A tiny Mistral-shaped model (every layer a 4-token sliding window) with the character tokenizer."""
    folder = tmp_path_factory.mktemp("tiny-mistral")
    tokenizer = build_char_tokenizer()
    torch.manual_seed(0)
    config = MistralConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=256,
        sliding_window=4,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    MistralForCausalLM(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def test_finished_rows_leave_a_sliding_window_static_cache_without_changing_the_others(sliding_window_checkpoint):
    """The static-cache path (the compiled one, run eagerly here) drops finished rows by copying the cache into
    a smaller one. A sliding-window layer also keeps its window position as a Python int; it must travel with
    the rows, or the rows left decode against a window that restarted at 0 once it is full. Rows are ended
    early by making a token they draw early an end-of-sequence token; each row must get the tokens it gets
    alone, in the dynamic-cache loop."""
    eager = hf_backend(str(sliding_window_checkpoint), device="cpu", dtype="float32", batch_size=8)
    static = hf_backend(str(sliding_window_checkpoint), device="cpu", dtype="float32", batch_size=8)
    static._compiled_step = decoding_step(static.model)  # the static cache path without the compile
    requests = requests_for(eager, PROMPTS)
    free = eager.generate(requests, GREEDY)
    tokens = [eager.tokenizer(result.generation, add_special_tokens=False)["input_ids"] for result in free]
    # the token that ends the most rows within their first 4 tokens while some row never draws it
    first_seen = collections.defaultdict(dict)
    for row, row_tokens in enumerate(tokens):
        for position, token in enumerate(row_tokens):
            first_seen[token].setdefault(row, position)
    ending = max(
        (token for token, rows in first_seen.items() if len(rows) < len(tokens)),
        key=lambda token: sum(position < 4 for position in first_seen[token].values()),
    )
    assert sum(position < 4 for position in first_seen[ending].values()) >= len(tokens) // 2
    for backend in (eager, static):
        backend.eos_token_ids = {ending}
    alone = [eager.generate([request], GREEDY)[0] for request in requests]
    assert static.generate(requests, GREEDY) == alone
    assert eager.generate(requests, GREEDY) == alone


def test_a_sliding_window_model_keeps_left_padding(sliding_window_checkpoint):
    """A window counts cache slots: padding after a shared prefix would sit inside a row's window. Such a model
    has generation.share_prefix off and its batches left-padded, even when their prompts share an opening."""
    assert has_sliding_window_layers(AutoConfig.for_model("gemma2"))  # sliding and full layers
    assert not has_sliding_window_layers(AutoConfig.for_model("llama"))
    backend = hf_backend(str(sliding_window_checkpoint), device="cpu", dtype="float32", batch_size=8)
    assert backend.share_prefix is False
    opening = "Add the two numbers and answer: "
    _, mask, prefix = backend.batch_layout([backend.tokenizer(opening + prompt)["input_ids"] for prompt in PROMPTS])
    assert prefix == 0 and mask[:, -1].all()
