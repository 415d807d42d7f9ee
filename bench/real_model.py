"""The whole loop on the real SmolLM2-135M-Instruct (config/examples/smollm2-135m-instruct-arithmetic.yaml).

Usage: python3 bench/real_model.py [--cores 2] [--output bench/results/real_model.json]
Converts the model if this machine has not yet (cached), links it into a scratch folder as the README says,
runs the real `snakemake`, and reports the wall time, the time per stage (from Snakemake's own job start and
finish times: the sum over the stage's jobs, and the span from its first start to its last finish), the gain
on held-out problems and the finish_reason shares.
"""

from __future__ import annotations

import argparse
import collections
import datetime
import json
import platform
import re
import tempfile
from pathlib import Path

from pipeline import REPO, snakemake

from snakeskills.models.pretrained import link_folder, packaged_model_folder

EXAMPLE = REPO / "config/examples/smollm2-135m-instruct-arithmetic.yaml"
RESULTS = "results/smollm2-135m-instruct-arithmetic"
BASE = "smollm2-135m-instruct"
STAMP = re.compile(r"^\[(\w{3} \w{3} +\d+ \d\d:\d\d:\d\d \d{4})\]$")
STARTED = re.compile(r"^(?:local)?rule (\w+):$")
JOB_ID = re.compile(r"^\s+jobid: (\d+)$")
FINISHED = re.compile(r"^Finished jobid: (\d+) \(Rule: (\w+)\)$")


def stage_times(snakemake_log: Path) -> dict[str, dict]:
    """{rule: {jobs, job_seconds, span_seconds}} from the start and finish stamps of Snakemake's log."""
    started, finished, rules = {}, {}, {}
    stamp, pending_rule = None, None
    for line in snakemake_log.read_text().splitlines():
        if match := STAMP.match(line):
            stamp = datetime.datetime.strptime(match.group(1), "%a %b %d %H:%M:%S %Y")
        elif match := STARTED.match(line):
            pending_rule = match.group(1)
        elif (match := JOB_ID.match(line)) and pending_rule:
            started[match.group(1)], rules[match.group(1)] = stamp, pending_rule
            pending_rule = None
        elif match := FINISHED.match(line):
            finished[match.group(1)] = stamp
    stages = collections.defaultdict(lambda: {"jobs": 0, "job_seconds": 0.0, "first": None, "last": None})
    for job, rule in rules.items():
        stage = stages[rule]
        stage["jobs"] += 1
        stage["job_seconds"] += (finished[job] - started[job]).total_seconds()
        stage["first"] = min(filter(None, (stage["first"], started[job])))
        stage["last"] = max(filter(None, (stage["last"], finished[job])))
    return {
        rule: {"jobs": s["jobs"], "job_seconds": s["job_seconds"], "span_seconds": (s["last"] - s["first"]).seconds}
        for rule, s in sorted(stages.items(), key=lambda item: item[1]["first"])
    }


def finish_reasons(results: Path, model: str, seeds: int) -> dict[str, float]:
    rows = [
        json.loads(line)
        for seed in range(seeds)
        for line in (results / f"judge/{model}/arithmetic/test/output-rs{seed}.jsonl").read_text().splitlines()
    ]
    counts = collections.Counter(row["finish_reason"] for row in rows)
    return {reason: round(100 * count / len(rows), 2) for reason, count in sorted(counts.items())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--cores", default="2")
    parser.add_argument("--output", type=Path, default=REPO / "bench/results/real_model.json")
    arguments = parser.parse_args()
    model = packaged_model_folder("smollm2-135m-instruct")
    with tempfile.TemporaryDirectory(prefix="snakeskills-real-") as scratch:
        workdir = Path(scratch)
        link_folder(model, workdir / "models/SmolLM2-135M-Instruct")
        seconds, _ = snakemake(workdir, "--cores", arguments.cores, configfile=EXAMPLE)
        results = workdir / RESULTS
        summary = json.loads((results / "eval/summary.json").read_text())
        (log,) = (workdir / ".snakemake/log").glob("*.snakemake.log")
        stages = stage_times(log)
        reasons = {name: finish_reasons(results, name, 2) for name in (BASE, "sft-round1")}
        kept = json.loads((results / "sft/sft-round1/stats.json").read_text())["kept"]
    mode = "pass@1[avg-of-2]"
    base = summary[BASE]["arithmetic"][mode]["symbolic_correct"]
    tuned = summary["sft-round1"]["arithmetic"][mode]["symbolic_correct"]
    figures = {
        "machine": f"{platform.processor() or platform.machine()}, {arguments.cores} cores",
        "wall_seconds": round(seconds, 1),
        "stages": stages,
        "base_pass@1": base,
        "tuned_pass@1": tuned,
        "gain_points": round(tuned - base, 2),
        "sft_examples": kept,
        "finish_reason_percent": reasons,
    }
    arguments.output.parent.mkdir(parents=True, exist_ok=True)
    arguments.output.write_text(json.dumps(figures, indent=2) + "\n")
    print(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
