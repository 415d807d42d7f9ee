"""The embedded default's promise on every CPU: the whole loop from scratch for each bootstrap seed, with the
machine's own CPU kernels and with forced ones (AVX2, generic), in a table of base, tuned, gain, bootstrap steps
and time.

Usage: python bench/demo_kernels.py [--seeds 0 1 2 3 4] [--kernels native avx2 generic] [--cores 2]
           [--output bench/results/demo_kernels.json]
Runs the real `snakemake` on config/config.yaml, ``tiny_model.seed`` set, in a scratch folder per run and the
kernels' environment (snakeskills.job.CPU_KERNELS); prints a Markdown table and writes the figures as JSON.
About 2-4 minutes a run on 2 cores.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from snakeskills.job import CPU_KERNELS, machine_cpu_kernels, snakemake_command
from snakeskills.training.tiny_bootstrap import BOOTSTRAP_METRICS_FILE

REPO = Path(__file__).resolve().parent.parent
RESULTS = "results/tiny-arithmetic"
MODE = "pass@1[avg-of-4]"


def demo_run(seed: int, kernels: str, cores: str) -> dict:
    """One run of the default with bootstrap seed ``seed`` under ``kernels``: its figures."""
    with tempfile.TemporaryDirectory(prefix="snakeskills-kernels-") as scratch:
        workdir = Path(scratch)
        config = yaml.safe_load((REPO / "config/config.yaml").read_text())
        config["tiny_model"]["seed"] = seed
        configfile = workdir / "config.yaml"
        configfile.write_text(yaml.safe_dump(config, sort_keys=False))
        command = snakemake_command(REPO / "Snakefile", workdir, configfile, "--cores", cores)
        started = time.perf_counter()
        process = subprocess.run(
            command, capture_output=True, text=True, cwd=workdir, env={**os.environ, **CPU_KERNELS[kernels]}
        )
        elapsed = time.perf_counter() - started
        if process.returncode != 0:
            sys.exit(f"seed {seed}, {kernels} kernels: snakemake failed:\n{process.stderr[-3000:]}")
        summary = json.loads((workdir / RESULTS / "eval/summary.json").read_text())
        bootstrap = json.loads((workdir / RESULTS / "models/base/checkpoint" / BOOTSTRAP_METRICS_FILE).read_text())
    base = summary["base"]["arithmetic"][MODE]["symbolic_correct"]
    tuned = summary["sft-round1"]["arithmetic"][MODE]["symbolic_correct"]
    return {
        "seed": seed,
        "kernels": kernels,
        "base": base,
        "tuned": tuned,
        "gain": round(tuned - base, 2),
        "bootstrap_steps": bootstrap["global_step"],
        "bootstrap_validation_accuracy": bootstrap["final_validation_accuracy"],
        "bootstrap_reached_target": bootstrap["reached_target"],
        "seconds": round(elapsed, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--kernels", nargs="+", choices=sorted(CPU_KERNELS), default=["native", "avx2", "generic"])
    parser.add_argument("--cores", default="2")
    parser.add_argument("--output", type=Path, default=REPO / "bench/results/demo_kernels.json")
    arguments = parser.parse_args()
    runs = []
    print(f"machine kernels: {machine_cpu_kernels()}", flush=True)
    print("| seed | kernels | base | tuned | gain | bootstrap steps (validation accuracy) | time |", flush=True)
    print("| --- | --- | --- | --- | --- | --- | --- |", flush=True)
    for seed in arguments.seeds:
        for kernels in arguments.kernels:
            run = demo_run(seed, kernels, arguments.cores)
            runs.append(run)
            print(
                f"| {seed} | {kernels} | {run['base']:.2f} % | {run['tuned']:.2f} % | {run['gain']:+.2f} | "
                f"{run['bootstrap_steps']} ({run['bootstrap_validation_accuracy']:.3f}"
                f"{'' if run['bootstrap_reached_target'] else ', missed'}) | {run['seconds']:.0f} s |",
                flush=True,
            )
    arguments.output.parent.mkdir(parents=True, exist_ok=True)
    figures = {"machine_kernels": machine_cpu_kernels(), "cores": arguments.cores, "runs": runs}
    arguments.output.write_text(json.dumps(figures, indent=2) + "\n")


if __name__ == "__main__":
    main()
