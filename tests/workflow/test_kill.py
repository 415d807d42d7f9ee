"""Kill the running workflow with SIGKILL at random moments, rerun, and lose nothing.

The whole process group (snakemake and every job it started) is killed, as a node failure or a
scheduler's hard kill would. After each kill the run is resumed the way the README says
(``--unlock`` if the lock is stale, then the same command with ``--rerun-incomplete``). The final
numbers must equal an uninterrupted run's, and no file may ever hold a partial JSON line.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import time
from pathlib import Path

import pytest
from conftest import DEFAULT_CONFIG, REPO, RUN_SECONDS, run_snakemake

from snakeskills.job import snakemake_command

pytestmark = pytest.mark.slow

RESULTS = "results/tiny-arithmetic"


def assert_no_partial_json(results: Path) -> int:
    """Every JSONL line, progress file and JSON file under ``results`` parses; returns files checked."""
    checked = 0
    for path in results.rglob("*"):
        if not path.is_file():
            continue
        if path.name.endswith((".jsonl", ".progress")):
            text = path.read_text()
            assert text == "" or text.endswith("\n"), f"{path} ends in a partial line"
            for number, line in enumerate(text.splitlines(), start=1):
                try:
                    json.loads(line)
                except json.JSONDecodeError as error:
                    raise AssertionError(f"{path}:{number} is not a whole JSON line: {error}") from None
            checked += 1
        elif path.suffix == ".json":
            json.loads(path.read_text())
            checked += 1
    return checked


def run_and_kill(workdir: Path, after_seconds: float) -> bool:
    """Start the default run; SIGKILL its whole process group after ``after_seconds``; True if it was killed."""
    command = snakemake_command(REPO / "Snakefile", workdir, DEFAULT_CONFIG, "--cores", "2", "--rerun-incomplete")
    process = subprocess.Popen(
        command, cwd=workdir, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    try:
        process.wait(timeout=after_seconds)
        return False  # finished before the kill
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        time.sleep(0.5)  # let the kernel reap the group
        return True


def test_sigkill_at_random_moments_then_rerun_gives_the_uninterrupted_numbers(finished_run, tmp_path):
    rng = random.Random(20261121)
    # each kill comes after 10-30 % of the uninterrupted run's time on this machine, so three kills always land
    # before the end, however fast the machine (fixed moments of 15-60 s let a fast one finish after two); the
    # resumed progress adds up, so the kills fall in the bootstrap, generation and SFT
    run_seconds = float((finished_run / RUN_SECONDS).read_text())
    kills = []
    for _ in range(4):
        moment = rng.uniform(0.1, 0.3) * run_seconds
        if not run_and_kill(tmp_path, moment):
            break
        kills.append(round(moment, 1))
        assert_no_partial_json(tmp_path / RESULTS)
        unlock = run_snakemake(tmp_path, "--unlock")
        assert unlock.returncode == 0, unlock.stderr[-2000:]
    assert len(kills) >= 3, f"the run finished before enough kills ({kills})"

    final = run_snakemake(tmp_path, "--cores", "2", "--rerun-incomplete")
    assert final.returncode == 0, final.stdout[-3000:] + final.stderr[-3000:]
    results = tmp_path / RESULTS
    assert assert_no_partial_json(results) > 50
    assert not list(results.rglob("*.progress")), "progress files are removed once their job completes"

    resumed = json.loads((results / "eval/summary.json").read_text())
    reference = json.loads((finished_run / RESULTS / "eval/summary.json").read_text())
    for summary in (resumed, reference):  # how long the trainer ran is a cost, not a result: a resumed one runs less
        del summary["sft-round1"]["training/cost"]["wall_seconds"]
        del summary["sft-round1"]["training/cost"]["train_tokens"]  # TRL counts tokens from the resume only
    assert resumed == reference, f"killed at {kills} s"
    for model in ("base", "sft-round1"):
        for seed in range(4):
            relative = f"{RESULTS}/judge/{model}/arithmetic/test/output-rs{seed}.jsonl"
            assert (tmp_path / relative).read_bytes() == (finished_run / relative).read_bytes()
