"""transformers backend: batched, left-padded ``generate`` on CPU or CUDA, LoRA adapters via peft.

Sampling uses the Gumbel-max trick inside a logits processor: each request owns a
``torch.Generator`` seeded from its own seed, ``generate`` runs greedily over
``logits / temperature + Gumbel noise``, which is an exact draw from the (top-k/top-p filtered)
softmax. A row's tokens therefore depend on its seed only, not on its batch neighbours, so a
resumed or re-chunked run reproduces the same samples.
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


class PerRequestSampler:
    """Logits processor: temperature, top-k, top-p, then per-row Gumbel noise from per-row generators."""

    def __init__(self, seeds: list[int], sampling: SamplingParams):
        import torch

        self.sampling = sampling
        self.generators = []
        for seed in seeds:
            generator = torch.Generator(device="cpu")
            generator.manual_seed(seed)
            self.generators.append(generator)

    def __call__(self, input_ids, scores):
        import torch

        if self.sampling.temperature == 0:
            return scores
        scores = scores.float() / self.sampling.temperature
        vocabulary = scores.shape[-1]
        if 0 < self.sampling.top_k < vocabulary:
            threshold = torch.topk(scores, self.sampling.top_k, dim=-1).values[..., -1:]
            scores = scores.masked_fill(scores < threshold, float("-inf"))
        if self.sampling.top_p < 1.0:
            sorted_scores, sorted_indices = torch.sort(scores, descending=True, dim=-1)
            cumulative = torch.softmax(sorted_scores, dim=-1).cumsum(dim=-1)
            remove_sorted = cumulative - torch.softmax(sorted_scores, dim=-1) >= self.sampling.top_p
            remove = remove_sorted.scatter(-1, sorted_indices, remove_sorted)
            scores = scores.masked_fill(remove, float("-inf"))
        uniform = torch.stack([torch.rand(vocabulary, generator=generator) for generator in self.generators])
        gumbel = -torch.log(-torch.log(uniform.clamp(min=1e-20, max=1 - 1e-7)))
        return scores + gumbel.to(scores.device)


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

        encoded = self.tokenizer.pad(
            {"input_ids": [list(request.prompt_token_ids) for request in requests]},
            padding=True,
            padding_side="left",
            return_tensors="pt",
        ).to(self.device)
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
                logits_processor=LogitsProcessorList([PerRequestSampler([r.seed for r in requests], sampling)]),
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
