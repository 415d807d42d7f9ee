"""Which GPUs a job runs on: the ones SLURM gave it, or, on a workstation, ones no other process of ours holds.

Rules declare their GPUs (``resources: gpu=N``, rules/common.smk) so that ``--resources gpu=K`` bounds them;
Snakemake counts but does not assign devices. On SLURM the allocation's ``CUDA_VISIBLE_DEVICES`` stays. Elsewhere a
job claims N GPUs with one lock file per device (in the user's runtime folder) and sets ``CUDA_VISIBLE_DEVICES``
before CUDA starts; a job declaring none sees none (and keeps the node's GPUs, ``server_candidates``, for a server).

| process | claims | holds the claim until |
| --- | --- | --- |
| a job that loads a model itself (training; generate with share_model off) | its rule's gpu count | it ends |
| a job served by a shared model server (generation.share_model, hf/vllm) | none (declares gpu=0) | - |
| a shared model server | its backend's GPUs (hf: 1, vllm: tensor_parallel_size, device cpu: 0) | it exits |

A server's claim is taken by its starting job (``claim_server_gpus``, no start timeout while it waits) and handed
over as the open lock files. A job needing a server's GPU waits, asking it to exit (``request_release``: it finishes
its jobs and frees claim and memory together). Snakemake does not count a server's GPU. On SLURM nothing is claimed."""

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


# the node's GPUs this job hid from itself (it declared none: claim_gpus 0), the ones a server it starts may claim
_hidden: list[str] = []


def slurm_allocation() -> bool:
    """Whether this process runs in a SLURM job whose allocation set its GPUs (nothing is claimed there)."""
    return bool(os.environ.get("SLURM_JOB_ID")) and "CUDA_VISIBLE_DEVICES" in os.environ


def own_claims() -> list[str]:
    """The GPUs this process claimed (``claim_gpus``) and still holds."""
    names = [Path(lock.name).name for lock in _held if not lock.closed]
    return [name.removeprefix("gpu-").removesuffix(".lock") for name in names if ".server-" not in name]


def hidden_node_gpus() -> list[str] | None:
    """The node's GPUs this job hid from itself (it declared none: ``claim_gpus`` 0), while they stay hidden; else
    None."""
    return list(_hidden) if _hidden and os.environ.get("CUDA_VISIBLE_DEVICES") == "" else None


def server_candidates() -> list[str]:
    """The node's GPUs a model server started by this job may claim: those the job hid from itself (it declared
    none), else the ones it sees."""
    hidden = hidden_node_gpus()
    return node_gpus() if hidden is None else hidden


def claim_gpus(
    count: int,
    directory: str | Path,
    poll_seconds: float = 1.0,
    pinned: int | None = None,
    *,
    free_server_memory: bool = True,
    keep: str | None = None,
) -> list[str]:
    """Claim ``count`` GPUs for this job and make them the only ones it sees; returns them.

    ``pinned``: the config names one device (hf ``device: cuda:N``, N an index among the visible GPUs): that
    GPU's claim is taken, and the job keeps seeing the devices it saw, so ``cuda:N`` still names it.

    In a SLURM job whose allocation set ``CUDA_VISIBLE_DEVICES``, or on a machine without GPUs, nothing
    changes. ``count`` 0 hides the node's GPUs from the job (``server_candidates`` still names them). Otherwise
    waits until ``count`` of the node's GPUs are free of other claims, meanwhile asking the model servers that
    hold them (but ``keep``'s; none unless ``free_server_memory``) to exit (``request_release``).
    """
    if slurm_allocation():
        return node_gpus()
    devices = node_gpus()
    if not devices:
        return []
    if count == 0:
        _hidden[:] = devices
        os.environ["CUDA_VISIBLE_DEVICES"] = ""
        return []
    locks = wait_for_claims(
        count, devices, directory, poll_seconds, pinned, keep=keep, free_server_memory=free_server_memory
    )
    _held.extend(locks.values())
    chosen = list(locks)
    if pinned is None:
        os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(chosen)
    logger.info("claimed GPU(s) %s of %s", ",".join(chosen), ",".join(devices))
    return chosen


def wait_for_claims(
    count: int,
    devices: list[str],
    directory: str | Path,
    poll_seconds: float = 1.0,
    pinned: int | None = None,
    *,
    keep: str | None = None,
    free_server_memory: bool = True,
) -> dict:
    """Take the claims of ``count`` of ``devices`` (the ``pinned`` one's), waiting for them; returns each claimed
    device's open lock file (closing every copy of it ends the claim). While it waits it asks the model servers on
    those devices (but ``keep``'s) to exit, unless not ``free_server_memory``."""
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
    requested: list[Path] = []
    while True:
        claimed = {}
        for device in candidates:
            lock = open(folder / f"gpu-{device}.lock", "a")  # noqa: SIM115 - held open for the claim's life
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                lock.close()
                continue
            claimed[device] = lock
            if len(claimed) == count:
                break
        if len(claimed) == count:
            for request in requested:  # the servers of GPUs it did not take may stay
                request.unlink(missing_ok=True)
            for device in claimed:
                remove_dead_server_marks(folder, device)
            return claimed
        for lock in claimed.values():
            lock.close()
        if free_server_memory:
            requested.extend(request_release(folder, [d for d in candidates if d not in claimed], keep))
        if time.monotonic() - waited_since > 60:
            logger.info(
                "waiting for %d free GPU(s) of %s (others are claimed by jobs or model servers)", count, devices
            )
            waited_since = time.monotonic()
        time.sleep(poll_seconds)


def claims_directory() -> Path:
    """The claims' lock files: in this user's private runtime folder (snakeskills.runtime_folder)."""
    folder = private_directory(default_directory()) / "gpus"
    folder.mkdir(exist_ok=True, mode=0o700)
    return folder


def claim_job_gpus(count: int, pinned: int | None = None, *, free_server_memory: bool = True) -> list[str]:
    """``claim_gpus`` in ``claims_directory``: the job's own GPUs (its rule's gpu resource). While it waits for
    GPUs held by model servers it asks them to exit, unless not ``free_server_memory`` (a job that will use a
    shared model server: one of its own model may hold them)."""
    return claim_gpus(count, claims_directory(), pinned=pinned, free_server_memory=free_server_memory)


class ServerGpus(NamedTuple):
    """The GPUs a model server runs on: ``devices``, the ones it holds (and marks); ``visible``, the
    ``CUDA_VISIBLE_DEVICES`` it starts with (None: the starting job's); ``locks``, the open claim files it is
    handed (its claim lasts while any copy is open)."""

    devices: list[str]
    visible: str | None
    locks: list


def claim_server_gpus(count: int, key: str, pinned: int | None = None, poll_seconds: float = 1.0) -> ServerGpus:
    """Claim the GPUs of a model server (``key``) this job is about to start, waiting for them (other servers
    on them are asked to exit; the jobs and servers of ``key`` are not).

    In a SLURM allocation the server runs on its GPUs. A job that claimed GPUs itself (it declared some) hands
    its own to the server. Otherwise ``count`` of the node's GPUs (``server_candidates``) are claimed here, for
    the server: the caller passes ``locks`` to it and closes its own copies."""
    if slurm_allocation():
        return ServerGpus(node_gpus(), None, [])
    own = own_claims()
    if own:
        return ServerGpus(own, None, [])
    devices = server_candidates()
    if count == 0 or not devices:
        return ServerGpus([], "", [])
    locks = wait_for_claims(count, devices, claims_directory(), poll_seconds, pinned, keep=key)
    logger.info("GPU(s) %s of %s claimed for the model server this job starts", ",".join(locks), ",".join(devices))
    visible = ",".join(devices) if pinned is not None else ",".join(locks)
    return ServerGpus(list(locks), visible, list(locks.values()))


# A model server holds its GPUs' claims (above) and marks each of them with a lock file of its own
# (gpu-<device>.server-<key>.lock, held while it runs). A process that waits for such a GPU asks the server to
# exit with a .release file beside it: the server takes no new jobs and exits once its jobs are done.


def _server_lock_name(device: str, key: str) -> str:
    return f"gpu-{device}.server-{key}.lock"


def mark_server_gpus(key: str, devices: list[str]) -> list[Path]:
    """In a model server: mark the GPUs it holds (``devices``) as its own, for its lifetime (not in a SLURM job,
    whose servers end with it). Returns the request files whose appearance asks it to exit."""
    if os.environ.get("SLURM_JOB_ID"):
        return []
    folder, requests = claims_directory(), []
    for device in devices:
        lock_path = folder / _server_lock_name(device, key)
        lock = open(lock_path, "a")  # noqa: SIM115 - held open for the process's life
        fcntl.flock(lock, fcntl.LOCK_SH)
        _held.append(lock)
        request = lock_path.with_suffix(".release")
        request.unlink(missing_ok=True)  # an exited server's of the same key; a waiter still waiting asks again
        requests.append(request)
    return requests


def request_release(folder: Path, devices: list[str], keep: str | None = None) -> list[Path]:
    """Ask the model servers (but ``keep``'s) running on these GPUs to exit; returns the requests made."""
    made = []
    for device in devices:
        for lock_path in sorted(folder.glob(_server_lock_name(device, "*"))):
            if keep is not None and lock_path.name == _server_lock_name(device, keep):
                continue
            request = lock_path.with_suffix(".release")
            if not request.exists():
                request.touch()
                made.append(request)
                logger.info("GPU %s: a model server holds it; asked it to exit once its jobs are done", device)
    return made


def remove_dead_server_marks(folder: Path, device: str) -> None:
    """Remove the marks (and requests) of servers that have exited on a GPU just claimed: a running one would
    still hold the claim."""
    for lock_path in sorted(folder.glob(_server_lock_name(device, "*"))):
        with open(lock_path, "a") as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue  # a server of an older release, or one that does not hold the claim: left alone
            lock_path.with_suffix(".release").unlink(missing_ok=True)
            lock_path.unlink(missing_ok=True)
