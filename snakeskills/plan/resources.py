"""GPUs, processes and nodes of the training job, decided from the config and whether jobs run where there are GPUs,
and what a job across several nodes asks SLURM for."""

from __future__ import annotations

from snakeskills.backends.specs import backend_spec
from snakeskills.settings.generation import Generation


def training_gpus(config: dict, gpus_available: bool) -> int:
    """GPUs of a training job on each of its nodes: training.gpus, else one where the job's node has GPUs and the run
    is not set to CPU (hf generation on device cpu), else none."""
    training, generation = config["training"], Generation.from_dict(config["generation"], "generation")
    if training["gpus"] is not None:
        return training["gpus"]
    if backend_spec(generation).cpu_only(generation):
        return 0
    return 1 if gpus_available else 0


def training_processes(config: dict, gpus_available: bool) -> int:
    """Processes of a training job on each of its nodes: training.processes, else one per GPU (one on CPU)."""
    return config["training"]["processes"] or max(training_gpus(config, gpus_available), 1)


def training_world_size(config: dict, gpus_available: bool) -> int:
    """The training processes of a round on all its nodes (each batch is split over them)."""
    return config["training"]["nodes"] * training_processes(config, gpus_available)


# the executors that run a training job across several nodes: SLURM's (submitting, and inside a job)
MULTI_NODE_EXECUTORS = ("slurm", "slurm-jobstep")


def training_gpu_resource(config: dict, gpus_available: bool) -> int:
    """The gpu resource of a training job: its GPUs on one node; across several nodes none, as their GPUs are asked
    for each node (``training_nodes_resources``: the plugin turns gpu into ``--gpus``, a count for the whole job)."""
    return training_gpus(config, gpus_available) if config["training"]["nodes"] == 1 else 0


def training_nodes_resources(config: dict, gpus_available: bool) -> dict:
    """What a training job across ``training.nodes`` nodes asks snakemake-executor-plugin-slurm for, beside its memory
    (``--mem``, each node's) and runtime; none on one node.

    ``nodes`` (``--nodes``) and ``tasks`` one per node (``--ntasks``: the job's script starts one launcher on each
    with ``srun``); ``mpi`` so that the job runs in its batch script on the first node, not inside a one-task step
    (snakemake-executor-plugin-slurm-jobstep wraps every other job in ``srun -n1``); ``tasks_per_gpu`` 0, without
    which the plugin turns ``tasks`` into ``--ntasks-per-gpu`` (the trap of its issues 316 and 459: a job started
    once per GPU); ``gres`` the GPUs of each node (``--gres=gpu:G``)."""
    nodes = config["training"]["nodes"]
    if nodes == 1:
        return {}
    resources = {"nodes": nodes, "tasks": nodes, "mpi": "srun", "tasks_per_gpu": 0}
    gpus = training_gpus(config, gpus_available)
    return {**resources, "gres": f"gpu:{gpus}"} if gpus else resources
