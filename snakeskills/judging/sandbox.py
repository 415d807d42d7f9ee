"""The sandbox a program a model wrote runs in (``judge.sandbox``): bubblewrap (``bwrap``) by default, or none.

With ``bwrap`` each run gets Linux namespaces of its own (``--unshare-all``): no network (a loopback of its own),
its own process tree (it sees and signals only its own processes, and all of them die with it: ``--die-with-parent``
on a PID namespace whose first process is bubblewrap's), its own IPC, host name and user namespace, in which it runs
as ``nobody`` with no capabilities. Its file system holds only what Python needs, read-only (``/usr`` and the
interpreter's own prefixes, never the workflow, its results or the home folder, unless the interpreter lives
there: then only its folder), a private ``/tmp`` and ``/dev/shm`` of ``TMP_BYTES`` each, a fresh ``/proc`` showing
only its own processes, and its run folder, the only place it can write, mounted at ``/sandbox``.

Without it (``none``) a program runs as the job's user with the job's files and network: only its resource limits
(``code_execution``) hold. That is an explicit choice in the config, never a fallback: when bubblewrap cannot start
on a node, ``check_sandbox`` stops the plan or the job saying what is missing.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

from snakeskills.errors import SnakeskillsError

SANDBOXES = ("bwrap", "none")
FOLDER = "/sandbox"  # where a run's folder appears inside the sandbox
TMP_BYTES = 64 * 1024 * 1024
SANDBOX_PROCESSES = 64  # processes a sandboxed run may have at once, its own included
NOBODY = 65534
INSTALL_HINT = (
    "install bubblewrap (Debian/Ubuntu: apt-get install bubblewrap; Fedora/RHEL: dnf install bubblewrap; conda: "
    "conda install -c conda-forge bubblewrap), or set judge.sandbox: none to run the programs models write "
    "without one (they can then read and change your files and reach the network)"
)


SYSTEM_FOLDERS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64")


def _python_folders() -> list[str]:
    """The folders of the interpreter running the judge (its environment and the Python it was made from)."""
    folders = {os.path.realpath(sys.prefix), os.path.realpath(sys.base_prefix), os.path.realpath(sys.exec_prefix)}
    folders.add(os.path.dirname(os.path.dirname(os.path.realpath(sys.executable))))
    return sorted(folder for folder in folders if not folder.startswith("/usr"))


def bwrap_command(folder: str, command: list[str]) -> list[str]:
    """``command`` run under bubblewrap with ``folder`` (the run's own) as its only writable place and working
    folder; paths in ``command`` under ``folder`` must be given as seen inside (under ``FOLDER``)."""
    mounts = []
    for path in SYSTEM_FOLDERS:  # on a merged-/usr system /bin, /lib... are links into /usr: made as links
        if os.path.islink(path):
            mounts += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            mounts += ["--ro-bind", path, path]
    for path in _python_folders():
        mounts += ["--ro-bind", path, path]
    return [
        "bwrap",
        "--unshare-all",
        "--die-with-parent",
        "--new-session",
        "--cap-drop",
        "ALL",
        "--uid",
        str(NOBODY),
        "--gid",
        str(NOBODY),
        # the private folders first: a read-only mount below one of them (a venv in /tmp) must stay visible
        "--proc",
        "/proc",
        "--dev",
        "/dev",
        "--size",
        str(TMP_BYTES),
        "--tmpfs",
        "/dev/shm",
        "--size",
        str(TMP_BYTES),
        "--tmpfs",
        "/tmp",
        *mounts,
        "--bind",
        folder,
        FOLDER,
        "--chdir",
        FOLDER,
        "--clearenv",
        "--setenv",
        "PATH",
        "/usr/bin:/bin",
        "--setenv",
        "HOME",
        FOLDER,
        "--setenv",
        "OMP_NUM_THREADS",
        "1",
        "--setenv",
        "PYTHONHASHSEED",
        "0",
        "--",
        *command,
    ]


@functools.cache
def sandbox_problem(kind: str) -> str | None:
    """Why ``kind`` cannot run programs on this node (``None``: it can): for bwrap, whether it is installed and
    starts a Python that runs a line."""
    if kind == "none":
        return None
    if shutil.which("bwrap") is None:
        return "bubblewrap (bwrap) is not installed on this node"
    try:
        with tempfile.TemporaryDirectory(prefix="snakeskills-probe-") as folder:
            probe = bwrap_command(folder, [sys.executable, "-I", "-S", "-c", "pass"])
            result = subprocess.run(probe, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as error:
        return f"bubblewrap (bwrap) did not start: {error}"
    if result.returncode != 0:
        reason = (result.stderr.strip().splitlines() or [f"exit status {result.returncode}"])[-1]
        return (
            f"bubblewrap (bwrap) cannot make a sandbox on this node ({reason}); it needs user namespaces "
            "(sysctl kernel.unprivileged_userns_clone=1, user.max_user_namespaces > 0) or to run as root"
        )
    return None


def check_sandbox(kind: str, key: str = "judge.sandbox") -> None:
    """Stop when ``kind`` cannot run programs here, saying what is missing and the way out."""
    problem = sandbox_problem(kind)
    if problem is not None:
        raise SnakeskillsError(f"config key {key} is {kind!r}, but {problem}: {INSTALL_HINT}")


# ---------------------------------------------------------------- the processes and memory of a whole run

CGROUPS = "/sys/fs/cgroup"


def _own_cgroups() -> dict[str, str]:
    """This process's cgroup per controller (cgroup v1: ``pids``, ``memory``) or ``""`` for the unified (v2)
    hierarchy, from /proc/self/cgroup."""
    found = {}
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _, controllers, path = line.split(":", 2)
            for controller in controllers.split(",") if controllers else [""]:
                found[controller] = path
    return found


def _limit_files(processes: int, memory_bytes: int | None) -> list[tuple[str, dict[str, str]]]:
    """(the folder of a new cgroup, its limit files) for each hierarchy that can cap a run: v1's pids and memory
    controllers, or v2's unified one with both."""
    own = _own_cgroups()
    name = f"snakeskills-run-{uuid.uuid4().hex}"
    if os.path.isfile(os.path.join(CGROUPS, "cgroup.controllers")):  # v2 mounted at the root
        limits = {"pids.max": str(processes)}
        if memory_bytes:
            limits |= {"memory.max": str(memory_bytes), "memory.swap.max": "0"}
        return [(os.path.join(CGROUPS, own.get("", "/").lstrip("/"), name), limits)]
    plans = [(os.path.join(CGROUPS, "pids", own.get("pids", "/").lstrip("/"), name), {"pids.max": str(processes)})]
    if memory_bytes:
        memory = os.path.join(CGROUPS, "memory", own.get("memory", "/").lstrip("/"), name)
        plans.append((memory, {"memory.limit_in_bytes": str(memory_bytes)}))
    return plans


@contextlib.contextmanager
def run_cgroups(*, processes: int, memory_bytes: int | None) -> Iterator[list[str]]:
    """New cgroups capping the processes (and memory, in total) of one run, where this process may make them (as
    root, or with a delegated cgroup); yields the ``cgroup.procs`` files the run joins (``joined``), empty where
    none could be made; removes them afterwards."""
    created = []
    for folder, limits in _limit_files(processes, memory_bytes):
        try:
            os.mkdir(folder)
            created.append(folder)
            for file_name, value in limits.items():
                with open(os.path.join(folder, file_name), "w") as file:
                    file.write(value)
        except OSError:
            continue  # this hierarchy cannot cap the run; the rest may
    try:
        yield [os.path.join(folder, "cgroup.procs") for folder in created]
    finally:
        for folder in created:
            with contextlib.suppress(OSError):
                os.rmdir(folder)


def joined(procs_files: list[str], command: list[str]) -> list[str]:
    """``command`` run after joining the cgroups (``run_cgroups``): a shell writes its own pid into each
    ``cgroup.procs`` and then becomes the command, so that nothing it starts is outside them."""
    if not procs_files:
        return command
    script = 'n=$1; shift; while [ "$n" -gt 0 ]; do echo $$ > "$1" || exit 125; shift; n=$((n-1)); done; exec "$@"'
    return ["/bin/sh", "-c", script, "sh", str(len(procs_files)), *procs_files, *command]


@functools.cache
def cgroups_available() -> bool:
    """Whether this process can cap a run's processes and memory with cgroups of its own (``run_cgroups``)."""
    with run_cgroups(processes=SANDBOX_PROCESSES, memory_bytes=1 << 30) as procs_files:
        return len(procs_files) == len(_limit_files(SANDBOX_PROCESSES, 1 << 30)) and bool(procs_files)


def sandbox_limits(kind: str, memory_limit_mb: int | None) -> str:
    """What caps a run's processes and memory, for the judge's log."""
    if kind == "none":
        return "sandbox none: programs run as the job's user, with its files and network; memory capped per process"
    if cgroups_available():
        memory = f" and {memory_limit_mb} MB" if memory_limit_mb else ""
        return f"sandbox bwrap; each run capped at {SANDBOX_PROCESSES} processes{memory} in all (cgroups)"
    return (
        f"sandbox bwrap; no cgroup can be made here: memory is capped per process, and processes at "
        f"{SANDBOX_PROCESSES} per run only when the judge is not root (RLIMIT_NPROC in the run's user namespace)"
    )
