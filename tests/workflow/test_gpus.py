"""GPUs as a resource: rules declare them, jobs claim their own devices, and `--resources gpu=1` (which the
local profile sets on a machine with GPUs) runs GPU jobs one at a time.

This machine has no GPU. A stand-in `nvidia-smi` on PATH lists pretend GPUs: it is what the profile and the
jobs read to find a node's GPUs, and nothing here touches CUDA, so the scheduling and device claims are the
real ones."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from conftest import run_snakemake, shrunk_default_config, write_config
from without_slurm import stand_in_sbatch

from snakeskills.backends import gpus
from snakeskills.backends.gpus import Executor, claim_gpus, node_gpus, planning_for_gpu_nodes, started_executor
from snakeskills.errors import SnakeskillsError

RESULTS = "results/gpus"


@pytest.fixture(autouse=True)
def released_claims(monkeypatch):
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    yield
    for lock in gpus._held:
        lock.close()
    gpus._held.clear()


def fake_nvidia_smi(folder: Path, count: int) -> Path:
    """A folder with an `nvidia-smi` that lists ``count`` pretend GPUs as `nvidia-smi -L` does."""
    folder.mkdir(parents=True, exist_ok=True)
    lines = "".join(f'echo "GPU {index}: Pretend GPU (UUID: GPU-{index})"\n' for index in range(count))
    script = folder / "nvidia-smi"
    script.write_text(f"#!/bin/sh\n{lines}")
    script.chmod(0o755)
    return folder


def test_node_gpus_from_visible_devices_or_nvidia_smi(monkeypatch, tmp_path):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    assert node_gpus() == ["2", "3"]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert node_gpus() == []
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    monkeypatch.setenv("PATH", f"{fake_nvidia_smi(tmp_path / 'bin', 3)}:{os.environ['PATH']}")
    assert node_gpus() == ["0", "1", "2"]


def test_a_clusters_executor_plans_for_gpus_wherever_the_plan_is_made(monkeypatch, tmp_path):
    """Snakemake started with a cluster's executor (`--profile slurm`: slurm; slurm-jobstep in a SLURM job) plans
    the cluster's jobs, with their GPUs, on a machine without GPUs or sbatch; a local run (local, a dry run's
    dryrun, or outside Snakemake) plans for GPUs only where this node has some or sbatch submits to a cluster."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))  # no sbatch, no nvidia-smi
    assert planning_for_gpu_nodes(Executor("slurm", local=False))
    assert planning_for_gpu_nodes(Executor("slurm-jobstep", local=False))
    for executor in (Executor("local", local=True), Executor("dryrun", local=True), None):
        assert not planning_for_gpu_nodes(executor), executor
    stand_in_sbatch(tmp_path / "bin")
    assert planning_for_gpu_nodes(Executor("local", local=True)), "a SLURM submit host"
    (tmp_path / "bin" / "sbatch").unlink()
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    assert planning_for_gpu_nodes(Executor("local", local=True)), "this node's GPU"


def test_the_executor_is_the_one_snakemake_records_on_its_stack():
    """started_executor reads the executor plugin of Snakemake's command line (snakemake.cli.args_to_api) or of
    its API's execute_workflow, the innermost on the stack; here stand-ins of both (the dry run on SLURM in
    tests/external/test_slurm.py reads the real ones)."""
    from types import SimpleNamespace

    def plugin(name: str, local: bool):
        return SimpleNamespace(name=name, common_settings=SimpleNamespace(local_exec=local))

    def snakemake_function(module: str, name: str):
        namespace = {"__name__": module}
        exec(f"def {name}(executor_plugin, then):\n    return then()", namespace)
        return namespace[name]

    args_to_api = snakemake_function("snakemake.cli", "args_to_api")
    execute_workflow = snakemake_function("snakemake.api", "execute_workflow")
    assert started_executor() is None
    assert args_to_api(plugin("slurm", False), started_executor) == Executor("slurm", local=False)
    assert execute_workflow(plugin("local", True), started_executor) == Executor("local", local=True)
    inner = args_to_api(plugin("slurm", False), lambda: execute_workflow(plugin("kubernetes", False), started_executor))
    assert inner == Executor("kubernetes", local=False)


def test_mig_instances_are_the_devices_jobs_claim(monkeypatch, tmp_path):
    """A GPU split into MIG instances is seen by CUDA as its instances, named by UUID in CUDA_VISIBLE_DEVICES:
    those are what jobs claim (nvidia-smi -L's listing, as on an A100 with two 1g.5gb instances)."""
    listing = (
        "GPU 0: NVIDIA A100-SXM4-40GB (UUID: GPU-5d5ba0d6-d33d-2b2c-524d-9e3d8d2b8a77)\n"
        "  MIG 1g.5gb      Device  0: (UUID: MIG-c6d4f1ef-42e4-5de3-91c7-45d71c87eb3f)\n"
        "  MIG 1g.5gb      Device  1: (UUID: MIG-cba663e8-9bed-5b25-b243-5985ef7c9beb)\n"
        "GPU 1: NVIDIA A100-SXM4-40GB (UUID: GPU-0c1f2d0e-1a4b-4f0e-9d5e-3c6a7b8d9e0f)\n"
    )
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "nvidia-smi").write_text(f"#!/bin/sh\nprintf '{listing}'\n")
    (tmp_path / "bin" / "nvidia-smi").chmod(0o755)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:{os.environ['PATH']}")
    instances = ["MIG-c6d4f1ef-42e4-5de3-91c7-45d71c87eb3f", "MIG-cba663e8-9bed-5b25-b243-5985ef7c9beb"]
    assert node_gpus() == [*instances, "1"]
    assert claim_gpus(2, tmp_path / "claims") == instances
    assert os.environ["CUDA_VISIBLE_DEVICES"] == ",".join(instances)


def test_jobs_claim_different_gpus_and_see_only_theirs(monkeypatch, tmp_path):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,5,6")
    assert claim_gpus(1, tmp_path) == ["4"]
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "4"
    # a second job on the node: GPU 4 is held (flock locks conflict across open files, even in one process)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,5,6")
    assert claim_gpus(2, tmp_path) == ["5", "6"]
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "5,6"
    # once the first job's claim ends, its GPU is free again
    gpus._held.pop(0).close()
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,5,6")
    assert claim_gpus(1, tmp_path) == ["4"]


def test_a_job_without_gpus_sees_none_and_slurm_allocations_stay(monkeypatch, tmp_path):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    assert claim_gpus(0, tmp_path) == []
    assert os.environ["CUDA_VISIBLE_DEVICES"] == ""
    monkeypatch.setenv("SLURM_JOB_ID", "42")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3")
    assert claim_gpus(1, tmp_path) == ["3"]
    assert not list(tmp_path.glob("gpu-*.lock"))  # SLURM assigned it: nothing claimed here


def test_a_pinned_device_takes_that_gpus_claim_and_keeps_the_devices_it_sees(monkeypatch, tmp_path):
    """hf `device: cuda:1`: the job waits for GPU 1's claim (another job may hold it) and still sees both GPUs,
    so that cuda:1 names the same device; a job claiming any free GPU then gets the other one."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "6,7")
    assert claim_gpus(1, tmp_path, pinned=1) == ["7"]
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "6,7"
    assert claim_gpus(1, tmp_path) == ["6"], "GPU 7 is held by the pinned job"
    gpus._held.pop(0).close()  # the pinned job ends; GPU 7 is free again
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "6,7")
    with pytest.raises(SnakeskillsError, match=r"generation.device is cuda:2 but the node has 2 GPU"):
        claim_gpus(1, tmp_path, pinned=2)


def test_a_pinned_device_waits_while_another_job_holds_it(monkeypatch, tmp_path):
    import threading

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    assert claim_gpus(1, tmp_path) == ["0"]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    claimed = []
    waiter = threading.Thread(target=lambda: claimed.append(claim_gpus(1, tmp_path, poll_seconds=0.05, pinned=0)))
    waiter.start()
    waiter.join(0.5)
    assert waiter.is_alive() and not claimed, "GPU 0 is held: the pinned job waits instead of sharing it"
    gpus._held.pop(0).close()
    waiter.join(5)
    assert claimed == [["0"]]


def test_more_gpus_than_the_node_has_is_an_error(monkeypatch, tmp_path):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    with pytest.raises(SnakeskillsError, match=r"declares gpu=2 but the node has 1 GPU"):
        claim_gpus(2, tmp_path)


def small_config(workdir: Path) -> Path:
    """The tiny default, shrunk: 2 seeds of 1 chunk, on device auto (so its GPU jobs declare gpu=1)."""
    config = shrunk_default_config({"bootstrap": 4800, "validation": 200, "train": 400, "test": 200})
    config["experiment"] = "gpus"
    config["generation"]["device"] = "auto"
    return write_config(workdir / "config.yaml", config)


@pytest.mark.slow
def test_one_gpu_is_held_by_the_shared_server_and_the_training_job_in_turn(tmp_path):
    """The local profile finds one (pretend) GPU and sets gpu=1. The default shares a model load (share_model): its
    generate jobs declare no GPU and claim none, so they run side by side; the model server they share claims GPU 0
    (through the job that starts it) and holds it until it exits; the sft job claims GPU 0 once it has."""
    environment = {**os.environ, "PATH": f"{fake_nvidia_smi(tmp_path / 'bin', 1)}:{os.environ['PATH']}"}
    environment.pop("CUDA_VISIBLE_DEVICES", None)
    environment["XDG_RUNTIME_DIR"] = str(tmp_path / "runtime")
    (tmp_path / "runtime").mkdir(mode=0o700)
    process = run_snakemake(tmp_path, "--cores", "2", configfile=small_config(tmp_path), env=environment)
    assert process.returncode == 0, process.stdout[-4000:] + process.stderr[-4000:]
    logs = tmp_path / RESULTS / "logs"
    generate_logs = sorted(logs.glob("generate/**/*.log"))
    assert len(generate_logs) == 2 * 2 + 2 * 1  # base: train + test seeds; sft-round1: test seeds
    for log in generate_logs:
        text = log.read_text()
        assert "claimed GPU(s)" not in text and "model server pid" in text, log
    assert any("GPU(s) 0 of 0 claimed for the model server" in log.read_text() for log in generate_logs)
    (sft_log,) = logs.glob("sft/*.log")
    assert "claimed GPU(s) 0 of 0" in sft_log.read_text()
    # CPU jobs are not held back by the GPU limit: they claim nothing and see no GPU
    judge_log = next(logs.glob("judge/**/*.log"))
    assert "claimed GPU" not in judge_log.read_text()
