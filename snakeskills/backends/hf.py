"""transformers backend: batched, left-padded ``generate`` on CPU or CUDA, LoRA adapters via peft.

Sampling happens inside a logits processor (``PerRequestSampler``): Gumbel noise hashed from (row seed,
step, token id) on the model's device is added to the (top-k/top-p filtered) logits, and ``generate`` runs
greedily over the result: an exact draw from the filtered softmax. A row's tokens therefore depend on its
seed only, not on its batch neighbours, so a resumed or re-chunked run reproduces the same samples.
"""

from __future__ import annotations

import logging
from pathlib import Path

from snakeskills.backends import (
    GenerationRequest,
    GenerationResult,
    SamplingParams,
    context_overflow,
    truncate_at_stop,
)
from snakeskills.errors import SnakeskillsError

logger = logging.getLogger(__name__)


def resolve_device(device: str) -> str:
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise SnakeskillsError(f"generation.device: {device!r} requested but CUDA is not available on this node")
    return device


def load_model_and_tokenizer(
    model_path: str, *, adapter_path: str | None, device: str, dtype: str, trust_remote_code: bool
):
    """Load a causal LM (plus an optional LoRA adapter, not merged) the way real checkpoints load."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if not Path(model_path).exists():
        raise SnakeskillsError(f"model path {model_path!r} does not exist (config: model.path)")
    tokenizer = AutoTokenizer.from_pretrained(model_path, trust_remote_code=trust_remote_code)
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    torch_dtype = "auto" if dtype == "auto" else getattr(torch, dtype)
    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch_dtype, trust_remote_code=trust_remote_code)
    if adapter_path is not None:
        from peft import PeftModel

        if not Path(adapter_path).exists():
            raise SnakeskillsError(f"adapter path {adapter_path!r} does not exist")
        model = PeftModel.from_pretrained(model, adapter_path)
    model.to(device)
    model.eval()
    return model, tokenizer


MASK32 = 0xFFFFFFFF


def _mix32(values):
    """An avalanche hash of 32-bit values held in int64 tensors: xor-shifts and two multiplications by odd
    constants below 2**31, so that no product leaves int64 (defined, identical on every device)."""
    values = values ^ (values >> 16)
    values = (values * 0x7FEB352D) & MASK32
    values = values ^ (values >> 15)
    values = (values * 0x5BD1E995) & MASK32
    return values ^ (values >> 16)


def row_keys(seeds, step: int):
    """One 32-bit key per row for one decoding step: a hash of the row's 63-bit seed and the step."""
    high, low = (seeds >> 32) & MASK32, seeds & MASK32
    return _mix32(_mix32(_mix32(high ^ 0x2545F491) ^ low) ^ (step & MASK32))


def _as_int32(value: int) -> int:
    """The signed 32-bit integer with the bits of ``value`` mod 2**32 (a multiplier for int32 tensors)."""
    value &= MASK32
    return value - (1 << 32) if value >= 1 << 31 else value


def counter_bits(seeds, step: int, token_ids):
    """23 random bits per (row, token) at one step: a hash of (row seed, step, token id), on the seeds' device.

    The row's key (``row_keys``, exact int64 arithmetic, one value per row) is mixed with each token id in
    int32 tensors: one multiply-xorshift-multiply round, whose top 23 bits are kept. int32 products wrap
    mod 2**32 on CPU and CUDA, and right shifts are masked to act as logical shifts, so the bits equal the
    same hash in exact integer arithmetic (tests/test_sampling.py checks it against Python's). int32 keeps
    the few vocabulary-sized passes cheap: half the memory traffic of int64.
    """
    import torch

    keys = row_keys(seeds, step)
    keys = torch.where(keys >= 1 << 31, keys - (1 << 32), keys).to(torch.int32).unsqueeze(1)
    bits = token_ids.to(torch.int32, copy=True).mul_(_as_int32(0x61C88647))
    bits = torch.bitwise_xor(bits, keys).mul_(_as_int32(0x7FEB352D))
    bits.bitwise_xor_((bits >> 15).bitwise_and_(0x1FFFF)).mul_(_as_int32(0x846CA68B))
    return (bits >> 9).bitwise_and_(0x7FFFFF)


def counter_gumbel(seeds, step: int, token_ids):
    """Gumbel noise for (row, token) pairs at one step: a pure function of (row seed, step, token id).

    ``seeds`` is an int64 tensor of non-negative 63-bit seeds on the model's device, one per row;
    ``token_ids`` an integer tensor of the tokens to draw noise for: the whole vocabulary (1-D, shared by the
    rows) or each row's candidates (one row each). No generator state is involved, so no row, batch size or
    device order can influence another row's noise. Uniforms have 23 bits, strictly inside (0, 1).
    """
    import torch

    uniform = counter_bits(seeds, step, token_ids).to(torch.float32).add_(0.5).mul_(2.0**-23)
    return uniform.log_().neg_().log_().neg_()


class PerRequestSampler:
    """Logits processor: temperature, top-k, top-p, then a seeded Gumbel-max draw per row, on the device.

    Row i's token at decoding step t is the argmax over its candidate tokens v of
    ``logits[v] / temperature + counter_gumbel(seed_i, t, v)``: the Gumbel-max trick, an exact draw from the
    (top-k/top-p filtered) softmax, computed for the whole batch at once on the model's device (no per-row
    generator, no copy from the host). With top-k or top-p the draw happens among the sorted candidates, and
    noise is computed only for the kept ones. A row's sample therefore depends on its seed and its own
    logits only, not on its batch neighbours, the batch size or the chunking, so a resumed or re-chunked run
    reproduces it; an argmax only changes when float noise in the logits exceeds the gap between the two
    best tokens, which batching's rounding differences almost never do. ``generate`` runs greedily over the
    returned scores, in which the drawn token is the largest.
    """

    def __init__(self, seeds: list[int], sampling: SamplingParams, prompt_length: int):
        import torch

        self.sampling = sampling
        self.prompt_length = prompt_length
        self.seeds = torch.tensor(seeds, dtype=torch.int64)

    def __call__(self, input_ids, scores):
        import torch

        if self.sampling.temperature == 0:
            return scores
        if self.seeds.device != scores.device:
            self.seeds = self.seeds.to(scores.device)
        step = input_ids.shape[1] - self.prompt_length
        scores = scores.float() / self.sampling.temperature
        vocabulary = scores.shape[-1]
        top_k = 0 < self.sampling.top_k < vocabulary
        if not top_k and self.sampling.top_p >= 1.0:
            tokens = torch.arange(vocabulary, device=scores.device)
            return scores.add_(counter_gumbel(self.seeds, step, tokens))
        if top_k:
            candidates, candidate_ids = torch.topk(scores, self.sampling.top_k, dim=-1)
        else:
            candidates, candidate_ids = torch.sort(scores, descending=True, dim=-1)
        if self.sampling.top_p < 1.0:
            probabilities = torch.softmax(candidates, dim=-1)
            removed = probabilities.cumsum(dim=-1) - probabilities >= self.sampling.top_p
            candidates = candidates.masked_fill(removed, float("-inf"))
            # the kept candidates of each row are a prefix (the most likely first): draw among the longest
            kept = int((~removed).sum(dim=-1).max())
            candidates, candidate_ids = candidates[:, :kept], candidate_ids[:, :kept]
        noisy = candidates + counter_gumbel(self.seeds, step, candidate_ids)
        drawn = candidate_ids.gather(1, noisy.argmax(dim=-1, keepdim=True))
        return torch.full_like(scores, float("-inf")).scatter_(1, drawn, 0.0)


class RowEnds:
    """Stopping criterion: a row ends at its first EOS token or stop string; records where.

    transformers stops a row once any criterion says so (later positions are padding), but does not tell
    where each row ended. This criterion does: ``lengths[i]`` is the number of generated tokens of row i up
    to and including its EOS or the token that completed a stop string (transformers' ``StopStringCriteria``,
    which matches stop strings across token boundaries), or None while it runs.
    """

    def __init__(self, prompt_length: int, batch_size: int, eos_token_ids: set[int], stop_criteria):
        self.prompt_length = prompt_length
        self.eos_token_ids = sorted(eos_token_ids)
        self.stop_criteria = stop_criteria
        self.lengths: list[int | None] = [None] * batch_size

    def __call__(self, input_ids, scores, **kwargs):
        import torch

        last = input_ids[:, -1]
        ended_by_eos = torch.isin(last, torch.tensor(self.eos_token_ids, device=last.device))
        ended_by_stop = (
            self.stop_criteria(input_ids, scores) if self.stop_criteria is not None else torch.zeros_like(ended_by_eos)
        )
        ended = ended_by_eos | ended_by_stop
        generated = input_ids.shape[1] - self.prompt_length
        for row in torch.nonzero(ended).flatten().tolist():
            if self.lengths[row] is None:
                self.lengths[row] = generated
        return ended


def context_length(model, tokenizer) -> int | None:
    """The model's context in tokens: its config's position limit, else the tokenizer's (when it states one)."""
    for value in (getattr(model.config, "max_position_embeddings", None), tokenizer.model_max_length):
        if isinstance(value, int) and 0 < value < 10**8:
            return value
    return None


class HFBackend:
    name = "hf"
    takes = "token_ids"

    def __init__(
        self,
        *,
        model_path: str,
        adapter_path: str | None = None,
        device: str = "auto",
        dtype: str = "auto",
        batch_size: int = 32,
        trust_remote_code: bool = False,
        threads: int = 1,
    ):
        import torch
        from transformers import GenerationConfig

        torch.set_num_threads(threads)
        self.device = resolve_device(device)
        self.batch_size = batch_size
        self.model, self.tokenizer = load_model_and_tokenizer(
            model_path,
            adapter_path=adapter_path,
            device=self.device,
            dtype=dtype,
            trust_remote_code=trust_remote_code,
        )
        checkpoint_config = self.model.generation_config
        eos = checkpoint_config.eos_token_id
        self.eos_token_ids = {eos} if isinstance(eos, int) else set(eos or [])
        self.eos_token_ids.add(self.tokenizer.eos_token_id)
        # A checkpoint's generation_config.json (do_sample, temperature, top_p, top_k, repetition_penalty,
        # no_repeat_ngram_size, ...) is merged by `generate` into every unset field of the config it is
        # given. Only its end-of-sequence tokens are kept: our sampling settings alone decide the samples.
        self.model.generation_config = GenerationConfig(
            bos_token_id=checkpoint_config.bos_token_id,
            eos_token_id=sorted(self.eos_token_ids),
            pad_token_id=self.tokenizer.pad_token_id,
        )
        self.context_length = context_length(self.model, self.tokenizer)
        self._stop_criteria: dict[tuple[str, ...], object] = {}
        logger.info(
            "loaded model %s%s on %s (context %s tokens)",
            model_path,
            f" + adapter {adapter_path}" if adapter_path else "",
            self.device,
            self.context_length,
        )

    def generate(self, requests: list[GenerationRequest], sampling: SamplingParams) -> list[GenerationResult]:
        results: list[GenerationResult | None] = [
            context_overflow(len(request.prompt_token_ids), sampling.max_new_tokens, self.context_length)
            for request in requests
        ]
        fitting = [index for index, result in enumerate(results) if result is None]
        for start in range(0, len(fitting), self.batch_size):
            batch = fitting[start : start + self.batch_size]
            for index, result in zip(batch, self._generate_batch([requests[i] for i in batch], sampling), strict=True):
                results[index] = result
        return results

    def left_padded(self, prompts_token_ids):
        """One batch of token-id prompts, left-padded, with its attention mask, on the model's device."""
        return self.tokenizer.pad(
            {"input_ids": [list(token_ids) for token_ids in prompts_token_ids]},
            padding=True,
            padding_side="left",
            return_tensors="pt",
        ).to(self.device)

    def _stop_strings(self, stop: tuple[str, ...]):
        """transformers' stop-string criterion for these strings (built once: it preprocesses the vocabulary)."""
        if not stop:
            return None
        if stop not in self._stop_criteria:
            from transformers import StopStringCriteria

            self._stop_criteria[stop] = StopStringCriteria(tokenizer=self.tokenizer, stop_strings=list(stop))
        return self._stop_criteria[stop]

    def _generate_batch(self, requests: list[GenerationRequest], sampling: SamplingParams) -> list[GenerationResult]:
        import torch
        from transformers import GenerationConfig, LogitsProcessorList, StoppingCriteriaList

        encoded = self.left_padded([request.prompt_token_ids for request in requests])
        prompt_length = encoded["input_ids"].shape[1]
        row_ends = RowEnds(prompt_length, len(requests), self.eos_token_ids, self._stop_strings(sampling.stop))
        generation_config = GenerationConfig(
            do_sample=False,
            max_new_tokens=sampling.max_new_tokens,
            pad_token_id=self.tokenizer.pad_token_id,
            eos_token_id=sorted(self.eos_token_ids),
        )
        with torch.inference_mode():
            output = self.model.generate(
                **encoded,
                generation_config=generation_config,
                logits_processor=LogitsProcessorList(
                    [PerRequestSampler([r.seed for r in requests], sampling, prompt_length)]
                ),
                stopping_criteria=StoppingCriteriaList([row_ends]),
            )
        new_tokens = output[:, prompt_length:].tolist()
        results = []
        for row, tokens in enumerate(new_tokens):
            length = row_ends.lengths[row]
            ended = length is not None
            if not ended:
                length = len(tokens)
            # the text ends with the stop string that ended it (if any): cut there
            text, _ = truncate_at_stop(self.tokenizer.decode(tokens[:length], skip_special_tokens=True), sampling.stop)
            results.append(
                GenerationResult(
                    generation=text,
                    num_generated_tokens=length,
                    finish_reason="stop" if ended else "length",
                )
            )
        return results
