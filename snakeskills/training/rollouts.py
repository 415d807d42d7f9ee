"""GRPO's rollouts through the project's own decoding loop: GRPO's completions are sampled by the hf backend's
loop (``HFBackend``: a seed per completion, finished rows leave the batch, a shared prompt opening computed once) on
the policy's current weights, and handed to TRL's ``GRPOTrainer`` through ``rollout_func`` with each token's
log-probability.

A LoRA policy is sampled from a folded copy (``FoldedPolicy``: W + the adapter's update, refreshed before each
sampling), so decoding runs plain matrix products; the trainer's weights are never merged in place (rounding would
drift the frozen weights).

Completion ``index`` at optimizer step ``step`` has the seed ``row_seed(seed, "grpo/<step>/<index>")``, so a
resumed run samples what the uninterrupted one did."""

from __future__ import annotations

import logging

from snakeskills.backends import sampling_params
from snakeskills.backends.types import GenerationRequest
from snakeskills.errors import SnakeskillsError
from snakeskills.generation.model_job import row_seed
from snakeskills.settings.generation import Sampling
from snakeskills.training.grpo_rewards import TRL_TOOL_MASK

logger = logging.getLogger(__name__)


def rollout_seed(seed: int, step: int, index: int) -> int:
    """The seed of completion ``index`` (its place in the step's batch, across processes) of the sampling at
    optimizer step ``step``."""
    return row_seed(seed, f"grpo/{step}/{index}")


def foldable(model) -> bool:
    """Whether ``model`` is a peft model with plain LoRA adapters only (no DoRA, no modules saved whole), whose
    weights a folded copy can carry."""
    config = getattr(model, "peft_config", {}).get("default")
    if config is None or getattr(config, "peft_type", None) is None or config.peft_type.value != "LORA":
        return False
    return not getattr(config, "use_dora", False) and not getattr(config, "modules_to_save", None)


class FoldedPolicy:
    """A copy of a LoRA policy with its adapter folded into the weights it adapts (``refresh`` before each use)."""

    PREFIX = "base_model.model."

    def __init__(self, model):
        import copy

        from peft.tuners.lora import LoraLayer

        self.source = model
        self.layers = {
            name.removeprefix(self.PREFIX): module
            for name, module in model.named_modules()
            if isinstance(module, LoraLayer)
        }
        self.model = copy.deepcopy(model).merge_and_unload()
        # a forward set on the instance (TRL's fused LM head, ``trl.trainer.utils.add_fused_lm_head``) closes over
        # the source model's own bound forward, which the deep copy keeps: the copy would decode through the source
        # (its adapter unfolded, in training mode, dropout on). Decoding needs no fused head: the class's forward.
        self.model.__dict__.pop("forward", None)
        self.model.eval()
        self.model.requires_grad_(False)
        modules = dict(self.model.named_modules())
        missing = sorted(set(self.layers) - set(modules))
        if missing:
            raise SnakeskillsError(f"GRPO rollouts: the folded copy has no module {missing[0]!r} of the adapter")
        self.targets = {name: modules[name] for name in self.layers}

    def refresh(self):
        """The copy, its adapted weights set to the source's frozen weight + the adapter's update now."""
        import torch

        with torch.no_grad():
            for name, layer in self.layers.items():
                merged = layer.base_layer.weight + layer.get_delta_weight("default")
                self.targets[name].weight.copy_(merged)
        return self.model


class BackendRollouts:
    """TRL's ``rollout_func``: the completions of a batch of prompts (each prompt once per completion, as the trainer's
    sampler repeats it), sampled by the hf backend's loop with a seed per completion."""

    def __init__(
        self, prompt_token_ids: dict[str, list[int]], sampling: Sampling, *, seed: int, batch_size: int, tools=None
    ):
        self.prompt_token_ids = prompt_token_ids
        self.sampling = sampling_params(sampling)  # the prompts are token ids: no template's stops
        self.seed, self.batch_size = seed, batch_size
        self.tools = tools  # a tools.loop.ToolUse: completions call the tool between turns
        self.backend = self.folded = None
        self.calls = 0  # samplings done (a test reads it)
        self.completions = self.mismatches = 0  # tools: completions, and those whose ids decode to other text

    def _backend(self, model, tokenizer):
        """The hf backend over the policy's weights now: its folded copy (LoRA) or the policy itself."""
        from snakeskills.backends.hf import HFBackend

        if self.backend is None:
            if foldable(model):
                self.folded = FoldedPolicy(model)
                generating = self.folded.model
            else:
                generating = model
            self.backend = HFBackend.around(generating, tokenizer, batch_size=self.batch_size)
            if self.tools is not None:
                from snakeskills.tools.loop import ToolLoop

                self.backend = ToolLoop(self.backend, self.tools)
            logger.info(
                "GRPO rollouts: the hf backend's decoding loop on %s",
                "a copy of the policy with its LoRA adapter folded in" if self.folded else "the policy",
            )
        if self.folded is not None:
            self.folded.refresh()
        return self.backend

    def __call__(self, prompts: list[str], trainer) -> dict:
        model = trainer.accelerator.unwrap_model(trainer.model)
        backend = self._backend(model, trainer.processing_class)
        step, first = trainer.state.global_step, trainer.accelerator.process_index * len(prompts)
        requests = [
            GenerationRequest(
                seed=rollout_seed(self.seed, step, first + index), prompt_token_ids=tuple(self.prompt_token_ids[text])
            )
            for index, text in enumerate(prompts)
        ]
        training = backend.model.training
        backend.model.eval()  # no dropout while sampling: the completions are the policy's
        try:
            results = backend.generate(requests, self.sampling)
        finally:
            backend.model.train(training)
        failed = [result for result in results if result.token_ids is None]
        if failed:
            raise SnakeskillsError(f"GRPO rollout: {failed[0].error}")
        self.calls += 1
        output = {
            "prompt_ids": [list(request.prompt_token_ids) for request in requests],
            "completion_ids": [list(result.token_ids) for result in results],
            "logprobs": [list(result.logprobs) for result in results],
        }
        # the trainer's old-policy forward, where TRL runs one, takes these instead (``sampled_logps``)
        trainer.sampled = (output["completion_ids"], output["logprobs"], getattr(model, "active_adapter", None))
        if self.tools is not None:
            self._check_ids(backend, results)
            # TRL masks the tokens a tool appended out of the loss (``TRL_TOOL_MASK`` 0) and hands the other fields to
            # the reward functions: the transcript as the judge reads it, and the tool use a reward may price
            output[TRL_TOOL_MASK] = [list(result.model_token_mask) for result in results]
            output["model_tokens"] = [result.num_generated_tokens for result in results]
            output["transcript"] = [result.generation for result in results]
            output["tool_output_spans"] = [result.tools["tool_output_spans"] for result in results]
            output["tool_calls"] = [result.tools["code_rounds_executed"] for result in results]
            output["tool_seconds"] = [result.tools["code_execution_time"] for result in results]
            output["tool_cost"] = [result.tools.get("cost", 0.0) for result in results]
            output["tool_call_log"] = [result.tools["tool_call_log"] for result in results]
        return output

    def _check_ids(self, loop, results) -> None:
        """Count (and log) the completions whose ids, which TRL trains on, decode to other text than the transcript
        the reward judges (``tools.loop.ids_match_text``): 0 by design."""
        from snakeskills.tools.loop import ids_match_text

        ends = tuple(tags.code_end for tags in loop.tags.values())
        eos = loop.eos_token_ids
        wrong = sum(not ids_match_text(loop.tokenizer, result, ends, eos) for result in results)
        self.completions += len(results)
        self.mismatches += wrong
        log = logger.warning if wrong else logger.info
        log(
            "GRPO rollouts with tools: %d of %d completions so far have ids that decode to other text than the "
            "judged transcript",
            self.mismatches,
            self.completions,
        )
