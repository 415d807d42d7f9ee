"""Generation of one chunk of one split for one random seed.

Chunk k of N is the slice ``[k*n//N, (k+1)*n//N)`` of the prepared split, computed at run time.
Rows are generated in fixed batches; after each batch the rows so far are written (atomically)
to a progress file next to the output. Snakemake does not own that file, so it survives a
killed or failed job, and the rerun generates only the rows that are missing. Because every row
is sampled from its own seed (``row_seed``), the resumed output equals an uninterrupted one.
"""

from __future__ import annotations

import hashlib
import logging
import os
from pathlib import Path

from snakeskills.backends import GenerationRequest, SamplingParams
from snakeskills.errors import SnakeskillsError
from snakeskills.io import read_jsonl, touch_done, write_jsonl
from snakeskills.prompts import format_prompt

logger = logging.getLogger(__name__)

GENERATED_FIELDS = ("generation", "num_generated_tokens", "finish_reason", "random_seed")


def chunk_bounds(num_rows: int, chunk_index: int, num_chunks: int) -> tuple[int, int]:
    if num_chunks < 1:
        raise SnakeskillsError(f"num_chunks must be at least 1, got {num_chunks}")
    if not 0 <= chunk_index < num_chunks:
        raise SnakeskillsError(f"chunk index {chunk_index} is outside 0..{num_chunks - 1}")
    if num_chunks > num_rows:
        raise SnakeskillsError(
            f"num_chunks={num_chunks} is more than the {num_rows} rows of the split; lower num_chunks"
        )
    return num_rows * chunk_index // num_chunks, num_rows * (chunk_index + 1) // num_chunks


def row_seed(random_seed: int, record_id: str) -> int:
    """A 63-bit seed for one (random seed, problem id): stable across runs, chunkings and batches."""
    digest = hashlib.sha256(f"{random_seed}\x00{record_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big") >> 1


def progress_path_for(output_path: str | Path) -> Path:
    output_path = Path(output_path)
    return output_path.with_name(output_path.name + ".progress")


def generate_chunk(
    *,
    backend,
    prepared_path: str | Path,
    output_path: str | Path,
    done_path: str | Path,
    chunk_index: int,
    num_chunks: int,
    random_seed: int,
    prompt_config: dict,
    sampling: SamplingParams,
    rows_per_flush: int,
) -> dict:
    """Generate the chunk, resuming from the progress file if one exists; returns counts."""
    records = read_jsonl(prepared_path)
    start, end = chunk_bounds(len(records), chunk_index, num_chunks)
    chunk = records[start:end]
    progress_path = progress_path_for(output_path)
    done_rows = read_jsonl(progress_path) if progress_path.exists() else []
    if [row["id"] for row in done_rows] != [record["id"] for record in chunk[: len(done_rows)]]:
        logger.warning("progress file %s does not match this chunk; starting over", progress_path)
        done_rows = []
    resumed = len(done_rows)
    if resumed:
        logger.info("resuming %s: %d of %d rows already generated", output_path, resumed, len(chunk))
    tokenizer = getattr(backend, "tokenizer", None)
    for batch_start in range(resumed, len(chunk), rows_per_flush):
        batch = chunk[batch_start : batch_start + rows_per_flush]
        requests = [
            GenerationRequest(
                prompt=format_prompt(prompt_config, record, tokenizer),
                seed=row_seed(random_seed, record["id"]),
            )
            for record in batch
        ]
        results = backend.generate(requests, sampling)
        for record, result in zip(batch, results, strict=True):
            done_rows.append(
                {
                    **record,
                    "generation": result.generation,
                    "num_generated_tokens": result.num_generated_tokens,
                    "finish_reason": result.finish_reason,
                    "random_seed": random_seed,
                }
            )
        write_jsonl(progress_path, done_rows)
        logger.info("generated %d/%d rows of %s", len(done_rows), len(chunk), output_path)
    write_jsonl(output_path, done_rows)
    touch_done(done_path)
    if progress_path.exists():
        os.unlink(progress_path)
    return {"rows": len(chunk), "resumed_rows": resumed, "generated_rows": len(chunk) - resumed}
