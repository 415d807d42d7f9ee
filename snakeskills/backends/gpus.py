"""Which GPUs a job runs on: the ones SLURM gave it, or, on a workstation, ones no other job of ours holds.

Rules that use GPUs declare how many (``resources: gpu=N``, see rules/common.smk), so that
``snakemake --resources gpu=K`` never runs more than K GPUs' worth of jobs at once. Snakemake counts but does
not assign devices. On SLURM the allocation sets ``CUDA_VISIBLE_DEVICES`` and that stays. Elsewhere a job
claims N of the node's GPUs with one lock file per device (in the user's private model server folder) and
sets ``CUDA_VISIBLE_DEVICES`` to them before CUDA starts, so each job sees only its own devices; a job that
declares none sees none. A claim ends with the job's process. A shared model server (generation.share_model)
runs on its starting job's GPUs and keeps their memory until it exits; jobs of its model that claim those GPUs
next reuse it (its key holds the visible devices), and any other job that claims one asks it to exit and waits
for its memory (``free_idle_servers``).
"""

from __future__ import annotations

import fcntl
import inspect
import logging
import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import NamedTuple

from snakeskills.errors import SnakeskillsError
from snakeskills.runtime_folder import default_directory, private_directory

logger = logging.getLogger(__name__)

# lock files held by this process: kept open for its lifetime (closing one releases the claim)
_held: list = []


def node_gpus() -> list[str]:
    """The GPUs this process may use: ``CUDA_VISIBLE_DEVICES`` when set, else every GPU nvidia-smi lists."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return [device.strip() for device in visible.split(",") if device.strip() not in ("", "-1")]
    if shutil.which("nvidia-smi") is None:
        return []
    try:
        listing = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return listed_devices(listing)


def listed_devices(listing: str) -> list[str]:
    """The devices of an ``nvidia-smi -L`` listing as ``CUDA_VISIBLE_DEVICES`` names them: a GPU's index, or,
    for a GPU split into MIG instances, each instance's UUID (CUDA sees the instances, not the GPU)."""
    devices: list[list[str]] = []  # per GPU: its index, then its MIG instances' UUIDs
    for line in listing.splitlines():
        if line.startswith("GPU "):
            devices.append([str(len(devices))])
        elif line.strip().startswith("MIG ") and devices and "(UUID: " in line:
            devices[-1].append(line.split("(UUID: ", 1)[1].rstrip(")").strip())
    return [device for gpu in devices for device in (gpu[1:] or gpu[:1])]


class Executor(NamedTuple):
    """An executor of Snakemake's: its name (``--executor``) and whether it runs the jobs on this machine (local,
    dryrun, touch) or elsewhere (slurm, and slurm-jobstep inside a SLURM job; any cluster's or cloud's)."""

    name: str
    local: bool


# the functions of Snakemake whose local `executor_plugin` is the executor a run was started with
_EXECUTOR_RECORDS = {("snakemake.cli", "args_to_api"), ("snakemake.api", "execute_workflow")}


def started_executor() -> Executor | None:
    """The executor this Snakemake process was started with (``--executor``, or a profile's ``executor:`` as in
    profiles/slurm), as Snakemake itself records it; None outside Snakemake.

    ``workflow.executor_plugin`` is no such record: it is set only once the Snakefile has been read, and in a dry
    run (``-n``) it is Snakemake's ``dryrun`` executor. The executor chosen is the one Snakemake validates the run
    against, the dry run's included (Snakemake 9.27 and later; before, a dry run replaced it by ``dryrun``): the
    ``executor_plugin`` of ``snakemake.cli.args_to_api`` (the command line with its profiles, set before the
    Snakefile is read) and, for a workflow run through the API, of ``snakemake.api.DAGApi.execute_workflow``.
    Both are on the stack of the thread that reads the Snakefile and builds the jobs; the innermost is read."""
    frame = inspect.currentframe()
    while frame is not None:
        if (frame.f_globals.get("__name__"), frame.f_code.co_name) in _EXECUTOR_RECORDS:
            plugin = frame.f_locals.get("executor_plugin")
            if plugin is not None:
                return Executor(plugin.name, plugin.common_settings.local_exec)
        frame = frame.f_back
    return None


def cluster_run(executor: Executor | None) -> bool:
    """Whether Snakemake was started to run the jobs elsewhere (``--profile slurm``: its ``executor: slurm``)."""
    return executor is not None and not executor.local


def planning_for_gpu_nodes(executor: Executor | None = None) -> bool:
    """Whether the jobs planned here will have GPUs, as far as the planner can tell (hf ``device: auto`` then asks
    for one, and a config key that names a GPU device is accepted).

    ``executor``: the one Snakemake was started with (``started_executor``). With a cluster's executor
    (``--profile slurm``) the jobs run on the cluster's nodes, which have GPUs: the plan is the cluster's
    wherever it is made, a dry run on a laptop without ``sbatch`` included. A local run: this node has GPUs,
    or it is a SLURM submit host (``sbatch`` on PATH), whose compute nodes do."""
    if cluster_run(executor):
        return True
    return bool(node_gpus()) or shutil.which("sbatch") is not None


def claim_gpus(count: int, directory: str | Path, poll_seconds: float = 1.0, pinned: int | None = None) -> list[str]:
    """Claim ``count`` GPUs for this job and make them the only ones it sees; returns them.

    ``pinned``: the config names one device (hf ``device: cuda:N``, N an index among the visible GPUs): that
    GPU's claim is taken, and the job keeps seeing the devices it saw, so ``cuda:N`` still names it.

    In a SLURM job whose allocation set ``CUDA_VISIBLE_DEVICES``, or on a machine without GPUs, nothing
    changes. ``count`` 0 hides the node's GPUs from the job. Otherwise waits until ``count`` of the node's
    GPUs are free of other jobs' claims (under ``--resources gpu=K``, K at most the node's GPUs, the wait
    is short or none).
    """
    if os.environ.get("SLURM_JOB_ID") and "CUDA_VISIBLE_DEVICES" in os.environ:
        return node_gpus()
    devices = node_gpus()
    if not devices:
        return []
    if count == 0:
        os.environ["CUDA_VISIBLE_DEVICES"] = ""
        return []
    if count > len(devices):
        raise SnakeskillsError(
            f"this job declares gpu={count} but the node has {len(devices)} GPU(s) ({','.join(devices)}): "
            "lower generation.vllm.tensor_parallel_size or run it where more GPUs are visible"
        )
    candidates = devices
    if pinned is not None:
        if pinned >= len(devices):
            raise SnakeskillsError(
                f"generation.device is cuda:{pinned} but the node has {len(devices)} GPU(s) ({','.join(devices)})"
            )
        candidates = [devices[pinned]]
    folder = Path(directory)
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    waited_since = time.monotonic()
    while True:
        claimed = []
        for device in candidates:
            lock = open(folder / f"gpu-{device}.lock", "a")  # noqa: SIM115 - held open for the process's life
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                lock.close()
                continue
            claimed.append((device, lock))
            if len(claimed) == count:
                break
        if len(claimed) == count:
            _held.extend(lock for _, lock in claimed)
            chosen = [device for device, _ in claimed]
            if pinned is None:
                os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(chosen)
            logger.info("claimed GPU(s) %s of %s", ",".join(chosen), ",".join(devices))
            return chosen
        for _, lock in claimed:
            lock.close()
        if time.monotonic() - waited_since > 60:
            logger.info("waiting for %d free GPU(s) of %s (others are claimed by running jobs)", count, devices)
            waited_since = time.monotonic()
        time.sleep(poll_seconds)


def claims_directory() -> Path:
    """The claims' lock files: in this user's private runtime folder (snakeskills.runtime_folder)."""
    folder = private_directory(default_directory()) / "gpus"
    folder.mkdir(exist_ok=True, mode=0o700)
    return folder


def claim_job_gpus(count: int, pinned: int | None = None, *, free_server_memory: bool = True) -> list[str]:
    """``claim_gpus`` in ``claims_directory``; then, unless the job will use a shared model server
    (``free_server_memory`` false: the server it connects to does that), idle model servers still holding
    memory on the claimed GPUs exit before the job starts (``free_idle_servers``)."""
    devices = claim_gpus(count, claims_directory(), pinned=pinned)
    if free_server_memory:
        free_idle_servers(devices)
    return devices


# A model server runs on the GPUs of the job that started it and keeps their memory until it exits, which is
# after that job has ended and released its claim. It marks each GPU with a lock file of its own
# (gpu-<device>.server-<key>.lock, held while it runs). A job that claims such a GPU and will not use that
# server asks it to exit (a .release file beside the lock; an idle server exits within a second) and waits
# for its lock, that is for its memory.


def _server_lock_name(device: str, key: str) -> str:
    return f"gpu-{device}.server-{key}.lock"


def mark_server_gpus(key: str) -> list[Path]:
    """In a model server: mark the GPUs it sees as holding its memory, for its lifetime (not in a SLURM job, whose
    servers end with it). Returns the request files whose appearance asks it to exit."""
    if os.environ.get("SLURM_JOB_ID"):
        return []
    folder, requests = claims_directory(), []
    for device in node_gpus():
        lock_path = folder / _server_lock_name(device, key)
        lock = open(lock_path, "a")  # noqa: SIM115 - held open for the process's life
        fcntl.flock(lock, fcntl.LOCK_SH)
        _held.append(lock)
        requests.append(lock_path.with_suffix(".release"))
    return requests


def free_idle_servers(devices: list[str], keep: str | None = None) -> None:
    """Ask the model servers (but ``keep``'s) that hold memory on these GPUs to exit, and wait until they have.
    The caller holds the GPUs' claims, so no job is using those servers: they exit at once."""
    folder = claims_directory()
    for device in devices:
        for lock_path in sorted(folder.glob(_server_lock_name(device, "*"))):
            if keep is not None and lock_path.name == _server_lock_name(device, keep):
                continue
            with open(lock_path, "a") as lock:
                try:
                    fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    request = lock_path.with_suffix(".release")
                    request.touch()
                    logger.info("GPU %s: an idle model server holds its memory; waiting for it to exit", device)
                    started = time.monotonic()
                    fcntl.flock(lock, fcntl.LOCK_EX)  # released when the server process ends
                    request.unlink(missing_ok=True)
                    logger.info("GPU %s: the model server exited after %.1fs", device, time.monotonic() - started)
                lock_path.unlink(missing_ok=True)
