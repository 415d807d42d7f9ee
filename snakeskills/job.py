"""Glue for the workflow's job entry points (``script:`` files, ``snakeskills.cli``): logs, settings, failures."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import sys
from collections.abc import Iterator

from snakeskills.errors import SnakeskillsError

# The environment that makes torch, MKL and oneDNN use one CPU's kernels: float rounding differs between them, so
# a training run follows another trajectory on each (tests and bench/demo_kernels.py run the default under each).
# "native" leaves the machine's own choice; "avx2" is what an AVX2-only CPU runs; "generic" the plain kernels.
CPU_KERNELS = {
    "native": {},
    "avx2": {"ATEN_CPU_CAPABILITY": "avx2", "MKL_ENABLE_INSTRUCTIONS": "AVX2", "ONEDNN_MAX_CPU_ISA": "AVX2"},
    "generic": {"ATEN_CPU_CAPABILITY": "default", "MKL_ENABLE_INSTRUCTIONS": "SSE4_2", "ONEDNN_MAX_CPU_ISA": "SSE41"},
}


def machine_cpu_kernels() -> str:
    """The kernels torch picks on this machine by itself: "avx512", "avx2" or "generic" (CPU_KERNELS's names)."""
    import torch

    capability = torch.backends.cpu.get_cpu_capability().lower()
    return {"default": "generic"}.get(capability, capability if capability in ("avx2", "avx512") else "generic")


INTERRUPTED = (
    "interrupted (Ctrl-C): the job stopped; its finished work is kept (finished files, progress files of the batches "
    "done); run the same command again to resume"
)


def quiet_libraries() -> None:
    """Keep a job's log readable: no progress bars (carriage-return lines in a file) from datasets and
    transformers, and no library deprecation warnings (our own progress lines say how far a job is)."""
    import warnings

    os.environ.setdefault("HF_DATASETS_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("TQDM_DISABLE", "1")  # tqdm >= 4.66 reads its defaults from TQDM_* variables
    os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
    # libraries raise these with stacklevel pointing at the caller, so they are filtered by category
    for category in (FutureWarning, DeprecationWarning):
        warnings.filterwarnings("ignore", category=category)


@contextlib.contextmanager
def script_logging(log_path: str) -> Iterator[logging.Logger]:
    """Send stderr and logging to ``log_path``; a ``SnakeskillsError`` ends the job with its message, Ctrl-C with
    one line (exit status 130; an interrupted training's line, which says what was kept, on the console too), any
    other exception with its traceback in the log as well as on the console.

    The message goes both to the log and to the console, so a user sees at once which file, line
    or config key is at fault, and the job exits non-zero (Snakemake then removes its outputs). A user's own
    function that raised (``registry.UserFunctionError``) also leaves its traceback in the log.
    """
    console = sys.stderr
    open(log_path, "w").close()  # a fresh log, appended to: processes a job launches append their lines to it too
    with open(log_path, "a", encoding="utf-8") as log_file:
        sys.stderr = log_file
        logging.basicConfig(
            stream=log_file, level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s: %(message)s", force=True
        )
        quiet_libraries()
        logger = logging.getLogger("snakeskills")
        if os.environ.get("SLURM_JOB_ID"):
            # on a cluster: ties the log to `sacct -j <id>` and the SLURM log (tests/external/test_slurm.py reads it)
            logger.info("SLURM job %s on %s", os.environ["SLURM_JOB_ID"], os.environ.get("SLURMD_NODENAME", "?"))
        logger.info("job started (pid %d)", os.getpid())
        try:
            yield logger
            logger.info("job finished")
        except SnakeskillsError as error:
            # a user's function that raised (registry.UserFunctionError) adds its traceback, for the log only
            details = getattr(error, "details", "")
            logging.getLogger("snakeskills").error("%s%s", error, f"\n{details}" if details else "")
            print(f"snakeskills error: {error} (log: {log_path})", file=console)
            raise SystemExit(1) from None
        except KeyboardInterrupt as interruption:
            # Ctrl-C reaches every job of the terminal (and Snakemake forwards it: a second one is ignored): one line
            # in the log, no traceback on the console; an interruption with a message (a training's: the step it
            # reached, the checkpoint kept) says it on the console too
            with contextlib.suppress(ValueError):  # off the main thread signals keep their handling
                signal.signal(signal.SIGINT, signal.SIG_IGN)
            message = str(interruption)
            logger.warning(message or INTERRUPTED)
            if message:
                print(f"snakeskills: {message} (log: {log_path})", file=console)
            raise SystemExit(130) from None
        except Exception:
            # a bug: its traceback in the log too (the run's last line sends the user there), and on the console
            logger.exception("job failed")
            raise
        finally:
            sys.stderr = console


def forward_interruptions_to_jobs() -> None:
    """In Snakemake's own process (the Snakefile's ``onstart``): a SIGINT (``kill -INT``, or Ctrl-C in its terminal)
    is also sent to every process of the running jobs that shares Snakemake's process group (those a Ctrl-C in its
    terminal reaches), then Snakemake stops as before ("Terminating processes on user request"). Snakemake's local
    executor sends its jobs no signal on that: it waits for them to end. A job that the terminal's Ctrl-C reached
    too gets the signal twice (a training takes the first one: ``trainer.stop_signals_interrupt``). Where SIGINT has
    a handler other than Python's default (or is ignored), nothing changes."""
    import signal

    import psutil

    if signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        return

    def forward(signum, frame):
        group = os.getpgrp()
        for process in psutil.Process().children(recursive=True):
            with contextlib.suppress(psutil.Error, OSError):
                if os.getpgid(process.pid) == group:
                    process.send_signal(signal.SIGINT)
        signal.default_int_handler(signum, frame)

    signal.signal(signal.SIGINT, forward)


def snakemake_command(snakefile, workdir, configfile, *arguments: str) -> list[str]:
    """The command that runs the real ``snakemake`` on ``snakefile`` in ``workdir`` (tests, benchmarks);
    ``configfile`` None runs the workflow's embedded default."""
    config = [] if configfile is None else ["--configfile", str(configfile)]
    return [
        sys.executable,
        "-m",
        "snakemake",
        "--snakefile",
        str(snakefile),
        "--directory",
        str(workdir),
        *config,
        *arguments,
    ]


class JobSettings(dict):
    """A rule's settings, handed to a ``shell:`` job as one quoted JSON argument: ``{params.name:q}``.

    Snakemake passes a dict param through untouched (a string param would be formatted with
    wildcards), records its ``repr`` for the params rerun trigger, and formats it here as JSON.
    """

    def __init__(self, settings: dict) -> None:
        super().__init__(settings)
        self.json = json.dumps(settings, sort_keys=True)  # formatted 3 times per job when planning

    def __format__(self, format_spec: str) -> str:
        return self.json
