"""Benchmark the whole loop on the embedded default: wall time from scratch, no-op rerun, dry runs.

Usage: python bench/pipeline.py [--cores 2] [--output bench/results/pipeline.json]
Runs the real `snakemake` in a scratch folder; prints a table and writes the figures as JSON.
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from snakeskills.job import snakemake_command

REPO = Path(__file__).resolve().parent.parent


def snakemake(
    workdir: Path, *arguments: str, configfile: Path = REPO / "config/config.yaml"
) -> tuple[float, subprocess.CompletedProcess]:
    command = snakemake_command(REPO / "Snakefile", workdir, configfile, *arguments)
    start = time.perf_counter()
    process = subprocess.run(command, capture_output=True, text=True, cwd=workdir)
    elapsed = time.perf_counter() - start
    if process.returncode != 0:
        sys.exit(f"snakemake {' '.join(arguments)} failed:\n{process.stderr[-3000:]}")
    return elapsed, process


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--cores", default="2")
    parser.add_argument("--output", type=Path, default=REPO / "bench/results/pipeline.json")
    arguments = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="snakeskills-bench-") as scratch:
        workdir = Path(scratch)
        full_run, _ = snakemake(workdir, "--cores", arguments.cores)
        noop_run, noop = snakemake(workdir, "--cores", arguments.cores)
        dry_noop, _ = snakemake(workdir, "--dry-run")
        dry_more_seeds, _ = snakemake(workdir, "--dry-run", "--config", "num_seeds=6")
        summary = json.loads((workdir / "results/tiny-arithmetic/eval/summary.json").read_text())
    mode = "pass@1[avg-of-4]"
    base = summary["base"]["arithmetic"][mode]["symbolic_correct"]
    tuned = summary["sft-round1"]["arithmetic"][mode]["symbolic_correct"]
    figures = {
        "machine": f"{platform.processor() or platform.machine()}, {arguments.cores} cores",
        "full_run_seconds": round(full_run, 1),
        "noop_rerun_seconds": round(noop_run, 2),
        "noop_rerun_said_nothing_to_do": "Nothing to be done" in noop.stdout + noop.stderr,
        "dry_run_finished_seconds": round(dry_noop, 2),
        "dry_run_plus_two_seeds_seconds": round(dry_more_seeds, 2),
        "base_pass@1": base,
        "tuned_pass@1": tuned,
        "gain_points": round(tuned - base, 2),
    }
    arguments.output.parent.mkdir(parents=True, exist_ok=True)
    arguments.output.write_text(json.dumps(figures, indent=2) + "\n")
    for key, value in figures.items():
        print(f"{key:32s} {value}")


if __name__ == "__main__":
    main()
