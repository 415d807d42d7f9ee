"""What must exist on disk before any job is scheduled: the local model folders the config names (a checkpoint
with its tokenizer; no hub downloads at run time) and a writable results folder."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

from snakeskills.backends.specs import backend_spec
from snakeskills.errors import SnakeskillsError


def check_model_paths(config: dict) -> None:
    """Local model folders must exist before anything is scheduled (no hub downloads at run time)."""
    paths = {}
    if not config["model"]["build_tiny"]:
        paths["model.path"] = config["model"]["path"]
    served_sections = [("judge.llm", config["judge"]["llm"]), ("teacher", config["teacher"])]
    synthesis = config["synthesis"]
    if synthesis is not None and synthesis["writer"] == "own":
        served_sections.append(("synthesis", synthesis))
    for key, served in served_sections:
        if served is not None and backend_spec(served["generation"]).needs_local_model:
            paths[f"{key}.model.path"] = served["model"]["path"]
    for key, path in paths.items():
        if not path or not Path(path).is_dir():
            raise SnakeskillsError(
                f"config key {key}: {path!r} is not a folder; give a local Hugging Face checkpoint folder "
                "(download it first, e.g. `hf download <repo> --local-dir <folder>`)"
            )
        problem = checkpoint_folder_problem(Path(path))
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
    names = {path.name for path in folder.iterdir()}
    if "config.json" not in names:
        return "has no config.json: it is not a Hugging Face checkpoint folder (save it with save_pretrained)"
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
