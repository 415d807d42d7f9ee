"""The project as a new user gets it, and the docs' commands run in it as written.

``fresh_clone`` copies what a clone of this checkout holds: every file git would commit from it (tracked files as
they are now, and new files it does not ignore), links kept as links, and nothing a run, a build or a test left
(results, .snakemake, caches). A `git clone` would miss the uncommitted changes under test. ``run_command`` runs a
line of the README (`python3 -m snakemake ...`, pipes included) with bash in that folder, `python3` being the
Python that runs the tests."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO


def fresh_clone(destination: Path) -> Path:
    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip("a fresh clone needs git and a git checkout of the project")
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        capture_output=True,
        text=True,
        check=True,
        cwd=REPO,
    ).stdout
    for name in filter(None, listed.split("\0")):
        source = REPO / name
        if not os.path.lexists(source):  # deleted in the working tree, not yet in git
            continue
        (destination / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, destination / name, follow_symlinks=False)
    return destination


def run_command(folder: Path, command: str, *, env: dict | None = None, timeout: int = 300):
    """``command`` run by bash in ``folder``; returns the process (output captured as text)."""
    python = folder.parent / f"{folder.name}-python"
    python.mkdir(exist_ok=True)
    # a script that starts the tests' own interpreter by its path (a venv's python stays in its venv)
    (python / "python3").write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
    (python / "python3").chmod(0o755)
    environment = dict(os.environ if env is None else env)
    environment["PATH"] = f"{python}{os.pathsep}{environment.get('PATH', '')}"
    return subprocess.run(
        ["bash", "-c", f"set -o pipefail; {command}"],
        capture_output=True,
        text=True,
        cwd=folder,
        env=environment,
        timeout=timeout,
    )
