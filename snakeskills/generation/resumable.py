"""Row-by-row work that survives a kill: generation and LLM judging.

After each batch of ``rows_per_flush`` rows, every row done so far is written atomically to ``<output>.progress``,
which Snakemake does not own, so a rerun processes only the missing rows. The output is written atomically when all
rows are done (it is the completion marker), then the progress file is removed. Each row's result must depend on
the row alone (per-row seeds), so a resumed output equals an uninterrupted one byte for byte.

A progress file's first line is a fingerprint of what decides the results (settings, inputs, model); a rerun with
another fingerprint starts over instead of mixing rows made two ways."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from pathlib import Path

from snakeskills.errors import SnakeskillsError
from snakeskills.io import read_jsonl, write_jsonl

logger = logging.getLogger(__name__)


FINGERPRINT_KEY = "progress_fingerprint"


def progress_path_for(output_path: str | Path) -> Path:
    output_path = Path(output_path)
    return output_path.with_name(output_path.name + ".progress")


def write_progress(progress_path: str | Path, job_fingerprint: str, rows: list[dict]) -> None:
    """Atomically write the progress file: the fingerprint line, then the rows done."""
    write_jsonl(progress_path, [{FINGERPRINT_KEY: job_fingerprint}, *rows])


def read_progress(progress_path: str | Path, job_fingerprint: str) -> list[dict]:
    """The rows done by an earlier run of the same job; none if there is no progress or another job wrote it."""
    progress_path = Path(progress_path)
    if not progress_path.exists():
        return []
    try:
        lines = read_jsonl(progress_path)
    except SnakeskillsError as error:  # damaged by hand or by the disk: its rows cannot be trusted
        logger.warning("progress file is damaged (%s); starting its job over", error)
        return []
    if not lines or lines[0].get(FINGERPRINT_KEY) != job_fingerprint:
        logger.warning("progress file %s was written with other settings or inputs; starting over", progress_path)
        return []
    return lines[1:]


def process_resumable(
    rows: list[dict],
    *,
    process_batch: Callable[[list[dict]], list[dict]],
    output_path: str | Path,
    rows_per_flush: int,
    job_fingerprint: str,
    progress=None,
) -> dict:
    """Run ``process_batch`` over ``rows`` (resuming from the progress file); returns row counts.

    ``job_fingerprint`` (``snakeskills.io.fingerprint``) must change whenever anything deciding the results does.
    ``progress`` (``snakeskills.progress.Progress``), advanced by ``process_batch``, is told the resumed rows.
    """
    progress_path = progress_path_for(output_path)
    done_rows = read_progress(progress_path, job_fingerprint)
    if [row["id"] for row in done_rows] != [row["id"] for row in rows[: len(done_rows)]]:
        logger.warning("progress file %s does not match these rows; starting over", progress_path)
        done_rows = []
    resumed = len(done_rows)
    if resumed:
        logger.info("resuming %s: %d of %d rows already done", output_path, resumed, len(rows))
    if progress is not None:
        progress.resume(resumed)
    for batch_start in range(resumed, len(rows), rows_per_flush):
        batch = rows[batch_start : batch_start + rows_per_flush]
        results = process_batch(batch)
        if len(results) != len(batch):
            raise RuntimeError(f"batch of {len(batch)} rows gave {len(results)} results")
        done_rows.extend(results)
        write_progress(progress_path, job_fingerprint, done_rows)
        logger.info("%d/%d rows of %s saved to its progress file", len(done_rows), len(rows), output_path)
    write_jsonl(output_path, done_rows)
    if progress_path.exists():
        os.unlink(progress_path)
    return {"rows": len(rows), "resumed_rows": resumed, "processed_rows": len(rows) - resumed}
