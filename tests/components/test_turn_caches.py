"""Rows keep their KV cache across a tool call (``snakeskills.backends.hf_turns``): a later turn prefills only what
the loop appended, joins the running batch beside rows that never left, and draws the tokens a fresh ``generate`` of
its whole ids draws. Models in float64, so that a cached context and a recomputed one round alike."""

from __future__ import annotations

import random

import pytest
import torch
from conftest import TOOL_CALLER_LEARNED, TOOL_CALLER_TOOLS

from snakeskills.backends import GenerationRequest, SamplingParams
from snakeskills.backends.hf import HFBackend, draw_tokens
from snakeskills.backends.hf_turns import TurnEngine
from snakeskills.models.tiny_model import build_char_tokenizer, build_tiny_llama
from snakeskills.settings.tools import Tools
from snakeskills.tools.loop import ToolLoop, tool_use


@pytest.fixture(scope="module")
def random_backend():
    """An untrained 2-layer Llama over characters (weights scaled up: logits that tell contexts apart)."""
    tokenizer = build_char_tokenizer()
    model = build_tiny_llama(tokenizer, hidden_size=32, num_layers=2, num_heads=2, seed=3, max_positions=256)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "norm" not in name:
                parameter.mul_(6)
    return HFBackend.around(model.double().eval(), tokenizer, batch_size=3)


def test_steps_of_one_per_row_draw_what_a_shared_step_draws():
    logits = torch.randn(4, 50)
    seeds = torch.tensor([1, 2, 3, 2**62 + 5])
    sampling = SamplingParams(temperature=0.8, top_p=0.9, top_k=0, max_new_tokens=4)
    for step in range(3):
        shared = draw_tokens(logits, seeds, step, sampling)
        assert torch.equal(shared, draw_tokens(logits, seeds, torch.full((4,), step), sampling))
    mixed = draw_tokens(logits, seeds, torch.tensor([0, 1, 2, 0]), sampling)
    each = [
        draw_tokens(logits[row : row + 1], seeds[row : row + 1], step, sampling)
        for row, step in enumerate([0, 1, 2, 0])
    ]
    assert mixed.tolist() == torch.cat(each).tolist()


def test_each_turn_draws_what_a_fresh_generate_of_its_whole_ids_draws(random_backend):
    """Five rows, three turns each, ids appended between turns (as a tool's output is), two stop strings, budgets
    of their own, three rows decoding at once: every turn equals ``generate`` of the same request, and the later
    turns went through the model only past what their kept cache held."""
    backend, tokenizer = random_backend, random_backend.tokenizer
    sampling = SamplingParams(temperature=1.0, top_p=0.95, top_k=0, max_new_tokens=12, stop=("7", "ab"))
    rng = random.Random(0)
    engine = TurnEngine(backend, sampling)
    prompts = [tokenizer.encode(f"{row} question {'x' * row * 3}:", add_special_tokens=False) for row in range(5)]
    ids = {row: list(prompt) for row, prompt in enumerate(prompts)}
    turns = {row: 0 for row in ids}
    seen: list[tuple[GenerationRequest, object]] = []
    queue = list(ids)
    most_kept = 0

    def request(row):
        return GenerationRequest(
            seed=1000 * row + turns[row], prompt_token_ids=tuple(ids[row]), max_new_tokens=rng.randint(3, 12)
        )

    pending = {}
    while queue or engine.busy:
        while queue and engine.room() > 0:
            row = queue.pop(0)
            pending[row] = request(row)
            engine.start(row, pending[row])
        for row, result in engine.step():
            seen.append((pending.pop(row), result))
            turns[row] += 1
            ids[row] += list(result.token_ids)
            if turns[row] < 3:
                if rng.random() < 0.5 and result.finish_reason == "stop":
                    ids[row].pop()  # the loop may take back the token that ended a turn (an EOS)
                ids[row] += tokenizer.encode(f"<{rng.randint(0, 999)}>", add_special_tokens=False)
                queue.append(row)
            else:
                engine.release(row)
        most_kept = max(most_kept, len(engine.kept))
    assert len(seen) == 15 and most_kept <= backend.batch_size and not engine.kept
    assert engine.reused_tokens > 0
    assert engine.prefilled_tokens < sum(len(done.prompt_token_ids) for done, _ in seen) - engine.reused_tokens / 2
    for done, result in seen:
        [fresh] = backend.generate([done], sampling)
        assert result.token_ids == fresh.token_ids, done
        assert result.finish_reason == fresh.finish_reason and result.generation == fresh.generation
        assert result.logprobs == pytest.approx(fresh.logprobs, abs=1e-5)


def untimed(tools: dict) -> dict:
    """A sample's tool statistics less the calls' wall times."""
    log = [{key: value for key, value in call.items() if key != "seconds"} for call in tools["tool_call_log"]]
    return {**tools, "code_execution_time": None, "tool_call_log": log}


def calls_made(results) -> int:
    return sum(result.tools["code_rounds_executed"] for result in results)


def test_the_tool_loop_gives_the_same_transcripts_with_kept_caches_as_with_whole_turns(tool_caller, monkeypatch):
    """The calculator caller (one and two calls by heart), 12 sampled rows, 4 decoding at once: transcripts, ids,
    masks and statistics equal those of turns each sent whole through ``generate``, and later turns reused caches."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tool_caller)
    model = AutoModelForCausalLM.from_pretrained(tool_caller).double().eval()
    backend = HFBackend.around(model, tokenizer, batch_size=4)
    problems = list(TOOL_CALLER_LEARNED) * 6
    requests = [
        GenerationRequest(seed=seed, prompt_token_ids=tuple(tokenizer(problem)["input_ids"]))
        for seed, problem in enumerate(problems)
    ]
    sampling = SamplingParams(temperature=0.5, top_p=1.0, top_k=0, max_new_tokens=48)
    use = tool_use(Tools.filled(TOOL_CALLER_TOOLS, "tools"))
    engines = []
    made = ToolLoop._turn_engine

    def recorded(loop, *arguments):
        engine = made(loop, *arguments)
        engines.append(engine)
        return engine

    monkeypatch.setattr(ToolLoop, "_turn_engine", recorded)
    kept = ToolLoop(backend, use).generate(requests, sampling)
    backend.keeps_turn_caches = False
    whole = ToolLoop(backend, use).generate(requests, sampling)
    assert engines[0] is not None and engines[1] is None
    assert calls_made(kept) >= 12 and engines[0].reused_tokens > 0
    for with_cache, without in zip(kept, whole, strict=True):
        assert with_cache.generation == without.generation
        assert with_cache.token_ids == without.token_ids
        assert with_cache.model_token_mask == without.model_token_mask
        assert untimed(with_cache.tools) == untimed(without.tools)
        assert with_cache.logprobs == pytest.approx(without.logprobs, abs=1e-5)


def test_only_models_whose_cache_layers_are_plain_keep_caches_across_turns(random_backend):
    """A sliding-window model (Gemma 2's alternate layers) keeps the batched turns: its window counts cache columns."""
    from transformers import Gemma2Config, Gemma2ForCausalLM

    from snakeskills.backends.hf import plain_cache_layers

    assert random_backend.keeps_turn_caches
    config = Gemma2Config(
        vocab_size=len(random_backend.tokenizer),
        num_hidden_layers=2,
        hidden_size=32,
        intermediate_size=64,
        num_attention_heads=2,
        num_key_value_heads=2,
        head_dim=16,
        sliding_window=8,
    )
    assert not plain_cache_layers(config)
    sliding = HFBackend.around(Gemma2ForCausalLM(config).eval(), random_backend.tokenizer, batch_size=2)
    assert not sliding.keeps_turn_caches
    use = tool_use(Tools.filled(TOOL_CALLER_TOOLS, "tools"))
    assert ToolLoop(sliding, use)._turn_engine(SamplingParams(1.0, 1.0, 0, 4), None) is None
