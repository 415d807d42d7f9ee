"""Planning cost at scale: `snakemake -n` on a ~20,000-job config against a bare Snakefile of the same size.

Usage: python3 bench/planning.py [--repeats 3] [--output bench/results/planning.json]

The scale config is the embedded default with 3 benchmarks, 16 seeds and 100 chunks, and 2 models
(base and sft-round1): 10,000 generate and 10,000 judge jobs, ~20,100 jobs in all. The floor is a bare
Snakefile with the same job count: shell rules over 2 wildcards (generate, judge, merge, padding),
no logs, no conda, no config. Both are timed side by side in one run (interleaved, median of
--repeats) in two states:

- plan: nothing exists yet, `snakemake -n` lists all jobs;
- no-op: a finished run (every output created, then `snakemake --touch` so that their times and
  metadata are in order), where `snakemake -n` must say "Nothing to be done".

Each ratio (workflow / bare) must stay within 1.5. Prints a table and writes the figures as JSON;
exits 1 if a ratio is over the limit.

snakemake-executor-plugin-slurm runs `scontrol show config` when Snakemake loads its plugins, and
that call waits 10 s on a machine with slurm-client installed but no controller answering. Such a
fixed cost would shrink both ratios, so the timed commands see a stand-in `scontrol` that fails at
once, as on a machine without SLURM.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
LIMIT = 1.5
BENCHMARKS = ["arithmetic", "arithmetic-b", "arithmetic-c"]
NUM_SEEDS, TRAIN_NUM_SEEDS, NUM_CHUNKS = 16, 4, 100
DIRECTORY_RULES = {"build_tiny_model", "sft"}  # rules whose outputs are folders
SCONTROL_STAND_IN = (
    "#!/bin/sh\n# stands in for slurm-client's scontrol: fails at once, as where SLURM is absent\nexit 1\n"
)


def scale_config() -> dict:
    config = yaml.safe_load((REPO / "config/config.yaml").read_text())
    arithmetic = config["benchmarks"]["arithmetic"]
    config["benchmarks"] = {
        name: {**arithmetic, "synthetic": {**arithmetic["synthetic"], "seed": index}}
        for index, name in enumerate(BENCHMARKS)
    }
    config.update(num_seeds=NUM_SEEDS, train_num_seeds=TRAIN_NUM_SEEDS, num_chunks=NUM_CHUNKS, rounds=1)
    return config


BARE_SNAKEFILE = """\
# The bare floor: shell rules over 2 wildcards, no logs, the same job count.
rule all:
    input:
        expand("merged/{{group}}.txt", group=range({groups})),
        expand("other/{{index}}.txt", index=range({other})),


rule merge:
    input:
        lambda w: expand("judge/{{group}}/{{chunk}}.txt", group=w.group, chunk=range({chunks})),
    output:
        "merged/{{group}}.txt",
    shell:
        "cat {{input}} > {{output}}"


rule judge:
    input:
        "generate/{{group}}/{{chunk}}.txt",
    output:
        "judge/{{group}}/{{chunk}}.txt",
    shell:
        "cp {{input}} {{output}}"


rule generate:
    output:
        "generate/{{group}}/{{chunk}}.txt",
    shell:
        "touch {{output}}"


rule other:
    output:
        "other/{{index}}.txt",
    shell:
        "touch {{output}}"
"""


def write_bare(folder: Path, total: int) -> Path:
    groups, chunks = 100, 100  # 10,000 generate + 10,000 judge + 100 merges + all
    folder.mkdir(parents=True)
    snakefile = folder / "Snakefile"
    other = total - (2 * groups * chunks + groups + 1)
    snakefile.write_text(BARE_SNAKEFILE.format(groups=groups, chunks=chunks, other=other))
    return snakefile


def snakemake(snakefile: Path, workdir: Path, environment: dict, *arguments: str, configfile: Path | None = None):
    command = [sys.executable, "-m", "snakemake", "--snakefile", str(snakefile), "--directory", str(workdir)]
    if configfile is not None:
        command += ["--configfile", str(configfile)]
    start = time.perf_counter()
    process = subprocess.run([*command, *arguments], capture_output=True, text=True, cwd=workdir, env=environment)
    elapsed = time.perf_counter() - start
    if process.returncode != 0:
        sys.exit(f"snakemake {' '.join(arguments)} on {snakefile} failed:\n{process.stderr[-3000:]}")
    return elapsed, process.stdout + process.stderr


def job_total(output: str) -> int:
    match = re.search(r"^total\s+(\d+)$", output, re.MULTILINE)
    return int(match.group(1)) if match else 0


def rule_counts(output: str) -> dict[str, int]:
    table = output[output.index("Job stats:") :]
    counts = {}
    for line in table.splitlines()[3:]:
        match = re.match(r"^(\S+)\s+(\d+)$", line.strip())
        if not match:
            break
        counts[match.group(1)] = int(match.group(2))
    return counts


def create_outputs(dry_run_output: str, workdir: Path) -> int:
    """Create every output a dry run lists (folders for folder outputs); returns how many."""
    created = 0
    rule = None
    for line in dry_run_output.splitlines():
        line = line.strip()
        if match := re.match(r"^(?:local)?rule (\w+):$", line):
            rule = match.group(1)
        elif line.startswith("output: "):
            for name in line.removeprefix("output: ").split(", "):
                path = workdir / name
                if rule in DIRECTORY_RULES:
                    path.mkdir(parents=True, exist_ok=True)
                else:
                    path.parent.mkdir(parents=True, exist_ok=True)
                    path.touch()
                created += 1
    return created


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--output", type=Path, default=REPO / "bench/results/planning.json")
    arguments = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="snakeskills-planning-") as scratch:
        scratch = Path(scratch)
        stand_in = scratch / "bin/scontrol"
        stand_in.parent.mkdir()
        stand_in.write_text(SCONTROL_STAND_IN)
        stand_in.chmod(0o755)
        environment = {**os.environ, "PATH": f"{stand_in.parent}{os.pathsep}{os.environ['PATH']}"}
        workflow_dir = scratch / "workflow"
        workflow_dir.mkdir()
        configfile = scratch / "scale.yaml"
        configfile.write_text(yaml.safe_dump(scale_config(), sort_keys=False))
        _, workflow_plan = snakemake(REPO / "Snakefile", workflow_dir, environment, "-n", configfile=configfile)
        total = job_total(workflow_plan)
        runs = {
            "workflow": (REPO / "Snakefile", workflow_dir, {"configfile": configfile}),
            "bare": (write_bare(scratch / "bare", total), scratch / "bare", {}),
        }

        def timed(name: str, state: str) -> tuple[float, str]:
            snakefile, workdir, kwargs = runs[name]
            seconds, output = snakemake(snakefile, workdir, environment, "-n", **kwargs)
            if state == "plan":
                assert job_total(output) == total, (name, job_total(output), total)
            else:
                assert "Nothing to be done" in output, f"{name}: the finished run is not up to date:\n{output[-2000:]}"
            print(f"{state:6s} {name:9s} {seconds:6.2f} s", flush=True)
            return round(seconds, 2), output

        seconds = {"plan": {name: [] for name in runs}, "no-op": {name: [] for name in runs}}
        plans = {}
        for _ in range(arguments.repeats):
            for name in runs:
                elapsed, plans[name] = timed(name, "plan")
                seconds["plan"][name].append(elapsed)

        # a finished run: every output there, then --touch puts times and metadata in order
        touch = {}
        for name, (snakefile, workdir, kwargs) in runs.items():
            create_outputs(plans[name], workdir)
            elapsed, _ = snakemake(snakefile, workdir, environment, "--touch", "--cores", "100000", **kwargs)
            touch[name] = round(elapsed, 1)
            print(f"touch  {name:9s} {elapsed:6.2f} s", flush=True)
        for _ in range(arguments.repeats):
            for name in runs:
                seconds["no-op"][name].append(timed(name, "no-op")[0])

    median = statistics.median
    ratios = {state: round(median(times["workflow"]) / median(times["bare"]), 2) for state, times in seconds.items()}
    figures = {
        "machine": f"{platform.machine()}, Python {platform.python_version()}, snakemake {snakemake_version()}",
        "config": {
            "benchmarks": len(BENCHMARKS),
            "models": 2,
            "num_seeds": NUM_SEEDS,
            "train_num_seeds": TRAIN_NUM_SEEDS,
            "num_chunks": NUM_CHUNKS,
        },
        "jobs": total,
        "jobs_by_rule": rule_counts(workflow_plan),
        "repeats": arguments.repeats,
        "plan_seconds": seconds["plan"],
        "noop_seconds": seconds["no-op"],
        "touch_seconds": touch,
        "plan_ratio": ratios["plan"],
        "noop_ratio": ratios["no-op"],
        "limit": LIMIT,
        "within_limit": all(ratio <= LIMIT for ratio in ratios.values()),
    }
    arguments.output.parent.mkdir(parents=True, exist_ok=True)
    arguments.output.write_text(json.dumps(figures, indent=2) + "\n")
    print(f"\n{total} jobs in both")
    for state, times in seconds.items():
        for name, values in times.items():
            print(f"{state:6s} {name:9s} median {median(values):6.2f} s  {values}")
    print(f"plan ratio {ratios['plan']}  no-op ratio {ratios['no-op']}  (limit {LIMIT})")
    if not figures["within_limit"]:
        sys.exit(1)


def snakemake_version() -> str:
    from importlib.metadata import version

    return version("snakemake")


if __name__ == "__main__":
    main()
