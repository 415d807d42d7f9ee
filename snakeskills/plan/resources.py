"""GPUs and processes of the training job, decided from the config and whether jobs run where there are GPUs."""

from __future__ import annotations

from snakeskills.backends.specs import backend_spec


def training_gpus(config: dict, gpus_available: bool) -> int:
    """GPUs of the sft job: sft.gpus, else one where the job's node has GPUs and the run is not set to CPU
    (hf generation on device cpu), else none."""
    sft, generation = config["sft"], config["generation"]
    if sft["gpus"] is not None:
        return sft["gpus"]
    if backend_spec(generation).cpu_only(generation):
        return 0
    return 1 if gpus_available else 0


def training_processes(config: dict, gpus_available: bool) -> int:
    """Training processes of the sft job: sft.processes, else one per GPU it has (one on CPU)."""
    return config["sft"]["processes"] or max(training_gpus(config, gpus_available), 1)
