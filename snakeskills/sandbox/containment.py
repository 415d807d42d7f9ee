"""The sandbox a program a model wrote runs in (``judge.sandbox``): bubblewrap (``bwrap``) by default, or none.

With ``bwrap`` each run gets its own namespaces (``--unshare-all``): no network, its own process tree (all of it dies
with the run), IPC, host name and user namespace, running as ``nobody`` without capabilities. Its file system is
read-only and holds only what Python needs (``/usr`` and the interpreter's prefixes, never the workflow, results or
home folder), a private ``/tmp`` and ``/dev/shm`` of ``TMP_BYTES`` each, its own ``/proc``, and its run folder, the
only writable place, at ``/sandbox``.

With ``none`` a program runs as the job's user with its files and network, under resource limits only. That is an
explicit choice, never a fallback: when bubblewrap cannot start, ``check_sandbox`` stops the plan or the job."""

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
    "conda install -c conda-forge bubblewrap)"
)
NAMESPACES_HINT = (
    "let it make user namespaces (sysctl user.max_user_namespaces above 0, and on Debian "
    "kernel.unprivileged_userns_clone=1; on Ubuntu 24.04 the bubblewrap package's AppArmor profile allows them) "
    "or run the judge as root"
)
LAST_RESORT = (
    "only on a node that is itself a throwaway container, {key}: none runs the programs without one (they "
    "can then read and change your files, read your secrets and reach the network)"
)
# Refusals of the kernel to make the namespaces a sandbox needs, as bubblewrap words them
NAMESPACE_REFUSALS = (
    "namespace",
    "Operation not permitted",
    "Permission denied",
    "uid map",
    "gid map",
    "setting up uid",
    "No space left on device",  # user.max_user_namespaces reached
)
# The environment bubblewrap itself starts with. Not the job's: bubblewrap's own process is the first one inside
# the sandbox's PID namespace, and a program can read its /proc/1/environ (keys the job holds for an LLM judge or
# an API teacher); --clearenv only clears the program's.
LAUNCH_ENVIRONMENT = {"PATH": "/usr/bin:/bin", "LC_ALL": "C"}


SYSTEM_FOLDERS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64")


def _python_folders() -> list[str]:
    """The folders of the interpreter running the judge (its environment and the Python it was made from)."""
    folders = {os.path.realpath(sys.prefix), os.path.realpath(sys.base_prefix), os.path.realpath(sys.exec_prefix)}
    folders.add(os.path.dirname(os.path.dirname(os.path.realpath(sys.executable))))
    folders.add(os.path.dirname(sandbox_python()))
    return sorted(folder for folder in folders if not folder.startswith("/usr"))


def sandbox_python() -> str:
    """The judge's interpreter by a path that exists inside the sandbox: its folder with every link resolved (the
    sandbox mounts only resolved folders), its own name kept (a venv's ``python`` is a link to the Python it was
    made from; started by that link's path it finds its ``pyvenv.cfg`` and the venv's packages)."""
    return os.path.join(
        os.path.realpath(os.path.dirname(os.path.abspath(sys.executable))), os.path.basename(sys.executable)
    )


@functools.cache
def bwrap_path() -> str:
    """bubblewrap's own path, found on the job's ``PATH`` (it starts with ``LAUNCH_ENVIRONMENT``, not the job's)."""
    found = shutil.which("bwrap")
    if found is None:
        raise SnakeskillsError(f"bubblewrap (bwrap) is not installed on this node: {INSTALL_HINT}")
    return found


def bwrap_command(folder: str, command: list[str]) -> list[str]:
    """``command`` run under bubblewrap with ``folder`` (the run's own) as its only writable place and working
    folder; paths in ``command`` under ``folder`` must be given as seen inside (under ``FOLDER``). Start it with
    ``LAUNCH_ENVIRONMENT`` as its environment."""
    mounts = []
    for path in SYSTEM_FOLDERS:  # on a merged-/usr system /bin, /lib... are links into /usr: made as links
        if os.path.islink(path):
            mounts += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            mounts += ["--ro-bind", path, path]
    for path in _python_folders():
        mounts += ["--ro-bind", path, path]
    return [
        bwrap_path(),
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
    """Why ``kind`` cannot run programs on this node and what to do (``None``: it can): for bwrap, whether it is
    installed and starts the judge's Python on a line, as the judge will; the probe's own error when it does not."""
    if kind == "none":
        return None
    if shutil.which("bwrap") is None:
        return f"bubblewrap (bwrap) is not installed on this node: {INSTALL_HINT}"
    python = sandbox_python()
    try:
        with tempfile.TemporaryDirectory(prefix="snakeskills-probe-") as folder:
            probe = bwrap_command(folder, [python, "-I", "-c", "pass"])
            result = subprocess.run(probe, capture_output=True, text=True, timeout=60, env=LAUNCH_ENVIRONMENT)
    except (OSError, subprocess.TimeoutExpired) as error:
        return f"bubblewrap ({bwrap_path()}) did not start: {error}"
    if result.returncode == 0:
        return None
    reason = " | ".join(result.stderr.strip().splitlines()[-3:]) or f"exit status {result.returncode}"
    if result.stderr.lstrip().startswith("bwrap:") and any(word in reason for word in NAMESPACE_REFUSALS):
        return f"bubblewrap ({bwrap_path()}) cannot make a sandbox on this node ({reason}): {NAMESPACES_HINT}"
    return (
        f"a probe run in the sandbox failed: {python} -I -c pass under {bwrap_path()} said: {reason}. bubblewrap "
        "itself started; the interpreter or the folders it needs did not work inside (they are mounted read-only "
        f"by their resolved paths: {', '.join(_python_folders())})"
    )


def check_sandbox(kind: str, key: str = "judge.sandbox") -> None:
    """Stop when ``kind`` cannot run programs here, saying what failed and what to do."""
    problem = sandbox_problem(kind)
    if problem is not None:
        raise SnakeskillsError(f"config key {key} is {kind!r}, but {problem}; {LAST_RESORT.format(key=key)}")


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
