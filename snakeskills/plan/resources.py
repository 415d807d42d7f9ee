"""GPUs and processes of the training job, decided from the config and whether jobs run where there are GPUs."""

from __future__ import annotations

from snakeskills.backends.specs import backend_spec
from snakeskills.settings.generation import Generation


def training_gpus(config: dict, gpus_available: bool) -> int:
    """GPUs of a training job: training.gpus, else one where the job's node has GPUs and the run is not set to CPU
    (hf generation on device cpu), else none."""
    training, generation = config["training"], Generation.from_dict(config["generation"], "generation")
    if training["gpus"] is not None:
        return training["gpus"]
    if backend_spec(generation).cpu_only(generation):
        return 0
    return 1 if gpus_available else 0


def training_processes(config: dict, gpus_available: bool) -> int:
    """Processes of a training job: training.processes, else one per GPU it has (one on CPU)."""
    return config["training"]["processes"] or max(training_gpus(config, gpus_available), 1)
