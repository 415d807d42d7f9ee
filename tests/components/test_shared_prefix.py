"""generation.share_prefix on a tiny untrained Llama (character tokenizer): the tokens that open every prompt of a
batch go through the model once, and every row still gets the tokens its whole prompt gives it. The real
SmolLM2's chat-template prefix is tested in tests/external/test_real_model.py, a sliding-window model's opt-out in
tests/components/test_compile.py."""

from __future__ import annotations

import pytest
import torch
from conftest import hf_backend

from snakeskills.backends import GenerationRequest, SamplingParams
from snakeskills.backends.hf import MIN_SHARED_PREFIX, decoding_step, shared_prefix_length
from snakeskills.models.tiny_model import build_char_tokenizer, build_tiny_llama

GREEDY = SamplingParams(temperature=0.0, top_p=1.0, top_k=0, max_new_tokens=10)
SAMPLED = SamplingParams(temperature=1.0, top_p=0.9, top_k=0, max_new_tokens=10)
INSTRUCTION = "Add the two numbers; answer with digits only: "
PROBLEMS = ["1+1=", "12+30=", "7+85=", "640+19=", "3+4400=", "9+9="]


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tiny-llama-128")
    tokenizer = build_char_tokenizer()
    model = build_tiny_llama(tokenizer, hidden_size=32, num_layers=2, num_heads=2, seed=0, max_positions=128)
    with torch.no_grad():  # weights 25 times their initial scale: logits that tell positions and tokens apart
        for name, parameter in model.named_parameters():
            if "norm" not in name:
                parameter.mul_(25)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def shared(checkpoint):
    return hf_backend(str(checkpoint), device="cpu", dtype="float32", batch_size=8)


@pytest.fixture(scope="module")
def unshared(checkpoint):
    return hf_backend(str(checkpoint), device="cpu", dtype="float32", batch_size=8, share_prefix=False)


def prompts_ids(backend, problems, instruction=INSTRUCTION):
    return [backend.tokenizer(instruction + problem)["input_ids"] for problem in problems]


def requests_for(backend, problems=PROBLEMS):
    return [
        GenerationRequest(seed=seed, prompt_token_ids=tuple(ids))
        for seed, ids in enumerate(prompts_ids(backend, problems))
    ]


def test_shared_prefix_length_leaves_every_prompt_a_token_of_its_own():
    assert shared_prefix_length([[1, 2, 3, 4], [1, 2, 3, 5], [1, 2, 9]]) == 2
    assert shared_prefix_length([[1, 2, 3], [1, 2, 3]]) == 2
    assert shared_prefix_length([[1, 2, 3], [1, 2, 3, 4, 5]]) == 2
    assert shared_prefix_length([[5, 2, 3], [1, 2, 3]]) == 0
    assert shared_prefix_length([[7]]) == 0


def test_the_padding_of_a_batch_with_a_shared_prefix_comes_after_the_prefix(shared, unshared):
    prompts = prompts_ids(shared, PROBLEMS)
    input_ids, mask, prefix = shared.batch_layout(prompts)
    assert prefix == shared_prefix_length(prompts) >= len(INSTRUCTION) >= MIN_SHARED_PREFIX
    width = input_ids.shape[1]
    for row, prompt in enumerate(prompts):
        own = len(prompt) - prefix
        assert mask[row].tolist() == [1] * prefix + [0] * (width - len(prompt)) + [1] * own
        assert input_ids[row][mask[row].bool()].tolist() == prompt
    # left padding, as plain generate pads: share_prefix off, a batch of one, a prefix shorter than the minimum
    short_instruction = "Add: "
    for backend, batch in (
        (unshared, prompts),
        (shared, prompts[:1]),
        (shared, prompts_ids(shared, PROBLEMS, short_instruction)),
    ):
        input_ids, mask, prefix = backend.batch_layout(batch)
        assert prefix == 0
        for row, prompt in enumerate(batch):
            assert mask[row].tolist() == [0] * (input_ids.shape[1] - len(prompt)) + [1] * len(prompt)


def count_model_tokens(backend):
    """A list that gets the number of token positions of every forward pass of the backend's model."""
    counts = []
    backend.model.get_input_embeddings().register_forward_hook(
        lambda module, args, output: counts.append(args[0].numel())
    )
    return counts


def test_rows_are_those_of_their_whole_prompts_and_the_prefix_goes_through_the_model_once(shared, unshared):
    """Sampled and greedy, each row's tokens equal its tokens with left padding and alone (float32 on this CPU),
    and the batch's prompt pass computes the prefix once: (rows - 1) x prefix fewer token positions."""
    requests = requests_for(shared)
    prefix = shared.batch_layout([request.prompt_token_ids for request in requests])[2]
    shared_counts, unshared_counts = count_model_tokens(shared), count_model_tokens(unshared)
    for sampling in (SAMPLED, GREEDY):
        shared_counts.clear(), unshared_counts.clear()
        results = shared.generate(requests, sampling)
        assert results == unshared.generate(requests, sampling)
        assert sum(unshared_counts) - sum(shared_counts) == (len(requests) - 1) * prefix
        assert results == [unshared.generate([request], sampling)[0] for request in requests]
        assert len({result.generation for result in results}) == len(results)


def test_a_static_cache_takes_the_shared_prefix_too(checkpoint, unshared):
    """The compiled step's path (static cache, run eagerly here): the prefix is filled into a one-row static
    cache and copied into every row's."""
    static = hf_backend(str(checkpoint), device="cpu", dtype="float32", batch_size=8)
    static._compiled_step = decoding_step(static.model)
    requests = requests_for(static)
    for sampling in (SAMPLED, GREEDY):
        assert static.generate(requests, sampling) == unshared.generate(requests, sampling)


def test_rows_with_the_same_prompt_share_one_prompt_pass_and_draw_as_alone(monkeypatch):
    """GRPO samples each prompt several times: the prompt goes through the model once per distinct prompt, and each
    row's tokens are those it draws in a batch of its own (its seed alone decides)."""
    from snakeskills.backends.hf import HFBackend, distinct_rows

    assert distinct_rows(torch.tensor([[1, 2], [3, 4], [1, 2], [3, 4], [5, 6]])) == ([0, 1, 4], [0, 1, 0, 1, 2])
    tokenizer = build_char_tokenizer()
    model = build_tiny_llama(tokenizer, hidden_size=32, num_layers=2, num_heads=2, seed=0, max_positions=64)
    model.eval()
    backend = HFBackend.around(model, tokenizer, batch_size=8)
    prompts = [tokenizer.encode(text) for text in ("12+30=", "7+5=", "12+30=", "7+5=", "12+30=", "999+1=")]
    sampling = SamplingParams(temperature=1.0, top_p=1.0, top_k=0, max_new_tokens=10)
    requests = [GenerationRequest(seed=seed, prompt_token_ids=tuple(ids)) for seed, ids in enumerate(prompts)]
    rows_seen = []
    forward = backend._forward

    def counting_forward(input_ids, *arguments):
        rows_seen.append(input_ids.shape)
        return forward(input_ids, *arguments)

    monkeypatch.setattr(backend, "_forward", counting_forward)
    together = backend.generate(requests, sampling)
    assert rows_seen[0][0] == 3, "the prompt pass runs each distinct prompt once"
    alone = [backend.generate([request], sampling)[0] for request in requests]
    assert [result.token_ids for result in together] == [result.token_ids for result in alone]
    for joint, single in zip(together, alone, strict=True):
        assert joint.logprobs == pytest.approx(single.logprobs, abs=1e-5)
    assert len({together[index].token_ids for index in (0, 2, 4)}) > 1  # one prompt, three seeds
