"""Generation backends behind one small interface, chosen by config (``generation.backend``).

A backend is built once per process from its config and then answers ``generate(requests)``
for batches of prompts. Each request carries its own seed, so a row's sample does not depend on
which other rows share its batch or chunk (the same contract as vLLM's per-request ``seed``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from snakeskills.backends.types import (
    GenerationRequest,
    GenerationResult,
    SamplingParams,
    context_overflow,
    truncate_at_stop,
)
from snakeskills.errors import SnakeskillsError

if TYPE_CHECKING:
    from snakeskills.settings.generation import Generation, Sampling

__all__ = [
    "GenerationRequest",
    "GenerationResult",
    "SamplingParams",
    "backend_from_config",
    "build_backend",
    "build_request",
    "context_overflow",
    "sampling_params",
    "truncate_at_stop",
]


def build_backend(name: str, **options):
    """Instantiate the backend ``name``: one of ``specs.BACKENDS``, or "shared" (an hf or vllm model loaded once
    per node by a model server, generation.share_model)."""
    from snakeskills.backends.specs import BACKENDS

    if name == "shared":
        from snakeskills.backends.model_server import SharedModelBackend

        return SharedModelBackend(**options)
    if name not in BACKENDS:
        raise SnakeskillsError(f"generation.backend: unknown backend {name!r}; known: {sorted(BACKENDS)}")
    return BACKENDS[name].build(**options)


def sampling_params(sampling: Sampling, prompt: dict | None = None) -> SamplingParams:
    """A ``sampling`` section (a generation section's, GRPO's) -> ``SamplingParams``, plus the prompt template's
    stops (``prompt``; None: none, for prompts given as token ids): the one road from a sampling section to the
    backends."""
    return SamplingParams(
        temperature=sampling.temperature,
        top_p=sampling.top_p,
        top_k=sampling.top_k,
        max_new_tokens=sampling.max_new_tokens,
        stop=tuple(dict.fromkeys([*sampling.stop, *(prompt["stop"] if prompt is not None else [])])),
    )


def backend_from_config(
    generation: Generation,
    model: dict,
    *,
    model_path: str,
    adapter_path: str | None,
    threads: int,
    chat_template: bool,
    chat_template_kwargs: dict,
    functions: list | None = None,
    template: str | None = None,
):
    """Build the backend a ``generation`` config section names, for ``model`` (path, dtype, trust_remote_code).

    ``chat_template`` / ``chat_template_kwargs`` (``prompts.chat_format``) reach the backends that render
    messages themselves: the shared model server, and an openai chat server (``chat_template_kwargs``); with tools
    through the chat template, so do ``functions`` and ``template`` (the shared model server renders them).

    With ``generation.share_model.enabled`` (hf, vllm), the model is loaded by a model server shared by
    the jobs on this node (the "shared" backend, ``snakeskills.backends.model_server``) instead of by this
    process.
    """
    from snakeskills.backends.specs import backend_spec

    name = generation.backend
    spec = backend_spec(generation)
    if adapter_path is not None and not spec.supports_adapters:
        raise SnakeskillsError(
            f"generation.backend: the {name} backend cannot load LoRA adapters, so it cannot evaluate tuned "
            "models; use hf or vllm for generation, and openai for API models, a teacher or the LLM judge"
        )
    if not spec.needs_local_model:
        return build_backend(name, **getattr(generation, name).to_dict(), chat_template_kwargs=chat_template_kwargs)
    share = generation.share_model
    if not share.enabled:
        return build_backend(name, **local_backend_options(generation, model, model_path, adapter_path, threads))
    import os

    from snakeskills.runtime_folder import default_directory

    server_threads = share.threads or len(os.sched_getaffinity(0))
    options = local_backend_options(generation, model, model_path, adapter_path, server_threads)
    # absolute: a server outlives the job that started it and is found by its options, so the same relative path
    # in two working directories (two runs of one experiment) must not name one server
    for key in ("model_path", "adapter_path"):
        if options[key] is not None:
            options[key] = os.path.abspath(options[key])
    from snakeskills.backends.gpus import server_candidates

    return build_backend(
        "shared",
        backend=name,
        gpus=spec.job_gpus(generation, bool(server_candidates())),  # the server's, as the backend counts them
        options=options,
        chat_template=chat_template,
        chat_template_kwargs=chat_template_kwargs,
        functions=functions,
        template=template,
        directory=share.directory or default_directory(),
        idle_seconds=share.idle_seconds,
        jobs_per_load=share.jobs_per_load,
    )


def local_backend_options(generation: Generation, model: dict, model_path: str, adapter_path: str | None, threads: int):
    common = {
        "model_path": model_path,
        "adapter_path": adapter_path,
        "dtype": model["dtype"],
        "trust_remote_code": model["trust_remote_code"],
    }
    if generation.backend == "hf":
        return {
            **common,
            "device": generation.device,
            "batch_size": generation.batch_size,
            "threads": threads,
            "compile": generation.compile,
            "share_prefix": generation.share_prefix,
        }
    # vllm.python is where the job runs (snakeskills.backends.vllm_env), not an option of the engine
    options = {key: value for key, value in generation.vllm.to_dict().items() if key != "python"}
    return {**common, **options}


def build_request(backend, prompt: dict, record: dict, seed: int) -> GenerationRequest:
    """The request for one record, in the form ``backend.takes`` names: "token_ids", "messages" or "text"."""
    from snakeskills.prompts import build_messages, format_prompt, model_input_ids

    if backend.takes == "token_ids":
        return GenerationRequest(seed=seed, prompt_token_ids=tuple(model_input_ids(prompt, record, backend.tokenizer)))
    if backend.takes == "messages":
        return GenerationRequest(seed=seed, messages=tuple(build_messages(prompt, record)))
    return GenerationRequest(seed=seed, prompt=format_prompt(prompt, record, backend.tokenizer))
