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

from snakeskills.backends import GenerationRequest, GenerationResult, SamplingParams, truncate_at_stop
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
    tokenizer.padding_side = "left"
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


class HFBackend:
    name = "hf"

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
        eos = self.model.generation_config.eos_token_id
        self.eos_token_ids = {eos} if isinstance(eos, int) else set(eos or [])
        self.eos_token_ids.add(self.tokenizer.eos_token_id)
        logger.info(
            "loaded model %s%s on %s", model_path, f" + adapter {adapter_path}" if adapter_path else "", self.device
        )

    def generate(self, requests: list[GenerationRequest], sampling: SamplingParams) -> list[GenerationResult]:
        results = []
        for start in range(0, len(requests), self.batch_size):
            results.extend(self._generate_batch(requests[start : start + self.batch_size], sampling))
        return results

    def _generate_batch(self, requests: list[GenerationRequest], sampling: SamplingParams) -> list[GenerationResult]:
        import torch
        from transformers import GenerationConfig, LogitsProcessorList

        encoded = self.tokenizer(
            [request.prompt for request in requests], return_tensors="pt", padding=True, add_special_tokens=True
        ).to(self.device)
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
            )
        new_tokens = output[:, encoded["input_ids"].shape[1] :].tolist()
        results = []
        for tokens in new_tokens:
            length = len(tokens)
            hit_eos = False
            for index, token in enumerate(tokens):
                if token in self.eos_token_ids:
                    length, hit_eos = index + 1, True
                    break
            text = self.tokenizer.decode(tokens[:length], skip_special_tokens=True)
            text, hit_stop = truncate_at_stop(text, sampling.stop)
            results.append(
                GenerationResult(
                    generation=text,
                    num_generated_tokens=length,
                    finish_reason="stop" if hit_eos or hit_stop else "length",
                )
            )
        return results
