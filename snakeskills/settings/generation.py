"""How a model samples: a ``generation`` section (the student's, the teacher's, the LLM judge's, a writer's, a
model tool's) and its ``sampling``."""

from __future__ import annotations

from dataclasses import dataclass

from snakeskills.settings.section import Section, optional


@dataclass(frozen=True)
class Sampling(Section):
    SCHEMA = "#/definitions/generation/properties/sampling"

    temperature: float
    top_p: float
    top_k: int
    max_new_tokens: int
    stop: list[str]


@dataclass(frozen=True)
class VllmOptions(Section):
    SCHEMA = "#/definitions/generation/properties/vllm"

    tensor_parallel_size: int
    gpu_memory_utilization: float
    max_model_len: int | None
    max_lora_rank: int
    enforce_eager: bool
    kv_cache_gb: float | None
    python: str | None


@dataclass(frozen=True)
class ShareModel(Section):
    SCHEMA = "#/definitions/generation/properties/share_model"

    enabled: bool
    jobs_per_load: int
    idle_seconds: float
    threads: int
    directory: str | None


@dataclass(frozen=True)
class OpenAIServer(Section):
    SCHEMA = "#/definitions/generation/properties/openai"

    base_url: str
    model: str
    api: str
    api_key_env: str | None
    max_concurrency: int
    max_retries: int
    retry_initial_seconds: float
    request_timeout_seconds: float
    tokenizer_path: str | None


@dataclass(frozen=True)
class Generation(Section):
    SCHEMA = "#/definitions/generation"

    backend: str
    batch_size: int
    device: str
    compile: bool
    share_prefix: bool
    rows_per_flush: int
    parse_reasoning: bool
    end_reasoning_string: str
    vllm: VllmOptions
    share_model: ShareModel
    sampling: Sampling
    openai: OpenAIServer | None = optional()
