"""Wheels of the project's Python dependencies that an offline GPU node lacks, for its Python version.

Usage: python bench/gpu_wheels.py --have NAMES.txt [--skip NAME ...] [--python-version 3.12] [--dest .whl]

GPU nodes often reach no package index, and their images hold CUDA torch, transformers and friends but not
snakemake, trl, datasets or polars. This walks the requirements of the installed ``snakeskills`` here (its
dependencies, their dependencies, ...), skips every distribution named in ``--have`` (one name per line or
separated by spaces: the node's ``pip list``) and torch (the node's CUDA build stays), and downloads the rest
in the versions installed here as wheels for the node's Python (manylinux x86-64); a package published only as
a source archive is built into a wheel here. ``--skip`` leaves out what the run on the node does not import:
``bash bench/gpu.sh`` needs no polars (``--skip polars --skip polars-runtime-32``: 28 MiB of wheels instead of
80, under a 64 MiB transfer). On the node::

    python3 -m pip install --no-index --no-deps --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD
    bash bench/gpu.sh
"""

from __future__ import annotations

import argparse
import importlib.metadata as metadata
import re
import subprocess
import sys
from pathlib import Path

ALWAYS_THERE = {"torch", "snakeskills"}  # the node's CUDA torch; the project itself travels as source
PLATFORMS = ["manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64", "manylinux1_x86_64"]


def normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_name(requirement: str) -> str:
    return re.split(r"[ <>=!~;\[(]", requirement, maxsplit=1)[0]


def applies(requirement: str, python_version: str) -> bool:
    """A requirement without an extra, whose marker (if any) holds on the node's Python."""
    if "extra ==" in requirement:
        return False
    if ";" not in requirement:
        return True
    from packaging.markers import Marker

    environment = {"python_version": python_version, "platform_machine": "x86_64", "sys_platform": "linux"}
    return Marker(requirement.split(";", 1)[1]).evaluate(environment)


def missing_distributions(have: set[str], python_version: str) -> list[tuple[str, str]]:
    """(name, version) of every installed distribution the project needs and the node lacks."""
    skipped = {normalized(name) for name in have | ALWAYS_THERE}
    seen: set[str] = set()
    needed: list[tuple[str, str]] = []
    pending = [requirement for requirement in metadata.requires("snakeskills") or [] if applies(requirement, "3.99")]
    while pending:
        name = requirement_name(pending.pop())
        if normalized(name) in seen:
            continue
        seen.add(normalized(name))
        try:
            distribution = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            sys.exit(f"bench/gpu_wheels.py: {name} is needed but not installed here: pip install -e . first")
        if normalized(name) not in skipped:
            needed.append((distribution.metadata["Name"], distribution.version))
        pending += [requirement for requirement in distribution.requires or [] if applies(requirement, python_version)]
    return sorted(needed)


def download(name: str, version: str, python_version: str, dest: Path) -> None:
    platforms = [argument for platform in PLATFORMS for argument in ("--platform", platform)]
    binary = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "-d", str(dest)]
    binary += ["--python-version", python_version, "--implementation", "cp", *platforms, f"{name}=={version}"]
    if subprocess.run(binary, capture_output=True).returncode == 0:
        return
    built = [sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", str(dest), f"{name}=={version}"]
    subprocess.run(built, check=True, capture_output=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--have", type=Path, required=True, help="the node's distributions, one name per line")
    parser.add_argument("--skip", action="append", default=[], help="a distribution to leave out (repeatable)")
    parser.add_argument("--python-version", default="3.12", help="the node's Python, major.minor")
    parser.add_argument("--dest", type=Path, default=Path(".whl"))
    arguments = parser.parse_args()
    have = set(arguments.have.read_text().split()) | set(arguments.skip)
    arguments.dest.mkdir(parents=True, exist_ok=True)
    for name, version in missing_distributions(have, arguments.python_version):
        print(f"{name}=={version}", flush=True)
        download(name, version, arguments.python_version, arguments.dest)
    size = sum(path.stat().st_size for path in arguments.dest.glob("*.whl"))
    print(f"{len(list(arguments.dest.glob('*.whl')))} wheels, {size / 2**20:.1f} MiB in {arguments.dest}")


if __name__ == "__main__":
    main()
