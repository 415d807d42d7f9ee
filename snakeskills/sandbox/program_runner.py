"""One run of a program a model wrote, in a fresh folder, under limits and (by default) in the sandbox: the
process side of the code judge (``code_execution`` builds the programs and reads the verdicts)."""

from __future__ import annotations

import contextlib
import math
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass

from snakeskills.sandbox.containment import (
    LAUNCH_ENVIRONMENT,
    SANDBOX_PROCESSES,
    bwrap_command,
    joined,
    run_cgroups,
    sandbox_python,
)

OUTPUT_LIMIT_BYTES = 16 * 1024 * 1024

# Runs in the child: limits first; then the nonce is read from its pipe (and the pipe closed), the program file
# read and removed (a program cannot read its tests back through __file__) and run as __main__; only when it
# returns does the nonce go to the proof pipe: a program that exits early (sys.exit(0), os._exit(0)) or
# raises leaves no proof, and exit status 0 without the proof is not a pass.
_BOOTSTRAP = """\
import os, resource, sys


def _run():
    limits = (int(value) for value in sys.argv[1:8])
    cpu_seconds, memory_bytes, output_bytes, processes, nonce_fd, proof_fd, report_fd = limits
    resource.setrlimit(resource.RLIMIT_CPU, (cpu_seconds, cpu_seconds))
    resource.setrlimit(resource.RLIMIT_FSIZE, (output_bytes, output_bytes))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if memory_bytes:
        resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
    if processes:
        resource.setrlimit(resource.RLIMIT_NPROC, (processes, processes))
    nonce = os.read(nonce_fd, 64)
    os.close(nonce_fd)
    path = sys.argv[8]
    with open(path, encoding="utf-8") as file:
        source = file.read()
    os.remove(path)
    sys.argv = sys.argv[8:]
    code = compile(source, path, "exec")
    del source
    module = {"__name__": "__main__", "__file__": path, "__builtins__": __builtins__, "__report_fd__": report_fd}
    exec(code, module)
    os.write(proof_fd, nonce)


_run()
"""
STDERR_TAIL_BYTES = 64 * 1024


@dataclass(frozen=True)
class Outcome:
    """One run of a program: its exit status (``None``: killed at the wall-clock limit), the tail of its stderr,
    its stdout (when it was kept), and whether it left the harness's proof that it ran to its end."""

    returncode: int | None
    stderr: str
    stdout: str | None = None
    finished: bool = False
    report: str = ""


def run_once(
    program: str, *, stdin: str | None, timeout_seconds: float, memory_limit_mb, sandbox: str, report: bool = False
) -> Outcome:
    """Run ``program`` once in a fresh folder of its own under the limits, in ``sandbox``; with ``stdin``, feed it
    that text and keep its standard output; with ``report``, keep what it writes to its report file (a call-based
    harness's return values).

    Everything the judge reads comes through handles it opened itself, outside the program's reach: standard
    input, output and error are files in a folder the sandbox does not show (bounded by the file size limit; only
    the tail of stderr is read), the nonce and the proof go through pipes. Every wait is bounded by the wall-clock
    limit; a program past it is killed with everything it started; removing its folders cannot fail the judge.
    In the sandbox, the run's processes and their memory in total are capped by cgroups of its own where the
    judge may make them (``sandbox.run_cgroups``), and by its processes' limits in any case."""
    memory_bytes = memory_limit_mb * 1024 * 1024 if memory_limit_mb else 0
    run_folder = tempfile.mkdtemp(prefix="snakeskills-run-")
    io_folder = tempfile.mkdtemp(prefix="snakeskills-io-")
    nonce = secrets.token_hex(16).encode()
    nonce_read, nonce_write = os.pipe()
    proof_read, proof_write = os.pipe()
    report_file = -1
    cgroups = contextlib.ExitStack()
    try:
        os.write(nonce_write, nonce)
        os.close(nonce_write)
        nonce_write = -1  # closed: never closed twice (another thread may have its number by then)
        with open(os.path.join(run_folder, "solution.py"), "w", encoding="utf-8") as file:
            file.write(program)
        processes = SANDBOX_PROCESSES if sandbox == "bwrap" else 0
        arguments = [str(math.ceil(timeout_seconds) + 1), str(memory_bytes), str(OUTPUT_LIMIT_BYTES), str(processes)]
        stdout_path, stderr_path = os.path.join(io_folder, "stdout"), os.path.join(io_folder, "stderr")
        input_path, report_path = os.path.join(io_folder, "stdin"), os.path.join(io_folder, "report")
        report_file = os.open(report_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600) if report else -1
        arguments += [str(nonce_read), str(proof_write), str(report_file)]
        if sandbox == "bwrap":
            python = sandbox_python()
            command = bwrap_command(run_folder, [python, "-I", "-c", _BOOTSTRAP, *arguments, "solution.py"])
            joining = cgroups.enter_context(run_cgroups(processes=processes, memory_bytes=memory_bytes or None))
            command, environment = joined(joining, command), dict(LAUNCH_ENVIRONMENT)
        else:
            command = [sys.executable, "-I", "-c", _BOOTSTRAP, *arguments, os.path.join(run_folder, "solution.py")]
            environment = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": run_folder}
            environment.update(OMP_NUM_THREADS="1", PYTHONHASHSEED="0")
        with open(input_path, "wb") as file:
            file.write((stdin or "").encode("utf-8"))
        with open(input_path, "rb") as input_file, open(stdout_path, "wb") as output, open(stderr_path, "wb") as error:
            process = subprocess.Popen(
                command,
                cwd=run_folder,
                env=environment,
                stdin=input_file if stdin is not None else subprocess.DEVNULL,
                stdout=output if stdin is not None else subprocess.DEVNULL,
                stderr=error,
                pass_fds=tuple(fd for fd in (nonce_read, proof_write, report_file) if fd >= 0),
                start_new_session=True,
            )
        for descriptor in (nonce_read, proof_write, report_file):
            if descriptor >= 0:
                os.close(descriptor)
        nonce_read = proof_write = report_file = -1
        try:
            returncode = process.wait(timeout=timeout_seconds)
        except subprocess.TimeoutExpired:
            returncode = None
        kill_group(process)  # whatever it left running (in the sandbox, everything died with it already)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=5)
        if returncode is None:
            return Outcome(None, "")
        os.set_blocking(proof_read, False)
        try:
            proof = os.read(proof_read, 64)
        except BlockingIOError:
            proof = b""
        stdout = _read_text(stdout_path, OUTPUT_LIMIT_BYTES) if stdin is not None else None
        reported = _read_text(report_path, OUTPUT_LIMIT_BYTES) if report else ""
        stderr = _read_text(stderr_path, STDERR_TAIL_BYTES, tail=True)
        return Outcome(returncode, stderr, stdout, proof == nonce, reported)
    finally:
        for descriptor in (nonce_read, nonce_write, proof_read, proof_write, report_file):
            if descriptor >= 0:
                os.close(descriptor)
        cgroups.close()
        for folder in (run_folder, io_folder):
            _remove(folder)


def _read_text(path: str, limit: int, *, tail: bool = False) -> str:
    """At most ``limit`` bytes of a file the judge opened (its end with ``tail``), as text."""
    with open(path, "rb") as file:
        if tail:
            file.seek(max(0, os.fstat(file.fileno()).st_size - limit))
        return file.read(limit).decode("utf-8", "replace")


def _remove(folder: str) -> None:
    """Remove a run's folder, whatever the program left in it (folders it made unreadable or unwritable included).
    Only what lies inside ``folder`` is ever made writable again: never the folder's parent (the temporary
    folder every user shares) and never what a link points to."""
    root = os.path.realpath(folder)

    def inside(path: str) -> bool:
        real = os.path.realpath(path)
        return real != root and real.startswith(root + os.sep) and not os.path.islink(path)

    def allow(function, path, _):
        with contextlib.suppress(OSError):
            for entry in (os.path.dirname(path), path):
                if entry == folder or inside(entry):
                    os.chmod(entry, 0o700)
            function(path)

    with contextlib.suppress(OSError):
        shutil.rmtree(folder, onerror=allow)
    shutil.rmtree(folder, ignore_errors=True)


def kill_group(process: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
