"""A training job stopped while Snakemake runs it ends at once, with its interruption line, and a rerun resumes.

``kill -INT`` on the Snakemake process alone ("Terminating processes on user request"): Snakemake's local executor
sends its jobs no signal and waits for them; the workflow passes the SIGINT on to its jobs
(``job.forward_interruptions_to_jobs``). ``kill`` (SIGTERM) on the training job's process alone: the job passes it on
to the processes it launched (``training.processes``). Either way every training process is gone within 30 s (it takes a
second or a few) and the job's log says what was kept."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

import psutil
import pytest
import yaml
from conftest import REPO, run_snakemake

from snakeskills.job import snakemake_command

TUNED = "results/cancel/models/sft-round1/adapter"
LOG = "results/cancel/logs/sft/sft-round1.log"
SFT_STATS = "results/cancel/sft/sft-round1/stats.json"
STARTED = "training a fresh LoRA"
RESUMED = "resuming training from checkpoint"


def cancel_config(tmp_path: Path, checkpoint: Path, processes: int) -> Path:
    """The tiny untrained checkpoint's SFT round on whatever it samples (answers right or wrong), for hundreds of
    thousands of steps with a checkpoint every 5: it is still training whenever the test stops it."""
    config = {
        "experiment": "cancel",
        "model": {"name": "tiny", "build_tiny": False, "path": str(checkpoint)},
        "benchmarks": {
            "arithmetic": {
                "source": "synthetic",
                "synthetic": {
                    "operations": ["+"],
                    "max_operand": 9,
                    "seed": 0,
                    "split_sizes": {"train": 64, "test": 4},
                },
            }
        },
        "train_benchmarks": ["arithmetic"],
        "prompt": {"user": "{problem}="},
        "num_seeds": 1,
        "num_chunks": 1,
        "train_num_seeds": 1,
        # on the CPU whatever the machine has (sbatch on PATH makes 'auto' plan a GPU per job): CPU processes
        "generation": {
            "backend": "hf",
            "device": "cpu",
            "batch_size": 64,
            "sampling": {"temperature": 1.0, "max_new_tokens": 24},
        },
        "judge": {"regex": r"(\d+)"},
        "training": {"processes": processes},
        "sft": {
            "filters": {"correct_only": False},
            "lora": {"r": 4, "alpha": 8},
            "training": {
                "num_epochs": 100000,
                "learning_rate": 1e-3,
                "batch_size": 2 * processes,
                "max_length": 32,
                "checkpoint_steps": 5,
            },
        },
    }
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.fixture(scope="module")
def sampled(tmp_path_factory, tiny_checkpoint) -> Path:
    """A working folder with the round's SFT examples made (from the untrained checkpoint's samples): each test
    copies it, and its Snakemake runs the training job alone."""
    workdir = tmp_path_factory.mktemp("cancel-sampled")
    configfile = cancel_config(workdir, tiny_checkpoint, processes=1)
    process = run_snakemake(workdir, "--cores", "2", SFT_STATS, configfile=configfile)
    assert process.returncode == 0, process.stdout[-3000:] + process.stderr[-3000:]
    return workdir


def start_snakemake(workdir: Path, configfile: Path, output) -> subprocess.Popen:
    """Snakemake making the tuned model, in a session of its own (nothing but the test signals it), with SIGINT at
    its default as in a terminal (a test worker may ignore it, and a child inherits that)."""
    command = snakemake_command(REPO / "Snakefile", workdir, configfile, "--cores", "2", TUNED)
    return subprocess.Popen(
        command,
        cwd=workdir,
        stdout=output,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )


def wait_for(condition, what: str, seconds: float, process: subprocess.Popen):
    """Poll ``condition()`` until it returns something true; fail after ``seconds`` or once ``process`` ended."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        found = condition()
        if found:
            return found
        assert process.poll() is None, f"Snakemake ended (exit {process.returncode}) before {what}"
        time.sleep(0.2)
    raise AssertionError(f"no {what} within {seconds} s")


def log_match(workdir: Path, pattern: str):
    """The first match of ``pattern`` in the training job's log (None while there is none)."""
    try:
        return re.search(pattern, (workdir / LOG).read_text())
    except FileNotFoundError:
        return None


def training_processes(snakemake: subprocess.Popen) -> list[psutil.Process]:
    """The training job's process first, then every process under it (those it launched)."""
    for child in psutil.Process(snakemake.pid).children(recursive=True):
        with contextlib.suppress(psutil.NoSuchProcess):
            if any(part.endswith("train.py") for part in child.cmdline()):
                return [child, *child.children(recursive=True)]
    return []


def still_running(processes: list[psutil.Process]) -> list[str]:
    running = []
    for process in processes:
        with contextlib.suppress(psutil.NoSuchProcess):
            if process.is_running() and process.status() != psutil.STATUS_ZOMBIE:
                running.append(f"{process.pid} {' '.join(process.cmdline())[:120]}")
    return running


def stop_training(workdir: Path, configfile: Path, *, started: str, processes: int, stop: str) -> tuple[int, str]:
    """Run Snakemake until the training job's log says ``started`` and a checkpoint was saved, then ``stop``
    ("snakemake": SIGINT to Snakemake alone, as ``kill -INT``; "terminal": SIGINT to Snakemake's process group, as a
    Ctrl-C in its terminal, which reaches the job twice; "job": SIGTERM to the training job's process alone); every
    training process must end within 30 s, and Snakemake then. Returns the step of the checkpoint the job's
    interruption line says a rerun resumes from, and the log."""
    with open(workdir / "snakemake.out", "w") as output:
        snakemake = start_snakemake(workdir, configfile, output)
        training = []
        try:
            wait_for(lambda: log_match(workdir, started), started, 300, snakemake)
            wait_for(lambda: log_match(workdir, "saved the checkpoint of step"), "checkpoint", 120, snakemake)
            training = wait_for(lambda: training_processes(snakemake), "training processes", 30, snakemake)
            assert len(training) == (1 if processes == 1 else 2 + processes), training  # + launcher, its processes
            if stop == "snakemake":
                snakemake.send_signal(signal.SIGINT)
            elif stop == "terminal":
                os.killpg(snakemake.pid, signal.SIGINT)
            else:
                training[0].send_signal(signal.SIGTERM)
            _ended, alive = psutil.wait_procs(training, timeout=30)
            running = still_running(alive)
            assert not running, f"still training 30 s after the signal: {running}"
            assert snakemake.wait(timeout=60) != 0
        finally:  # whatever a failed check left running
            for process in training:
                with contextlib.suppress(psutil.NoSuchProcess):
                    process.kill()
            with contextlib.suppress(ProcessLookupError):
                os.killpg(snakemake.pid, signal.SIGKILL)
            snakemake.wait()
    console = (workdir / "snakemake.out").read_text()
    if stop != "job":
        assert "Terminating processes on user request" in console, console[-3000:]
    cause = "SIGTERM" if stop == "job" else "Ctrl-C"
    log = (workdir / LOG).read_text()
    # the job's line; with several processes, the main training process says the step it reached in a line of its own
    reached = r" at step \d+ of \d+ \(\d+ %\)"
    kept = re.search(
        rf"snakeskills WARNING: training interrupted \({cause}\)({reached})?; kept: the checkpoint of step (\d+), "
        r"saved .* ago; rerunning the same command resumes from step \2\n",
        log,
    )
    assert kept, log[-3000:]
    assert re.search(rf"training interrupted \({cause}\){reached}; kept", log), log[-3000:]
    return int(kept.group(2)), log


def test_sigint_to_snakemake_ends_the_training_at_once_and_a_rerun_resumes(sampled, tmp_path, tiny_checkpoint):
    """``kill -INT`` on Snakemake, then, on the rerun, Ctrl-C in its terminal (the job gets SIGINT from the terminal
    and from Snakemake: the line is written all the same)."""
    shutil.copytree(sampled, tmp_path, dirs_exist_ok=True)
    configfile = cancel_config(tmp_path, tiny_checkpoint, processes=1)
    kept, _log = stop_training(tmp_path, configfile, started=STARTED, processes=1, stop="snakemake")
    assert not (tmp_path / TUNED).exists()

    resumed, log = stop_training(tmp_path, configfile, started=RESUMED, processes=1, stop="terminal")
    assert f"checkpoint-{kept}" in log_match(tmp_path, rf"{RESUMED} \S+").group(0), log[-3000:]
    assert resumed > kept


def test_the_processes_a_training_job_launched_end_with_it_whatever_stops_it(sampled, tmp_path, tiny_checkpoint):
    """training.processes 2: SIGTERM to the job's process alone (what ``kill`` on the trainer sends), then, on the
    rerun, SIGINT to Snakemake: the launcher and both training processes end with the job."""
    shutil.copytree(sampled, tmp_path, dirs_exist_ok=True)
    configfile = cancel_config(tmp_path, tiny_checkpoint, processes=2)
    kept, _log = stop_training(tmp_path, configfile, started=STARTED, processes=2, stop="job")
    assert not (tmp_path / TUNED).exists()

    resumed, log = stop_training(tmp_path, configfile, started=RESUMED, processes=2, stop="snakemake")
    assert f"checkpoint-{kept}" in log_match(tmp_path, rf"{RESUMED} \S+").group(0), log[-3000:]
    assert resumed > kept
