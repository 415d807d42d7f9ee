"""GRPO's forwards with each group's prompt computed once (``group_forward.shared_prompt_logps``) give the
log-probabilities, entropies and gradients of TRL's own forward over the whole sequences (tiny model, a LoRA, TRL's
fused LM head), for left-padded prompts of different lengths and right-padded completions, in passes of similar
completion lengths, and with an opening all prompts share computed once."""

from __future__ import annotations

import contextlib

import pytest

OPENING = "Add these two numbers: "  # 23 characters: over MIN_SHARED_PREFIX tokens of the character tokenizer


@pytest.mark.parametrize("opening", ["", OPENING])
def test_a_groups_prompt_computed_once_gives_trls_log_probabilities_and_gradients(opening):
    import torch
    from peft import LoraConfig, get_peft_model
    from trl.trainer.utils import add_fused_lm_head

    from snakeskills.models.tiny_model import build_char_tokenizer, build_tiny_llama
    from snakeskills.training.group_forward import (
        completion_lengths,
        groups_share_prompts,
        length_buckets,
        prompt_layout,
        shared_prompt_logps,
    )
    from snakeskills.training.trainer import completion_positions_only

    tokenizer = build_char_tokenizer()
    model = build_tiny_llama(tokenizer, hidden_size=32, num_layers=2, num_heads=2, seed=0, max_positions=96)
    policy = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules="all-linear", init_lora_weights=False))
    add_fused_lm_head(policy.get_base_model(), temperature=0.7, outputs=("log_probs", "entropy"))
    pad = tokenizer.pad_token_id
    prompts = [tokenizer.encode(opening + text) for text in ("12+30=", "7+5=")]
    completions = [tokenizer.encode(text, add_special_tokens=False) for text in ("42", "4", "423", "12", "1", "12")]
    width = max(map(len, prompts))
    rows, masks = [], []
    for index, completion in enumerate(completions):  # 2 groups of 3: prompt 0 then prompt 1
        prompt = prompts[index // 3]
        padding = [pad] * (width - len(prompt)), [pad] * (3 - len(completion))
        assert len(completion) <= 3
        rows.append(padding[0] + prompt + completion + padding[1])
        masks.append([0] * len(padding[0]) + [1] * (len(prompt) + len(completion)) + [0] * len(padding[1]))
    input_ids, attention_mask = torch.tensor(rows), torch.tensor(masks)
    assert groups_share_prompts(input_ids, attention_mask, 3)
    shared = prompt_layout(input_ids, attention_mask, width, [0, 3], model.config)[3]
    assert shared == (len(tokenizer.encode(opening)) if opening else 0)
    assert completion_lengths(attention_mask, 3) == [2, 1, 3, 2, 1, 2]
    assert length_buckets([2, 1, 3, 2, 1, 2]) == [[2], [0, 3, 5], [1, 4]]  # three passes, groups across them

    def trl_forward():
        labels = input_ids.masked_fill(attention_mask == 0, -100)
        labels[:, :-3] = -100
        outputs = policy(input_ids=input_ids, attention_mask=attention_mask, labels=labels, fused_lm_head=True)
        return outputs.log_probs[:, -3:], outputs.entropy[:, -3:]

    def gradients(loss):
        policy.zero_grad()
        loss.backward()
        return {name: p.grad.clone() for name, p in policy.named_parameters() if p.requires_grad}

    with completion_positions_only():
        expected_logps, expected_entropy = trl_forward()
        expected_gradients = gradients((expected_logps * attention_mask[:, -3:]).sum())
        logps, entropy = shared_prompt_logps(policy, input_ids, attention_mask, 3, True, contextlib.nullcontext)
        actual_gradients = gradients((logps * attention_mask[:, -3:]).sum())
    completion_mask = attention_mask[:, -3:].bool()
    torch.testing.assert_close(logps[completion_mask], expected_logps[completion_mask], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(entropy[completion_mask], expected_entropy[completion_mask], rtol=1e-5, atol=1e-5)
    assert expected_gradients.keys() == actual_gradients.keys()
    for name in expected_gradients:  # the prompt's pass is in the graph: the LoRA of every layer gets its gradient
        torch.testing.assert_close(actual_gradients[name], expected_gradients[name], rtol=1e-4, atol=1e-6)
    assert any(gradient.abs().sum() > 0 for gradient in actual_gradients.values())


@pytest.mark.parametrize(
    ("rows", "shared"), [([[1, 2, 3, 9], [1, 2, 3, 8]], True), ([[1, 2, 3, 9], [1, 2, 4, 8]], False)]
)
def test_groups_share_prompts_reads_the_prompt_part_only(rows, shared):
    import torch

    from snakeskills.training.group_forward import groups_share_prompts

    ids = torch.tensor(rows)
    assert groups_share_prompts(ids, torch.ones_like(ids), 1) is shared
