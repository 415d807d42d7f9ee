"""GRPO's forwards with each group's prompt computed once. A GRPO batch holds ``num_generations`` completions per
problem, so TRL's forwards (reference, old policy, policy) run every prompt that many times. Here each distinct
prompt goes through the model once, its keys and values (in the autograd graph) are copied to each of its
completions, and only the completions follow: the same log-probabilities up to rounding, and the gradient reaches
the prompt through the copies. The completions' pass takes the prompt's last token, so every scored token goes
through TRL's own fused LM head.

Images, a MoE's auxiliary loss, activation checkpointing and several processes (DDP with two forwards per backward
is unchecked) go through TRL's own forward (``trl_forward_reason`` says why; the trainer logs each path once a
round)."""

from __future__ import annotations


def checkpointing(model) -> bool:
    """Whether the model recomputes activations in its backward (a shared cache would be updated twice)."""
    for name in ("is_activation_checkpointing", "is_gradient_checkpointing"):
        value = getattr(model, name, None)
        if value is not None:
            return bool(value)
    return False


def prompt_copies(input_ids, attention_mask, logits_to_keep: int) -> tuple[list[int], list[int]]:
    """``hf.distinct_rows`` of the batch's prompts (their ids and padding): the first row of each distinct prompt,
    and each row's place among them."""
    import torch

    from snakeskills.backends.hf import distinct_rows

    prompt_length = input_ids.shape[1] - logits_to_keep
    return distinct_rows(torch.cat([input_ids[:, :prompt_length], attention_mask[:, :prompt_length]], 1))


def groups_share_prompts(input_ids, attention_mask, logits_to_keep: int) -> bool:
    """Whether some rows of the batch have the same prompt (ids and padding)."""
    if input_ids.shape[1] - logits_to_keep < 2:
        return False
    distinct, copies = prompt_copies(input_ids, attention_mask, logits_to_keep)
    return len(distinct) < len(copies)


def trl_forward_reason(
    model, input_ids, attention_mask, logits_to_keep: int, *, processes: int, compute_aux_loss: bool, inputs: dict
) -> str | None:
    """Why a batch goes through TRL's own forward rather than ``shared_prompt_logps``, in words (None: it need not).
    ``inputs``: the forward's other model inputs (images), ``processes``: the training processes."""
    if compute_aux_loss:
        return "the model's auxiliary loss (a MoE's router loss) is asked for"
    extra = sorted(name for name, value in inputs.items() if value is not None)
    if extra:
        return f"the batch has model inputs the shared prompt does not cover ({', '.join(extra)})"
    if checkpointing(model):
        return (
            "gradient checkpointing is on (grpo.training.gradient_checkpointing): the backward would recompute the "
            "shared prompt's cache"
        )
    if processes > 1:
        return (
            f"{processes} training processes (training.processes): DDP's wrapper is not checked with two forwards "
            "before a backward"
        )
    if not groups_share_prompts(input_ids, attention_mask, logits_to_keep):
        return "no two rows of the batch share a prompt"
    return None


def shared_prompt_logps(model, input_ids, attention_mask, logits_to_keep: int, compute_entropy: bool, autocast):
    """Per-token log-probabilities (and entropies) of the last ``logits_to_keep`` tokens of each row, as TRL's
    ``_get_per_token_logps_and_entropies`` computes them for one chunk, with each distinct prompt computed once."""
    import torch
    from transformers import DynamicCache

    from snakeskills.backends.hf import cache_keyword

    prompt_length = input_ids.shape[1] - logits_to_keep
    distinct, copies = prompt_copies(input_ids, attention_mask, logits_to_keep)
    keyword = cache_keyword(model)
    positions = (attention_mask.cumsum(-1) - 1).clamp(min=0)
    opening = prompt_length - 1  # the prompt's last token goes with the completion
    cache = DynamicCache(config=model.config)
    with autocast():
        model(
            input_ids=input_ids[distinct, :opening],
            attention_mask=attention_mask[distinct, :opening],
            position_ids=positions[distinct, :opening],
            use_cache=True,
            logits_to_keep=1,
            **{keyword: cache},
        )
        cache.batch_select_indices(torch.tensor(copies, device=input_ids.device))
        # the label of position p is the token at p + 1; padding after a completion's end, and the last position, none
        labels = input_ids[:, prompt_length:].masked_fill(attention_mask[:, prompt_length:] == 0, -100)
        labels = torch.cat([labels, labels.new_full((labels.shape[0], 1), -100)], 1)
        outputs = model(
            input_ids=input_ids[:, opening:],
            attention_mask=attention_mask,
            position_ids=positions[:, opening:],
            shift_labels=labels,
            fused_lm_head=True,
            **{keyword: cache},
        )
    entropy = outputs.entropy[:, :logits_to_keep] if compute_entropy else None
    return outputs.log_probs[:, :logits_to_keep], entropy
