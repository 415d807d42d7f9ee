"""Model loads per run: one load per generate job against one shared load per node (share_model).

Usage: python bench/model_loads.py [--cores 2] [--num-chunks 4] [--num-seeds 4]
       [--output bench/results/model_loads.json]

Runs the embedded default twice from scratch with the real `snakemake`, with ``num_chunks`` x
``num_seeds`` generate jobs per (model, split): once with ``generation.share_model.enabled: false``
(every generate job loads the model) and once with it on. Counts the model loads from the job logs
("loaded model" in a generate log: a job's own load; "started model server": a shared load) and
reports the wall time of each run and of the generate jobs alone.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

import yaml

from snakeskills.job import snakemake_command

REPO = Path(__file__).resolve().parent.parent
RESULTS = "results/tiny-arithmetic"
TIMESTAMP = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3})", re.MULTILINE)


def run(workdir: Path, config: dict, cores: str) -> float:
    configfile = workdir / "config.yaml"
    configfile.write_text(yaml.safe_dump(config))
    start = time.perf_counter()
    process = subprocess.run(
        snakemake_command(REPO / "Snakefile", workdir, configfile, "--cores", cores),
        capture_output=True,
        text=True,
        cwd=workdir,
    )
    if process.returncode != 0:
        sys.exit(f"snakemake failed:\n{process.stderr[-3000:]}")
    return time.perf_counter() - start


def generate_span_seconds(logs: list[str]) -> float:
    """From the first to the last timestamp in the generate logs: the generation phase's wall time."""
    stamps = [datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S,%f") for log in logs for stamp in TIMESTAMP.findall(log)]
    return (max(stamps) - min(stamps)).total_seconds()


def measure(config: dict, cores: str, shared: bool) -> dict:
    with tempfile.TemporaryDirectory(prefix="snakeskills-loads-") as scratch:
        workdir = Path(scratch)
        config = json.loads(json.dumps(config))
        config["generation"]["share_model"] = {
            "enabled": shared,
            "directory": str(workdir / "servers"),
            "idle_seconds": 10,
        }
        seconds = run(workdir, config, cores)
        logs = [path.read_text() for path in (workdir / RESULTS / "logs/generate").rglob("*.log")]
        summary = json.loads((workdir / RESULTS / "eval/summary.json").read_text())
    loads = (
        sum(log.count("started model server") for log in logs)
        if shared
        else sum(log.count("loaded model ") for log in logs)
    )
    mode = f"pass@1[avg-of-{config['num_seeds']}]"
    return {
        "generate_jobs": len(logs),
        "model_loads": loads,
        "run_seconds": round(seconds, 1),
        "generate_phase_seconds": round(generate_span_seconds(logs), 1),
        "round1_pass_at_1": summary["sft-round1"]["arithmetic"][mode]["symbolic_correct"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--cores", default="2")
    parser.add_argument("--num-chunks", type=int, default=4)
    parser.add_argument("--num-seeds", type=int, default=4)
    parser.add_argument("--output", type=Path, default=REPO / "bench/results/model_loads.json")
    arguments = parser.parse_args()
    config = yaml.safe_load((REPO / "config/config.yaml").read_text())
    config.update(num_chunks=arguments.num_chunks, num_seeds=arguments.num_seeds, train_num_seeds=arguments.num_seeds)
    per_job = measure(config, arguments.cores, shared=False)
    shared = measure(config, arguments.cores, shared=True)
    figures = {
        "cores": arguments.cores,
        "num_chunks": arguments.num_chunks,
        "num_seeds": arguments.num_seeds,
        "one_load_per_job": per_job,
        "shared_model_server": shared,
        "run_seconds_saved": round(per_job["run_seconds"] - shared["run_seconds"], 1),
        "same_numbers": per_job["round1_pass_at_1"] == shared["round1_pass_at_1"],
    }
    arguments.output.parent.mkdir(parents=True, exist_ok=True)
    arguments.output.write_text(json.dumps(figures, indent=2) + "\n")
    print(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
