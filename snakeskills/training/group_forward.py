"""GRPO's forwards with each group's prompt computed once. A GRPO batch holds ``num_generations`` completions per
problem, so TRL's forwards (reference, old policy, policy) run every prompt that many times. Here each distinct
prompt goes through the model once, its keys and values (in the autograd graph) are copied to each of its
completions, and only the completions follow: the same log-probabilities up to rounding, and the gradient reaches
the prompt through the copies. The completions' pass takes the prompt's last token, so every scored token goes
through TRL's own fused LM head. Completions of very different lengths go in passes of similar lengths
(``length_buckets``), so that a short completion is not padded to the longest of the batch.

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


# what a further completions' pass must save, as a share of one pass over the whole batch at its longest completion
# (a pass's own cost: the prompt cache's copy, the kernels' launches, smaller matrix products), and the most passes
BUCKET_SAVING, MOST_BUCKETS = 0.1, 4


def length_buckets(lengths: list[int]) -> list[list[int]]:
    """The rows (indices into ``lengths``) of each completions' pass: rows sorted by length, longest first, cut where
    the padded positions a cut saves (a pass is as wide as its longest completion) exceed ``BUCKET_SAVING`` of one
    pass over all rows; at most ``MOST_BUCKETS`` passes, the fewest positions (an exact partition: a dynamic
    programme over the sorted rows)."""
    order = sorted(range(len(lengths)), key=lambda row: (-lengths[row], row))
    widths = [max(lengths[row], 1) for row in order]
    count = len(order)
    penalty = BUCKET_SAVING * count * (widths[0] if widths else 0)
    # best[k][end]: the least cost of the first `end` sorted rows in k passes, and where its last pass starts
    infinity = float("inf")
    best = [[(infinity, 0)] * (count + 1) for _ in range(MOST_BUCKETS + 1)]
    best[0][0] = (0.0, 0)
    for passes in range(1, MOST_BUCKETS + 1):
        for end in range(1, count + 1):
            best[passes][end] = min(
                (best[passes - 1][start][0] + (end - start) * widths[start] + penalty, start) for start in range(end)
            )
    passes = min(range(1, MOST_BUCKETS + 1), key=lambda k: (best[k][count][0], k)) if count else 0
    buckets, end = [], count
    while passes:
        start = best[passes][end][1]
        buckets.append(sorted(order[start:end]))
        end, passes = start, passes - 1
    return buckets[::-1]


def completion_lengths(attention_mask, logits_to_keep: int) -> list[int]:
    """Each row's completion length: its last attended completion position + 1 (0 for an empty completion)."""
    import torch

    completion = attention_mask[:, attention_mask.shape[1] - logits_to_keep :]
    columns = torch.arange(1, logits_to_keep + 1, device=attention_mask.device)
    return (completion.ne(0) * columns).amax(1).tolist()


def rows_cache(cache, rows):
    """A cache holding the rows ``rows`` of ``cache`` (in this order; a row repeats where its index does), beside it:
    the tensors indexed anew, ``cache`` unchanged."""
    import copy

    selected = copy.copy(cache)
    selected.layers = [copy.copy(layer) for layer in cache.layers]
    selected.batch_select_indices(rows)
    return selected


def prompt_layout(input_ids, attention_mask, prompt_length: int, distinct: list[int], config):
    """The distinct prompts laid out for their passes: (ids, mask, positions, opening). ``opening``: how many
    leading tokens all of them share (a chat template's system turn, few-shot examples), each prompt keeping two
    of its own; 0 below ``MIN_SHARED_PREFIX``, for one prompt, or where a cache layer is not plain (an attention
    window counts padding columns). Each row: the opening, left padding, the rest of its prompt; positions count its
    own tokens only, so its keys are those of its prompt alone."""
    import torch

    from snakeskills.backends.hf import MIN_SHARED_PREFIX, plain_cache_layers, shared_prefix_length

    prompts = [input_ids[row, :prompt_length][attention_mask[row, :prompt_length].bool()].tolist() for row in distinct]
    opening = 0
    if len(prompts) > 1 and plain_cache_layers(config):
        opening = min(shared_prefix_length(prompts), min(map(len, prompts)) - 2)
        opening = opening if opening >= MIN_SHARED_PREFIX else 0
    width = max(len(prompt) for prompt in prompts) - opening
    ids = input_ids.new_zeros((len(prompts), opening + width))
    mask = attention_mask.new_zeros((len(prompts), opening + width))
    for place, prompt in enumerate(prompts):
        rest = prompt[opening:]
        ids[place, :opening] = torch.tensor(prompt[:opening], device=ids.device)
        ids[place, opening + width - len(rest) :] = torch.tensor(rest, device=ids.device)
        mask[place, :opening] = 1
        mask[place, opening + width - len(rest) :] = 1
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    return ids, mask, positions, opening


def shared_prompt_logps(model, input_ids, attention_mask, logits_to_keep: int, compute_entropy: bool, autocast):
    """Per-token log-probabilities (and entropies) of the last ``logits_to_keep`` tokens of each row, as TRL's
    ``_get_per_token_logps_and_entropies`` computes them for one chunk, with each distinct prompt computed once (and
    the opening all of them share once: ``prompt_layout``) and the completions in passes of similar lengths
    (``length_buckets``; zeros past a row's pass)."""
    import torch
    from transformers import DynamicCache

    from snakeskills.backends.hf import cache_keyword

    prompt_length = input_ids.shape[1] - logits_to_keep
    distinct, copies = prompt_copies(input_ids, attention_mask, logits_to_keep)
    keyword = cache_keyword(model)
    ids, mask, prompt_positions, opening = prompt_layout(
        input_ids, attention_mask, prompt_length, distinct, model.config
    )
    last = ids.shape[1] - 1  # each prompt's last token goes with its completions (its logits score their first)
    positions = (attention_mask.cumsum(-1) - 1).clamp(min=0)
    cache = DynamicCache(config=model.config)
    # the label of position p is the token at p + 1; padding after a completion's end, and the last position, none
    labels = input_ids[:, prompt_length:].masked_fill(attention_mask[:, prompt_length:] == 0, -100)
    labels = torch.cat([labels, labels.new_full((labels.shape[0], 1), -100)], 1)
    lengths = completion_lengths(attention_mask, logits_to_keep)
    buckets = length_buckets(lengths)
    copies = torch.tensor(copies, device=input_ids.device)
    logps, entropies = [], []
    with autocast():
        if opening:  # the shared opening once, its keys and values copied to every distinct prompt
            model(
                input_ids=ids[:1, :opening],
                attention_mask=mask[:1, :opening],
                position_ids=prompt_positions[:1, :opening],
                use_cache=True,
                logits_to_keep=1,
                **{keyword: cache},
            )
            cache.batch_select_indices(torch.zeros(ids.shape[0], dtype=torch.long, device=ids.device))
        model(
            input_ids=ids[:, opening:last],
            attention_mask=mask[:, :last],
            position_ids=prompt_positions[:, opening:last],
            use_cache=True,
            logits_to_keep=1,
            **{keyword: cache},
        )
        for bucket in buckets:
            rows = torch.tensor(bucket, device=input_ids.device)
            width = max(1, *(lengths[row] for row in bucket))
            prompts = copies[rows]
            end = prompt_length + width
            outputs = model(
                input_ids=torch.cat([ids[prompts, last:], input_ids[rows, prompt_length:end]], 1),
                attention_mask=torch.cat([mask[prompts], attention_mask[rows, prompt_length:end]], 1),
                position_ids=torch.cat([prompt_positions[prompts, last:], positions[rows, prompt_length:end]], 1),
                shift_labels=labels[rows, : width + 1].contiguous(),
                fused_lm_head=True,
                **{keyword: rows_cache(cache, prompts)},
            )
            logps.append(outputs.log_probs[:, :width])
            if compute_entropy:
                entropies.append(outputs.entropy[:, :width])
    order = torch.tensor([row for bucket in buckets for row in bucket], device=input_ids.device)
    place = torch.empty_like(order)
    place[order] = torch.arange(order.numel(), device=input_ids.device)

    def gathered(chunks):
        padded = torch.cat([torch.nn.functional.pad(chunk, (0, logits_to_keep - chunk.shape[1])) for chunk in chunks])
        return padded[place]

    return gathered(logps), gathered(entropies) if compute_entropy else None
