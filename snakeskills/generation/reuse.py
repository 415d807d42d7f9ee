"""A finished generate job reused by content: the evaluations of a round's checkpoints (``plan/validation.py``).

Snakemake reruns every job downstream of a rerun one, by time. A round rerun from the start (``-R sft``, an upstream
file rewritten with the same bytes) that reaches the same checkpoint bit for bit would then evaluate it again. A
generate job whose settings ask for it (``GenerationJob.reuse_by_content``) keeps a hard link to its finished output
beside it (``<output>.reuse``, which Snakemake does not own) with the hash of what decides its rows: the checkpoint's
weights by their bytes, the base model's folder by its files' identity, the problems by their bytes, the settings
and the job's seed and chunk. A later run of the job with the same hash takes those rows back without loading the
model; another hash runs the job as usual and replaces them."""

from __future__ import annotations

import hashlib
import json
import logging
import os
from pathlib import Path

from snakeskills.io import fingerprint

logger = logging.getLogger(__name__)

KEPT_SUFFIX = ".reuse"
KEY_SUFFIX = ".reuse.json"
# written into a weights folder by the trainer beside the weights: not part of what they are
NOT_WEIGHTS = {"training_metrics.json"}


def _folder_digest(folder: Path, digest) -> None:
    """Every file of ``folder`` by its bytes, in name order; a JSON config by its parsed content with its lists of
    names sorted (peft writes ``target_modules`` from a set, in a different order each process)."""
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        name = path.relative_to(folder).as_posix()
        if name in NOT_WEIGHTS:
            continue
        digest.update(name.encode() + b"\0")
        if path.suffix == ".json":
            content = json.loads(path.read_text(encoding="utf-8"))
            if isinstance(content, dict):
                content = {
                    key: sorted(value) if isinstance(value, list) and all(isinstance(v, str) for v in value) else value
                    for key, value in content.items()
                }
            digest.update(json.dumps(content, sort_keys=True).encode())
        else:
            with open(path, "rb") as handle:
                for block in iter(lambda: handle.read(1 << 20), b""):
                    digest.update(block)
        digest.update(b"\0")


def content_key(settings: dict, *, weights: str, base_model: str | None, split: str, wildcards: dict) -> str:
    """The hash of what decides a generate job's rows (the module's docstring); ``settings``: its settings (the
    job's ``GenerationJob.to_dict``), whose paths the bytes and identities stand in for."""
    digest = hashlib.sha256()
    decisive = {key: value for key, value in settings.items() if key not in ("split", "model_path", "adapter_path")}
    job = {key: wildcards[key] for key in ("seed", "chunk", "num_chunks")}
    digest.update(json.dumps([decisive, job], sort_keys=True, default=str).encode())
    _folder_digest(Path(weights), digest)
    digest.update(Path(split).read_bytes())
    if base_model is not None:  # a LoRA checkpoint on the base model: the base model as its files are
        files = sorted(str(p) for p in Path(base_model).rglob("*") if p.is_file())
        digest.update(fingerprint(files, {}).encode())
    return digest.hexdigest()


def restore(output_path: str | Path, key: str) -> bool:
    """Put back the rows an earlier run of the same job kept with the same ``key``; False where there are none."""
    output_path = Path(output_path)
    kept, key_path = Path(f"{output_path}{KEPT_SUFFIX}"), Path(f"{output_path}{KEY_SUFFIX}")
    try:
        same = json.loads(key_path.read_text())["key"] == key
    except (OSError, ValueError, KeyError, TypeError):
        return False
    if not same or not kept.is_file():
        return False
    staging = output_path.with_name(f".{output_path.name}.restoring")
    staging.unlink(missing_ok=True)
    os.link(kept, staging)
    os.replace(staging, output_path)
    logger.info(
        "reused the rows of an earlier run of this job: the same checkpoint weights (by their bytes), problems and "
        "settings (%s)",
        key[:16],
    )
    return True


def keep(output_path: str | Path, key: str) -> None:
    """Keep a hard link to the finished ``output_path`` and its ``key`` for a later run of the job (``restore``)."""
    output_path = Path(output_path)
    kept, key_path = Path(f"{output_path}{KEPT_SUFFIX}"), Path(f"{output_path}{KEY_SUFFIX}")
    key_path.unlink(missing_ok=True)
    kept.unlink(missing_ok=True)
    os.link(output_path, kept)
    key_path.write_text(json.dumps({"key": key}) + "\n")
