"""Whole runs on a GPU node against the same node's CPU: the embedded default and the tiny tools example
(``config/examples/tiny-multiplication-calculator-tools.yaml``), each from scratch with ``snakemake -c all``, once
with the GPU visible and once with ``CUDA_VISIBLE_DEVICES=""`` (every job on the CPU).

Usage: python bench/gpu_pipelines.py [--runs default tools] [--timeout 400]
       [--output bench/results/gpu-pipelines.json]

Per run: wall seconds (or the limit it ran past), the exit status, the headline pass@1 of the base model and of its
tuned rounds (eval/summary.json), and the last lines of a failed run's log. The GPU figure over the CPU one says what a
GPU buys on these small models (their jobs are mostly start-up: the model load, the judge, Snakemake)."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import tempfile
import time
from pathlib import Path

from snakeskills.job import snakemake_command

REPO = Path(__file__).resolve().parent.parent
RUNS = {"default": None, "tools": REPO / "config/examples/tiny-multiplication-calculator-tools.yaml"}


def headline(workdir: Path) -> dict:
    """Each model's first pass@1 figure in the run's summary."""
    summaries = list(workdir.glob("results/*/eval/summary.json"))
    if not summaries:
        return {}
    summary = json.loads(summaries[0].read_text())
    figures = {}
    for model, benchmarks in summary.items():
        for modes in benchmarks.values() if isinstance(benchmarks, dict) else ():
            for mode, metrics in modes.items() if isinstance(modes, dict) else ():
                if mode.startswith("pass@1") and isinstance(metrics, dict) and "symbolic_correct" in metrics:
                    figures.setdefault(model, {mode: metrics["symbolic_correct"]})
    return figures


def one_run(name: str, on_gpu: bool, timeout: int) -> dict:
    environment = dict(os.environ)
    if not on_gpu:
        environment["CUDA_VISIBLE_DEVICES"] = ""
    with tempfile.TemporaryDirectory(prefix=f"gpu-pipeline-{name}-") as scratch:
        workdir = Path(scratch)
        command = snakemake_command(REPO / "Snakefile", workdir, RUNS[name], "--cores", "all")
        start = time.perf_counter()
        try:
            process = subprocess.run(
                command, capture_output=True, text=True, cwd=workdir, env=environment, timeout=timeout
            )
            status, log = process.returncode, process.stderr
        except subprocess.TimeoutExpired as expired:
            status, log = "timeout", (expired.stderr or b"").decode(errors="replace")
        figures = {"seconds": round(time.perf_counter() - start, 1), "exit": status, "pass@1": headline(workdir)}
        if status != 0:
            figures["log_tail"] = log[-2000:]
    print(name, "gpu" if on_gpu else "cpu", json.dumps(figures)[:400], flush=True)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", nargs="+", choices=sorted(RUNS), default=["default", "tools"])
    parser.add_argument("--timeout", type=int, default=400, help="seconds per run")
    parser.add_argument("--output", type=Path, default=REPO / "bench/results/gpu-pipelines.json")
    arguments = parser.parse_args()
    import torch

    results = {
        "device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no CUDA device",
        "cores": len(os.sched_getaffinity(0)),
        "runs": {},
    }
    for name in arguments.runs:
        gpu = one_run(name, True, arguments.timeout)
        cpu = one_run(name, False, arguments.timeout)
        results["runs"][name] = {"gpu": gpu, "cpu": cpu}
        if gpu["exit"] == 0 and cpu["exit"] == 0:
            results["runs"][name]["gpu_time_over_cpu"] = round(gpu["seconds"] / cpu["seconds"], 2)
    arguments.output.parent.mkdir(parents=True, exist_ok=True)
    arguments.output.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
