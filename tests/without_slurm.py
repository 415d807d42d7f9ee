"""The suite's tests run as on a machine without SLURM, whichever test installed SLURM before them.

The SLURM tests install SLURM's programs with apt-get (into /usr/bin) and start their clusters. Where `sinfo` is on
PATH, every `snakemake` start runs `scontrol show config` (snakemake-executor-plugin-slurm, for its status command's
help), which waits 9-10 s for a controller when none answers: before a test cluster is started, after the machine
restarted, or where the package is installed without a cluster. And where `sbatch` is on PATH a local run plans as on a
SLURM submit host (``snakeskills.backends.gpus.planning_for_gpu_nodes``), so a test's plan depended on whether a SLURM
test had run first. The controlling pytest process therefore replaces each folder of PATH that holds SLURM's programs
or is where apt-get puts them by a folder of links to its other programs (``hide_slurm``), before the workers start;
an install made by the suite links what it added (``link_new_programs``). The SLURM tests run with the whole PATH
(``with_slurm``)."""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path

# SLURM's client programs: a machine without SLURM has none of them
SLURM_TOOLS = ("sbatch", "srun", "salloc", "squeue", "sinfo", "sacct", "sacctmgr", "scontrol", "scancel", "sstat")
# where the controlling process keeps the PATH it was started with, and the folder of the link folders
FULL_PATH = "SNAKESKILLS_TEST_FULL_PATH"
LINK_FOLDERS = "SNAKESKILLS_TEST_PATH_WITHOUT_SLURM"
# where Debian's and Ubuntu's packages put programs: SLURM's land there when a test installs them
PACKAGE_PROGRAMS = "/usr/bin"


def path_without(path: str, hidden: tuple[str, ...], link_folders: Path) -> str:
    """``path`` with every folder that holds one of ``hidden``, or is (a link to) /usr/bin, replaced by a folder under
    ``link_folders`` of links to its other programs. Called again, it links the programs added since."""
    folders = []
    for folder in path.split(os.pathsep):
        if folder and os.path.isdir(folder) and _may_hold(folder, hidden):
            links = link_folders / folder.strip(os.sep).replace(os.sep, "-")
            links.mkdir(parents=True, exist_ok=True)
            for program in os.scandir(folder):
                if program.name not in hidden and not os.path.lexists(links / program.name):
                    with contextlib.suppress(FileExistsError):  # another worker linked it first
                        (links / program.name).symlink_to(program.path)
            folder = str(links)
        folders.append(folder)
    return os.pathsep.join(folders)


def _may_hold(folder: str, hidden: tuple[str, ...]) -> bool:
    if os.path.realpath(folder) == PACKAGE_PROGRAMS:
        return True
    return any(os.path.lexists(os.path.join(folder, name)) for name in hidden)


def hide_slurm(environment) -> Path | None:
    """Set ``environment``'s PATH to one without SLURM's programs, and note the whole one (``with_slurm``). Returns the
    folder of the link folders it made, for its caller to remove at the end; None where PATH was hidden already (a
    pytest session run by a test inherits its suite's: it must not remove them)."""
    if FULL_PATH in environment:
        return None
    link_folders = Path(tempfile.mkdtemp(prefix="snakeskills-test-path-"))
    environment[FULL_PATH] = environment.get("PATH", "")
    environment[LINK_FOLDERS] = str(link_folders)
    environment["PATH"] = path_without(environment[FULL_PATH], SLURM_TOOLS, link_folders)
    return link_folders


def link_new_programs() -> None:
    """After an install: the link folders get the programs it added (SLURM's excepted)."""
    if FULL_PATH in os.environ:
        path_without(os.environ[FULL_PATH], SLURM_TOOLS, Path(os.environ[LINK_FOLDERS]))


def with_slurm(environment: dict) -> dict:
    """``environment`` with the whole PATH, SLURM's programs included (what the SLURM tests run with)."""
    if FULL_PATH not in environment:
        return dict(environment)
    return {**environment, "PATH": environment[FULL_PATH]}


def stand_in_sbatch(folder: Path) -> Path:
    """``folder``, holding a stand-in ``sbatch`` that exits 1 (a plan never calls it). On PATH, it makes a local run
    plan as on a SLURM submit host, whose jobs get GPUs (``planning_for_gpu_nodes``)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "sbatch").write_text("#!/bin/sh\nexit 1\n")
    (folder / "sbatch").chmod(0o755)
    return folder
