"""Serving a model as a tool: the expert of the orchestrator example (SmolLM2-135M-Instruct fine-tuned on sums,
``snakeskills.training.arithmetic_expert``) asked by several jobs, through one shared model server per node (what a
model tool always uses) against the obvious alternative, each job loading the expert itself; and its calls batched
(the calls that wait together go as one batch, ``tools.workers`` at once) against one call at a time.

Usage: python bench/model_tools.py [--jobs 3] [--calls 64] [--workers 32] [--output bench/results/model-tools-cpu.json]

A "job" is a process that builds the tool's ``AskedModel`` and asks it ``--calls`` sums (``a+b``, the example's
prompt, temperature 0.7, at most 16 tokens) from a pool of ``--workers`` threads, as the tool loop does; the jobs
run one after the other, as on a node with one free core. Modes:
- ``shared``: the model tool as shipped: the first job starts the shared model server, the others connect to it;
- ``per_job``: each job loads the expert itself (the hf backend in the job's process) and asks it the same way;
- ``one_at_a_time``: the shared server, a pool of one thread (each call its own batch).
Per mode: the wall time of every job (from its start, import and load included) and of all of them, and the calls
per second. The answers of ``shared`` and ``per_job`` are compared: the same seeds give the same answers.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

JOB = r"""
import json, sys, time
started = time.monotonic()
from concurrent.futures import ThreadPoolExecutor
from snakeskills.plan.config import default_config
from snakeskills.prompts import resolve_prompt
from snakeskills.tools import model_tool
from snakeskills.settings.tools import ModelTool, Tools
from snakeskills.tools.model_tool import ModelToolSession, ModelToolSettings

mode, expert, servers, calls, workers, job = sys.argv[1:7]
calls, workers, job = int(calls), int(workers), int(job)
config = default_config()
generation = {**config["generation"], "backend": "hf", "batch_size": 64,
              "sampling": {**config["generation"]["sampling"], "temperature": 0.7, "max_new_tokens": 16},
              "share_model": {**config["generation"]["share_model"], "directory": servers, "idle_seconds": 120}}
prompt = resolve_prompt({**config["prompt"], "system": None, "user": "{problem}=", "chat_template": True})
model = {"path": expert, "dtype": "auto", "trust_remote_code": False}
section = ModelTool.filled({"model": model, "prompt": {}, "generation": generation, "tags": "markdown"},
                           "tools.models.expert")
settings = ModelToolSettings("expert", section.replace(prompt=prompt, model_path=expert))
limits = Tools.filled({"tool": "expert"}, "tools")
if mode == "per_job":  # the alternative: this job loads the expert itself
    from snakeskills.backends import backend_from_config, sampling_params
    from snakeskills.settings.generation import Generation
    asked = model_tool.asked_model(settings)
    local = Generation.from_dict({**generation, "share_model": {**generation["share_model"], "enabled": False}},
                                 "generation")
    asked.backend = backend_from_config(local, model, model_path=expert, adapter_path=None, threads=2,
                                        chat_template=True, chat_template_kwargs={})
    asked.sampling = sampling_params(local.sampling, prompt)
problems = [f"{10 + (7 * i + job) % 90}+{10 + (13 * i + 3 * job) % 90}" for i in range(calls)]
def ask(index):
    session = ModelToolSession(limits, settings, seed=1000 * job + index)
    return session.call(problems[index]).output
with ThreadPoolExecutor(max_workers=workers) as pool:
    answers = list(pool.map(ask, range(calls)))
right = sum(a.strip() == "\\boxed{%d}" % eval(p) for a, p in zip(answers, problems))
print(json.dumps({"seconds": time.monotonic() - started, "answers": answers, "right": right}))
"""


def run_mode(mode: str, expert: str, servers: str, jobs: int, calls: int, workers: int) -> dict:
    results = []
    started = time.monotonic()
    for job in range(jobs):
        command = [sys.executable, "-c", JOB, mode, expert, servers, str(calls), str(workers), str(job)]
        process = subprocess.run(command, capture_output=True, text=True, cwd=REPO, check=False)
        if process.returncode != 0:
            raise SystemExit(process.stderr[-3000:])
        results.append(json.loads(process.stdout.strip().splitlines()[-1]))
    total = time.monotonic() - started
    return {
        "job_seconds": [round(result["seconds"], 2) for result in results],
        "total_seconds": round(total, 2),
        "calls_per_s": round(jobs * calls / total, 2),
        "right": sum(result["right"] for result in results),
        "answers": [result["answers"] for result in results],
    }


def stop_servers(folder: str) -> None:
    """Stop the servers the mode started (they would wait out their idle time)."""
    subprocess.run(["pkill", "-f", f"snakeskills.backends.model_server --socket {folder}"], check=False)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=3)
    parser.add_argument("--calls", type=int, default=64)
    parser.add_argument("--workers", type=int, default=32)
    parser.add_argument("--output", default=str(REPO / "bench" / "results" / "model-tools-cpu.json"))
    arguments = parser.parse_args()
    from snakeskills.training.arithmetic_expert import arithmetic_expert_folder

    expert = str(arithmetic_expert_folder())
    report = {
        "machine": {"cpu": platform.processor() or platform.machine(), "cores": len(os.sched_getaffinity(0))},
        "jobs": arguments.jobs,
        "calls_per_job": arguments.calls,
        "workers": arguments.workers,
        "modes": {},
    }
    for mode, workers in (("shared", arguments.workers), ("per_job", arguments.workers), ("one_at_a_time", 1)):
        with tempfile.TemporaryDirectory(prefix="mt-") as servers:
            try:
                report["modes"][mode] = run_mode(mode, expert, servers, arguments.jobs, arguments.calls, workers)
            finally:
                stop_servers(servers)
        summary = {key: value for key, value in report["modes"][mode].items() if key != "answers"}
        print(mode, json.dumps(summary), flush=True)
    modes = report["modes"]
    report["same_answers_shared_and_per_job"] = modes["shared"]["answers"] == modes["per_job"]["answers"]
    report["per_job_over_shared"] = round(modes["per_job"]["total_seconds"] / modes["shared"]["total_seconds"], 2)
    report["one_at_a_time_over_batched"] = round(
        modes["one_at_a_time"]["total_seconds"] / modes["shared"]["total_seconds"], 2
    )
    for mode in modes.values():
        mode.pop("answers")
    Path(arguments.output).parent.mkdir(parents=True, exist_ok=True)
    Path(arguments.output).write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps({key: report[key] for key in report if key != "modes"}, indent=2))


if __name__ == "__main__":
    main()
