"""The decoding loop's KV cache (``kv_cache.growing_cache``) gives the model outputs of transformers' own dynamic cache,
bit for bit, through a prompt pass, decoding steps, rows leaving the batch and a batch set whole; and a decoding
step writes into room kept in the buffers instead of copying the cache."""

from __future__ import annotations


def test_growing_layers_give_the_dynamic_caches_outputs_and_append_in_place():
    import torch
    from transformers import DynamicCache

    from snakeskills.backends.kv_cache import growing_cache
    from snakeskills.models.tiny_model import build_char_tokenizer, build_tiny_llama

    tokenizer = build_char_tokenizer()
    model = build_tiny_llama(tokenizer, hidden_size=32, num_layers=2, num_heads=2, seed=0, max_positions=64).eval()
    generator = torch.Generator().manual_seed(0)
    prompt = torch.randint(5, 60, (4, 7), generator=generator)
    steps = torch.randint(5, 60, (6, 4), generator=generator)

    def run(cache):
        outputs, buffers = [], []
        with torch.inference_mode():
            outputs.append(model(input_ids=prompt, past_key_values=cache, use_cache=True).logits)
            rows = 4
            for step, tokens in enumerate(steps):
                if step == 3:  # rows 1 and 3 leave the batch
                    cache.batch_select_indices(torch.tensor([0, 2]))
                    rows = 2
                if step == 5:  # the batch set whole, as the turn engine joins rows
                    for layer in cache.layers:
                        layer.keys, layer.values = layer.keys.clone(), layer.values.clone()
                ids = tokens[:rows].unsqueeze(1)
                outputs.append(model(input_ids=ids, past_key_values=cache, use_cache=True).logits)
                buffers.append(cache.layers[0].keys.data_ptr())
        return outputs, buffers, [layer.keys.shape for layer in cache.layers]

    expected, _, expected_shapes = run(DynamicCache(config=model.config))
    actual, buffers, shapes = run(growing_cache(model.config, room=8))
    assert shapes == expected_shapes
    for one, other in zip(actual, expected, strict=True):
        assert torch.equal(one, other)
    # steps 1-3 append into the prompt pass's buffer; step 4 (after rows left) and step 6 (set whole) grow new ones
    assert len({buffers[0], buffers[1], buffers[2]}) == 1
    assert buffers[3] != buffers[2] and buffers[4] == buffers[3] and buffers[5] != buffers[4]
