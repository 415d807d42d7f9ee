"""A round across two nodes, for real: the tiny methods example (SFT, DPO, KTO and GRPO rounds) with its training on
2 nodes x 1 process, through `snakemake --profile profiles/slurm --profile tests/external/slurm-two-nodes` on a
two-node SLURM built on this machine (tests/external/slurm/setup-two-node-slurm.sh: two slurmd, node1 and node2, each
in its own network, UTS and mount namespace on a bridge, beside the single-node cluster of test_slurm.py; built once
per test run, then reused). Each round is one SLURM job of two nodes whose batch script starts the training on both
with srun; the processes talk over gloo between the two namespaces.

Checked: each round's job ran on two nodes with a GPU on each (sacct) and its log shows a rank on each hostname; the
weights equal those of a one-node, two-process run of the same config; a round whose process on the second node is
killed fails naming it, and the rerun resumes from the checkpoint to the uninterrupted weights. Run it alone with
`python3 -m pytest tests/external/test_slurm_nodes.py` (it is marked slow; ~10 minutes on 2 cores).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

import psutil
import pytest
import yaml
from conftest import REPO, job_counts, start_slurm_cluster, write_config
from without_slurm import with_slurm

from snakeskills.job import snakemake_command

SETUP = REPO / "tests/external/slurm/setup-two-node-slurm.sh"
CLUSTER_CONF = "/etc/slurm-two-nodes/slurm.conf"
HOSTS = {"node1", "node2"}
PROFILES = ("--profile", str(REPO / "profiles/slurm"), "--profile", str(REPO / "tests/external/slurm-two-nodes"))
METHODS_EXAMPLE = REPO / "config/examples/tiny-arithmetic-sft-dpo-kto-grpo.yaml"
METHODS = ("sft", "dpo", "kto", "grpo")
RESULTS = "results/tiny-arithmetic-methods"
SFT_CHECKPOINT_STEPS = 5


def methods_config(
    path: Path, *, nodes: int, processes: int | None, gpus: int | None = None, sft_method: str = "lora"
) -> Path:
    """The tiny methods example, smaller (fewer problems and samples, a few dozen steps a round), its rounds on
    ``nodes`` nodes of ``processes`` processes each (null: one per GPU of the job on each node, one of the test
    nodes' two pretend GPUs; ``gpus`` 0: CPU processes where the plan would give a job a GPU, as on this SLURM host)."""
    config = yaml.safe_load(METHODS_EXAMPLE.read_text())
    sizes = {"bootstrap": 4800, "validation": 100, "train": 300, "test": 100}
    config["benchmarks"]["arithmetic"]["synthetic"]["split_sizes"] = sizes
    config.update(num_seeds=2, num_chunks=1, train_num_seeds=4)
    config["tiny_model"]["stop_at_accuracy"] = 0.3
    config["sft"]["training"].update(max_steps=60, checkpoint_steps=SFT_CHECKPOINT_STEPS)
    config["sft"]["method"] = sft_method
    for method in ("dpo", "kto", "grpo"):
        config[method]["training"]["max_steps"] = 6
    config["training"] = {"nodes": nodes, "gpus": gpus, "processes": processes}
    return write_config(path, config)


def cluster_environment() -> dict:
    """This shell's environment with SLURM's programs on PATH (tests/without_slurm.py), its SLURM clients pointed at
    the two-node cluster."""
    environment = {
        key: value for key, value in with_slurm(os.environ).items() if not key.startswith(("SLURM_", "SBATCH_"))
    }
    return {**environment, "SLURM_CONF": CLUSTER_CONF}


@pytest.fixture(scope="session")
def two_node_cluster() -> dict:
    """The two-node SLURM cluster, running (built and started on first use); the environment that reaches it."""
    start_slurm_cluster(SETUP)
    return cluster_environment()


def on_the_cluster(workdir: Path, configfile: Path, *arguments: str) -> list[str]:
    command = snakemake_command(REPO / "Snakefile", workdir, configfile, *PROFILES, *arguments)
    # Snakemake can hang on a stuck status check; SIGINT (then SIGKILL 60 s later) cancels it and its jobs
    return ["timeout", "-s", "INT", "-k", "60", "1500", *command]


@pytest.fixture(scope="module")
def two_node_run(two_node_cluster, tmp_path_factory) -> Path:
    """The tiny methods example with every round on 2 nodes x 1 process, run through SLURM: its working folder."""
    folder = tmp_path_factory.mktemp("two-nodes")
    workdir = folder / "run"
    workdir.mkdir()
    configfile = methods_config(folder / "config.yaml", nodes=2, processes=None)
    process = subprocess.run(
        on_the_cluster(workdir, configfile), capture_output=True, text=True, cwd=workdir, env=two_node_cluster
    )
    output = process.stdout + process.stderr
    assert process.returncode == 0, what_failed(output, workdir)
    return workdir


def round_log(workdir: Path, method: str) -> str:
    return (workdir / RESULTS / f"logs/{method}/{method}-round1.log").read_text()


def what_failed(output: str, workdir: Path) -> str:
    """Snakemake's output and the end of each round log there is: what a failed run's assertion shows."""
    logs = sorted((workdir / RESULTS / "logs").glob("*/*-round1.log"))
    return output[-5000:] + "".join(f"\n--- {log.name}:\n{log.read_text()[-2500:]}" for log in logs)


def adapter(workdir: Path, method: str) -> dict:
    from safetensors.torch import load_file

    return load_file(workdir / RESULTS / f"models/{method}-round1/adapter/adapter_model.safetensors")


def checkpoint(workdir: Path, method: str) -> dict:
    from safetensors.torch import load_file

    return load_file(workdir / RESULTS / f"models/{method}-round1/checkpoint/model.safetensors")


def assert_same_weights(first: dict, second: dict, what: str) -> None:
    import torch

    assert first.keys() == second.keys(), what
    differing = [name for name in first if not torch.equal(first[name], second[name])]
    assert not differing, f"{what}: {len(differing)} of {len(first)} tensors differ, e.g. {differing[:3]}"


def sacct(job_id: str, environment: dict) -> dict:
    fields = "JobID,State,NNodes,NodeList,AllocTRES"
    output = subprocess.run(
        ["sacct", "-n", "-P", "-X", "-j", job_id, "-o", fields],
        capture_output=True,
        text=True,
        check=True,
        env=environment,
    ).stdout
    return dict(zip(fields.split(","), output.splitlines()[0].split("|"), strict=True))


@pytest.mark.slow
def test_each_round_is_one_slurm_job_training_on_both_nodes(two_node_run, two_node_cluster):
    for method in METHODS:
        log = round_log(two_node_run, method)
        job_id = re.search(r"SLURM job (\d+)", log).group(1)
        places = set(re.findall(r"training process rank (\d+) of 2 on (\S+)", log))
        assert {host for _rank, host in places} == HOSTS and {rank for rank, _host in places} == {"0", "1"}, (
            method,
            log[-3000:],
        )
        job = sacct(job_id, two_node_cluster)
        assert job["State"] == "COMPLETED" and job["NNodes"] == "2", (method, job)
        # one pretend GPU on each node (--gres=gpu:1), not one GPU for the job (--gpus=1)
        assert "node=2" in job["AllocTRES"] and "gres/gpu=2" in job["AllocTRES"], (method, job)


@pytest.mark.slow
def test_two_nodes_train_the_weights_of_one_node_with_two_processes(two_node_run, tmp_path):
    """The same config with its rounds on one node in two processes (a local run, gloo on this machine): each round
    retrains, nothing else reruns, and the weights are bit-equal: the same two ranks take the same shares of each
    batch and gloo sums the same two gradients, whichever transport carries them."""
    workdir = tmp_path / "one-node"
    shutil.copytree(two_node_run, workdir, symlinks=True)
    configfile = methods_config(tmp_path / "config.yaml", nodes=1, processes=2, gpus=0)
    command = snakemake_command(REPO / "Snakefile", workdir, configfile, "-c2", "--until", *METHODS)
    process = subprocess.run(command, capture_output=True, text=True, cwd=workdir, timeout=1500)
    output = process.stdout + process.stderr
    assert process.returncode == 0, output[-6000:]
    assert job_counts(output) == dict.fromkeys(METHODS, 1), output[-3000:]
    for method in METHODS:
        assert "training process rank 1 of 2 on" in round_log(workdir, method)
        assert_same_weights(adapter(two_node_run, method), adapter(workdir, method), method)


@pytest.mark.slow
def test_a_full_fine_tune_across_two_nodes_equals_one_node(two_node_run, two_node_cluster, tmp_path):
    """sft.method full: every weight trained on 2 nodes x 1 process, and on one node in two processes (local)."""
    trained = {}
    for name, nodes, processes, gpus, options, environment in (
        ("two-nodes", 2, None, None, PROFILES, two_node_cluster),
        ("one-node", 1, 2, 0, ("-c2",), None),
    ):
        workdir = tmp_path / name
        shutil.copytree(two_node_run, workdir, symlinks=True)
        configfile = methods_config(
            tmp_path / f"{name}.yaml", nodes=nodes, processes=processes, gpus=gpus, sft_method="full"
        )
        command = snakemake_command(REPO / "Snakefile", workdir, configfile, *options, "--until", "sft")
        process = subprocess.run(command, capture_output=True, text=True, cwd=workdir, env=environment, timeout=1500)
        output = process.stdout + process.stderr
        assert process.returncode == 0, what_failed(output, workdir)
        assert job_counts(output) == {"sft": 1}, output[-3000:]
        trained[name] = checkpoint(workdir, "sft")
    assert_same_weights(trained["two-nodes"], trained["one-node"], "full sft")


def training_process_on(host: str) -> psutil.Process | None:
    """A training process (rounds.main) started on ``host`` with a rank above 0."""
    for process in psutil.process_iter(["cmdline"]):
        try:
            if "snakeskills.training.rounds" not in " ".join(process.info["cmdline"] or []):
                continue
            environment = process.environ()
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        if environment.get("SLURMD_NODENAME") == host and environment.get("RANK", "0") != "0":
            return process
    return None


@pytest.mark.slow
def test_a_killed_node_fails_the_round_naming_it_and_the_rerun_resumes(two_node_run, two_node_cluster, tmp_path):
    workdir = tmp_path / "killed"
    shutil.copytree(two_node_run, workdir, symlinks=True)
    shutil.rmtree(workdir / RESULTS / "models/sft-round1")
    configfile = methods_config(tmp_path / "config.yaml", nodes=2, processes=None)
    command = on_the_cluster(workdir, configfile, "--until", "sft")
    snakemake = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=workdir, env=two_node_cluster
    )
    first_checkpoint = workdir / RESULTS / f"models/sft-round1/.adapter-trainer/checkpoint-{SFT_CHECKPOINT_STEPS}"
    deadline = time.monotonic() + 900
    victim = None
    while victim is None:
        assert snakemake.poll() is None, f"the round ended before it was killed:\n{snakemake.stdout.read()[-4000:]}"
        assert time.monotonic() < deadline, "no checkpoint was saved in 15 minutes"
        if (first_checkpoint / "trainer_state.json").exists():
            victim = training_process_on("node2")
        time.sleep(0.2)
    victim.send_signal(signal.SIGKILL)
    output, _ = snakemake.communicate(timeout=600)
    assert snakemake.returncode != 0, output[-4000:]
    log = round_log(workdir, "sft")
    assert re.search(r"training process rank 1 on node2 \(node rank 1\) ended without a word", log), log[-4000:]
    assert "a rerun resumes from the checkpoint of step" in log, log[-3000:]
    assert not (workdir / RESULTS / "models/sft-round1/adapter").exists(), "no half-written adapter"

    process = subprocess.run(command, capture_output=True, text=True, cwd=workdir, env=two_node_cluster)
    output = process.stdout + process.stderr
    assert process.returncode == 0, output[-6000:]
    assert re.search(r"resuming training from checkpoint \S+checkpoint-\d+", round_log(workdir, "sft"))
    assert_same_weights(adapter(two_node_run, "sft"), adapter(workdir, "sft"), "resumed sft round")
