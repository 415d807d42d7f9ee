"""Generation of one chunk of one split for one random seed.

Chunk k of N is the slice ``[k*n//N, (k+1)*n//N)`` of the prepared split, computed at run time.
Rows are generated in batches with a progress file, so a killed job resumes where it stopped
(see ``resumable``). Because every row is sampled from its own seed (``row_seed``), the resumed
output equals an uninterrupted one.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
from pathlib import Path

from snakeskills.backends import SamplingParams, build_request
from snakeskills.errors import SnakeskillsError
from snakeskills.io import fingerprint, read_jsonl
from snakeskills.progress import Progress, generate_with_progress
from snakeskills.resumable import process_resumable

logger = logging.getLogger(__name__)


def chunk_bounds(num_rows: int, chunk_index: int, num_chunks: int, *, allow_empty: bool = False) -> tuple[int, int]:
    """Rows [start, end) of one chunk. A prepared split must have a row per chunk (num_chunks above its size is a
    config mistake); a synthesized split (``allow_empty``), whose size is known only once made, may leave chunks
    empty."""
    if num_chunks < 1:
        raise SnakeskillsError(f"num_chunks must be at least 1, got {num_chunks}")
    if not 0 <= chunk_index < num_chunks:
        raise SnakeskillsError(f"chunk index {chunk_index} is outside 0..{num_chunks - 1}")
    if num_chunks > num_rows and not allow_empty:
        raise SnakeskillsError(
            f"num_chunks={num_chunks} is more than the {num_rows} rows of the split; lower num_chunks"
        )
    return num_rows * chunk_index // num_chunks, num_rows * (chunk_index + 1) // num_chunks


def row_seed(random_seed: int, record_id: str) -> int:
    """A 63-bit seed for one (random seed, problem id): stable across runs, chunkings and batches."""
    digest = hashlib.sha256(f"{random_seed}\x00{record_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big") >> 1


def generated_record(record: dict, result, random_seed: int) -> dict:
    """NeMo-Skills' generation fields added to the input record (``error`` only for a soft failure)."""
    generated = {
        **record,
        "generation": result.generation,
        "num_generated_tokens": result.num_generated_tokens,
        "finish_reason": result.finish_reason,
        "random_seed": random_seed,
    }
    if result.error is not None:
        generated["error"] = result.error
    return generated


def log_model_input(request, backend) -> None:
    """Log what the model receives for one row: the exact tokens (special ones written out), the messages
    or the text, so a job's log shows how its prompts were rendered."""
    if request.prompt_token_ids is not None:
        ids = list(request.prompt_token_ids)
        text = backend.tokenizer.decode(ids, skip_special_tokens=False)
        logger.info("model input of the first row (%d tokens, ids start %s): %s", len(ids), ids[:8], json.dumps(text))
    elif request.messages is not None:
        logger.info("model input of the first row (messages): %s", json.dumps(list(request.messages)))
    else:
        logger.info("model input of the first row (text): %s", json.dumps(request.prompt))


def generate_chunk(
    *,
    backend,
    prepared_path: str | Path,
    output_path: str | Path,
    chunk_index: int,
    num_chunks: int,
    random_seed: int,
    prompt_config: dict,
    sampling: SamplingParams,
    rows_per_flush: int,
    fingerprint_files: list[str | Path],
    allow_empty_chunk: bool = False,
) -> dict:
    """Generate the chunk, resuming from the progress file if one exists; returns counts.

    ``fingerprint_files`` are the files, besides the prepared split, whose identity decides the
    generations (the model): the workflow passes the job's settings file, rewritten whenever the
    model, adapter or split changes. Progress written under other files or arguments is not resumed.
    """
    job_fingerprint = fingerprint(
        [prepared_path, *fingerprint_files],
        {
            "chunk_index": chunk_index,
            "num_chunks": num_chunks,
            "random_seed": random_seed,
            "prompt": prompt_config,
            "sampling": dataclasses.asdict(sampling),
        },
    )
    records = read_jsonl(prepared_path)
    start, end = chunk_bounds(len(records), chunk_index, num_chunks, allow_empty=allow_empty_chunk)
    first_batch = True
    progress = Progress(end - start, label=f"generate {Path(output_path).name}")

    def generate_batch(batch: list[dict]) -> list[dict]:
        nonlocal first_batch
        requests = [
            build_request(backend, prompt_config, record, row_seed(random_seed, record["id"])) for record in batch
        ]
        if first_batch:
            log_model_input(requests[0], backend)
            first_batch = False
        results = generate_with_progress(backend, requests, sampling, progress)
        return [generated_record(record, result, random_seed) for record, result in zip(batch, results, strict=True)]

    counts = process_resumable(
        records[start:end],
        process_batch=generate_batch,
        output_path=output_path,
        rows_per_flush=rows_per_flush,
        job_fingerprint=job_fingerprint,
        progress=progress,
    )
    return {"rows": counts["rows"], "resumed_rows": counts["resumed_rows"], "generated_rows": counts["processed_rows"]}
