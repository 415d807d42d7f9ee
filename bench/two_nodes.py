"""Benchmark a training round across two nodes against one node, side by side on the same data.

Usage (root; builds the test clusters: tests/external/slurm/setup-two-node-slurm.sh):
    python bench/two_nodes.py [--sft-steps 60] [--output bench/results/two_nodes.json]

The tiny methods example, smaller (tests/external/test_slurm_nodes.py's config), is prepared once up to each
method's training data (a local run); then its four rounds (SFT --sft-steps steps, DPO, KTO and GRPO 6 each) are trained
three ways from copies of that folder: on the two-node SLURM with every round on 2 nodes x 1 process, on the same
cluster on one node in 2 processes, and locally in 2 processes without SLURM. For each it reports the wall time of
the Snakemake command (submission and status checks included), each round's SLURM job time (sacct) and the
trainer's own time (training_metrics.json: train_runtime), and the ratios to the local run.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from snakeskills.job import snakemake_command

REPO = Path(__file__).resolve().parent.parent
SETUP = REPO / "tests/external/slurm/setup-two-node-slurm.sh"
CLUSTER_CONF = "/etc/slurm-two-nodes/slurm.conf"
PROFILES = ("--profile", str(REPO / "profiles/slurm"), "--profile", str(REPO / "tests/external/slurm-two-nodes"))
EXAMPLE = REPO / "config/examples/tiny-arithmetic-sft-dpo-kto-grpo.yaml"
RESULTS = "results/tiny-arithmetic-methods"
METHODS = ("sft", "dpo", "kto", "grpo")
DATA_RULES = ("sft_data", "preference_pairs", "kto_samples", "rl_problems")


def write_config(path: Path, training: dict, sft_steps: int) -> Path:
    """tests/external/test_slurm_nodes.py's config: the example with fewer problems and steps; ``training`` its
    training section."""
    config = yaml.safe_load(EXAMPLE.read_text())
    sizes = {"bootstrap": 4800, "validation": 100, "train": 300, "test": 100}
    config["benchmarks"]["arithmetic"]["synthetic"]["split_sizes"] = sizes
    config.update(num_seeds=2, num_chunks=1, train_num_seeds=4, training=training)
    config["tiny_model"]["stop_at_accuracy"] = 0.3
    config["sft"]["training"].update(max_steps=sft_steps, checkpoint_steps=5)
    for method in ("dpo", "kto", "grpo"):
        config[method]["training"]["max_steps"] = 6
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def run(workdir: Path, configfile: Path, *arguments: str, environment: dict | None = None) -> float:
    command = snakemake_command(REPO / "Snakefile", workdir, configfile, *arguments)
    start = time.perf_counter()
    process = subprocess.run(command, capture_output=True, text=True, cwd=workdir, env=environment)
    if process.returncode != 0:
        sys.exit(f"{' '.join(command)} failed:\n{(process.stdout + process.stderr)[-4000:]}")
    return time.perf_counter() - start


def round_figures(workdir: Path, environment: dict) -> dict:
    """Per round: the trainer's own seconds, and the SLURM job's (None for a local run)."""
    figures = {}
    for method in METHODS:
        metrics = json.loads((workdir / RESULTS / f"models/{method}-round1/adapter/training_metrics.json").read_text())
        log = (workdir / RESULTS / f"logs/{method}/{method}-round1.log").read_text()
        job = re.search(r"SLURM job (\d+)", log)
        elapsed = None
        if job:
            output = subprocess.run(
                ["sacct", "-n", "-P", "-X", "-j", job.group(1), "-o", "ElapsedRaw"],
                capture_output=True,
                text=True,
                check=True,
                env=environment,
            ).stdout
            elapsed = int(output.split()[0])
        figures[method] = {
            "steps": metrics["global_step"],
            "train_runtime_seconds": round(metrics["train_runtime"], 1),
            "job_seconds": elapsed,
        }
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sft-steps", type=int, default=60, help="the SFT round's optimizer steps")
    parser.add_argument("--output", type=Path, default=REPO / "bench/results/two_nodes.json")
    arguments = parser.parse_args()
    subprocess.run(["bash", str(SETUP)], check=True, capture_output=True)
    cluster = {key: value for key, value in os.environ.items() if not key.startswith(("SLURM_", "SBATCH_"))}
    cluster["SLURM_CONF"] = CLUSTER_CONF
    ways = {
        "two_nodes_x_1_process_slurm": ({"nodes": 2}, PROFILES, cluster),
        # gpus 2: on one node of the cluster, 2 processes on its two pretend GPUs (the plan's one process per GPU)
        "one_node_x_2_processes_slurm": ({"nodes": 1, "gpus": 2}, PROFILES, cluster),
        # gpus 0: two CPU processes (this machine has sbatch, so the plan would give a local job a GPU)
        "one_node_x_2_processes_local": ({"nodes": 1, "gpus": 0, "processes": 2}, ("-c2",), None),
    }
    figures: dict = {"machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores"}
    figures["sft_steps"] = arguments.sft_steps
    with tempfile.TemporaryDirectory(prefix="snakeskills-bench-nodes-") as scratch:
        prepared = Path(scratch) / "prepared"
        prepared.mkdir()
        local = write_config(Path(scratch) / "local.yaml", ways["one_node_x_2_processes_local"][0], arguments.sft_steps)
        figures["prepare_seconds"] = round(run(prepared, local, "-c2", "--until", *DATA_RULES), 1)
        for name, (training, options, environment) in ways.items():
            workdir = Path(scratch) / name
            shutil.copytree(prepared, workdir, symlinks=True)
            configfile = write_config(Path(scratch) / f"{name}.yaml", training, arguments.sft_steps)
            seconds = run(workdir, configfile, *options, "--until", *METHODS, environment=environment)
            figures[name] = {"snakemake_seconds": round(seconds, 1), "rounds": round_figures(workdir, cluster)}
    local_seconds = figures["one_node_x_2_processes_local"]["snakemake_seconds"]
    for name in ways:
        figures[name]["vs_local"] = round(figures[name]["snakemake_seconds"] / local_seconds, 2)
    arguments.output.write_text(json.dumps(figures, indent=2) + "\n")
    print(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
