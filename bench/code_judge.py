"""Code judge throughput: samples/s of ``judge.extraction: code`` against a plain harness, side by side.

Usage: python bench/code_judge.py [--problems 100] [--seeds 8] [--workers 2] [--distinct]
    [--output bench/results/code_judge.json]

A deterministic HumanEval-shaped workload: each problem is a small function with ten asserts; each of its
``--seeds`` samples is a markdown answer whose ```python block is the right function (half of the right answers
repeat another seed's program word for word, as sampled answers often do; ``--distinct`` makes every program
unique), a wrong one (an assertion fails), one
with a syntax error, one that loops until the time limit (1 in 100), or prose with no code. Timed, alternately:

- ``snakeskills``: ``judge_records`` (program extraction, one fresh limited ``python3 -I`` per distinct program,
  ``--workers`` at a time, the process group killed at the limit), in its bubblewrap sandbox (``judge.sandbox:
  bwrap``, the default: namespaces, read-only mounts, cgroups where it may make them) and without (``none``);
- ``plain``: the obvious hand-written harness: for each sample in turn, the last ```python block written to a
  file and run with ``subprocess.run([python3, file], timeout=...)``.

All give the same verdicts (checked); the ratios are the plain harness's time over ours, and the sandbox's cost.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from snakeskills.judging.judge import judge_records
from snakeskills.settings.judging import RuleJudge

REPO = Path(__file__).resolve().parent.parent
TIMEOUT_SECONDS = 2.0


def problem(index: int) -> tuple[str, str, str]:
    """(right solution, wrong solution, tests) of problem ``index``: f_i(x) = x * (i + 2) + i."""
    name = f"scaled_{index}"
    right = (
        f"def {name}(x):\n    total = 0\n    for _ in range({index + 2}):\n        total += x\n"
        f"    return total + {index}\n"
    )
    wrong = right.replace(f"return total + {index}", f"return total + {index + 1}")
    tests = "\n".join(f"assert {name}({value}) == {value * (index + 2) + index}" for value in range(10)) + "\n"
    return right, wrong, tests


def answer(code: str, rng: random.Random) -> str:
    return f"Here is the solution.\n\n```python\n{code}```\n\nIt loops {rng.randint(2, 9)} times."


def workload(problems: int, seeds: int, seed: int, *, distinct: bool) -> list[dict]:
    rng = random.Random(seed)
    records = []
    for index in range(problems):
        right, wrong, tests = problem(index)
        first_right = None
        for sample in range(seeds):
            kind = rng.random()
            if kind < 0.01:
                generation = answer("def spin():\n    while True:\n        pass\nspin()\n", rng)
            elif kind < 0.05:
                generation = "I am not sure how to solve this."
            elif kind < 0.10:
                generation = answer(right.replace("):", ")", 1), rng)  # a syntax error
            elif kind < 0.35:
                generation = answer(wrong, rng)
            elif first_right is not None and rng.random() < 0.5:
                generation = first_right  # the same text another seed wrote
            else:
                generation = answer(right, rng)
                first_right = first_right or generation
            if distinct:  # no two samples' programs alike: only the parallel runs count
                generation = generation.replace("```python\n", f"```python\n# sample {sample}\n")
            records.append({"id": f"p{index}", "sample": sample, "tests": tests, "generation": generation})
    return records


def plain_harness(records: list[dict]) -> list[bool]:
    verdicts = []
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "solution.py")
        for record in records:
            blocks = re.findall(r"```python\n(.*?)```", record["generation"], re.DOTALL)
            if not blocks:
                verdicts.append(False)
                continue
            Path(path).write_text(blocks[-1] + "\n" + record["tests"], encoding="utf-8")
            try:
                result = subprocess.run(
                    [sys.executable, path], capture_output=True, timeout=TIMEOUT_SECONDS, cwd=folder, check=False
                )
                verdicts.append(result.returncode == 0)
            except subprocess.TimeoutExpired:
                verdicts.append(False)
    return verdicts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--problems", type=int, default=100)
    parser.add_argument("--seeds", type=int, default=8)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--distinct", action="store_true", help="make every sample's program unique (no repeats)")
    parser.add_argument("--output", default=str(REPO / "bench/results/code_judge.json"))
    arguments = parser.parse_args()

    records = workload(arguments.problems, arguments.seeds, seed=0, distinct=arguments.distinct)
    settings = {"extraction": "code", "timeout_seconds": TIMEOUT_SECONDS, "memory_limit_mb": 1024}
    times = {"snakeskills": [], "snakeskills_unsandboxed": [], "plain": []}
    judged = {}
    for _ in range(arguments.repeats):
        for name, sandbox in (("snakeskills", "bwrap"), ("snakeskills_unsandboxed", "none")):
            started = time.perf_counter()
            judge = RuleJudge.from_dict({**settings, "sandbox": sandbox}, "judge")
            judged[name] = judge_records(records, judge, num_workers=arguments.workers)
            times[name].append(time.perf_counter() - started)
        started = time.perf_counter()
        plain = plain_harness(records)
        times["plain"].append(time.perf_counter() - started)
    for name, rows in judged.items():
        ours = [row["symbolic_correct"] for row in rows]
        if ours != plain:
            raise SystemExit(f"{name}: verdicts differ on {sum(a != b for a, b in zip(ours, plain, strict=True))}")
    judged = judged["snakeskills"]
    statuses = [row["execution_status"] for row in judged]
    best = {name: min(values) for name, values in times.items()}
    result = {
        "samples": len(records),
        "distinct_samples": arguments.distinct,
        "distinct_programs": len({row["predicted_answer"] for row in judged if row["predicted_answer"]}),
        "statuses": {status: statuses.count(status) for status in sorted(set(statuses))},
        "workers": arguments.workers,
        "timeout_seconds": TIMEOUT_SECONDS,
        "seconds": times,
        "best_seconds": best,
        "samples_per_second": {name: round(len(records) / seconds, 1) for name, seconds in best.items()},
        "plain_over_snakeskills": round(best["plain"] / best["snakeskills"], 2),
        "sandboxed_over_unsandboxed": round(best["snakeskills"] / best["snakeskills_unsandboxed"], 2),
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
    }
    Path(arguments.output).write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
