"""The suite's PATH without SLURM's programs (tests/without_slurm.py)."""

from __future__ import annotations

import os
import shutil

from without_slurm import FULL_PATH, SLURM_TOOLS, path_without, with_slurm


def program(folder, name):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text("#!/bin/sh\nexit 0\n")
    (folder / name).chmod(0o755)


def test_a_folder_with_slurms_programs_is_replaced_by_links_to_its_others(tmp_path):
    programs, other = tmp_path / "bin", tmp_path / "other"
    for name in ("sinfo", "sbatch", "git"):
        program(programs, name)
    program(other, "tool")
    path = path_without(f"{programs}{os.pathsep}{other}", SLURM_TOOLS, tmp_path / "links")
    assert shutil.which("git", path=path) and shutil.which("tool", path=path) == str(other / "tool")
    assert shutil.which("sinfo", path=path) is None and shutil.which("sbatch", path=path) is None
    # an install adds programs: linked when asked again, SLURM's still hidden
    program(programs, "bwrap")
    program(programs, "scontrol")
    assert shutil.which("bwrap", path=path) is None
    assert path_without(f"{programs}{os.pathsep}{other}", SLURM_TOOLS, tmp_path / "links") == path
    assert shutil.which("bwrap", path=path) and shutil.which("scontrol", path=path) is None


def test_the_suites_tests_see_no_slurm_and_the_slurm_tests_all_of_it():
    """The suite hides SLURM from its tests from the start (conftest.pytest_configure): installed or not, `sinfo` and
    `sbatch` are not on PATH; the SLURM tests' PATH is the one the suite was started with."""
    assert FULL_PATH in os.environ
    assert shutil.which("sinfo") is None and shutil.which("sbatch") is None
    assert shutil.which("python3") and shutil.which("git") and shutil.which("bash")
    assert with_slurm(os.environ)["PATH"] == os.environ[FULL_PATH]
