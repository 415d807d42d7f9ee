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


def reasoning_settings(generation: dict) -> dict:
    """The part of a model's ``generation`` settings that decides how its texts become record fields."""
    return {key: generation[key] for key in ("parse_reasoning", "end_reasoning_string")}


def text_fields(text: str, key: str, reasoning: dict) -> dict:
    """A model's text as record fields under the model's ``generation`` settings (``parse_reasoning``,
    ``end_reasoning_string``), as NeMo-Skills' parse_reasoning writes them.

    Off: ``{key: text}``. On: ``key`` gets what follows the last end string, stripped (the answer, what is
    judged), ``_full_{key}`` the whole text (what SFT trains on) and ``_{key}_finished_thinking`` whether the
    end string occurs; a text that never ends its thinking (cut by max_new_tokens, say) answers nothing: ``""``.
    """
    if not reasoning["parse_reasoning"]:
        return {key: text}
    thinking, end, answer = text.rpartition(reasoning["end_reasoning_string"])
    return {key: answer.strip() if end else "", f"_full_{key}": text, f"_{key}_finished_thinking": bool(end)}


def result_fields(result, key: str, reasoning: dict) -> dict:
    """``text_fields`` of a backend's result. A server with a reasoning parser (vLLM's ``--reasoning-parser``,
    DeepSeek's API) returns the thinking apart (``reasoning_content``) and the answer as the text, without the end
    string: with parse_reasoning that text is the answer as it is (parsing it would find no end string and leave
    every answer empty), and the thinking ended unless the text was cut off (``length``) before any answer."""
    if result.reasoning_content is None or not reasoning["parse_reasoning"]:
        return text_fields(result.generation, key, reasoning)
    finished = bool(result.generation.strip()) or result.finish_reason != "length"
    return {
        key: result.generation.strip() if finished else "",
        f"_full_{key}": result.generation,
        f"_{key}_finished_thinking": finished,
    }


def generated_record(record: dict, result, random_seed: int, reasoning: dict) -> dict:
    """NeMo-Skills' generation fields added to the input record (``error`` only for a soft failure;
    ``reasoning_content`` where an OpenAI-compatible server split the model's reasoning off; the reasoning
    fields of ``text_fields`` with ``parse_reasoning``)."""
    generated = {
        **record,
        **result_fields(result, "generation", reasoning),
        "num_generated_tokens": result.num_generated_tokens,
        "finish_reason": result.finish_reason,
        "random_seed": random_seed,
    }
    if result.reasoning_content is not None:
        generated["reasoning_content"] = result.reasoning_content
    if result.error is not None:
        generated["error"] = result.error
    return generated


class ReasoningReport:
    """What a job's log says about thinking: with ``parse_reasoning``, how many texts ended their thinking (a job
    where none did has the wrong end string, or a model that does not think); without it, a warning the first
    time a text holds the end string, the mark of a reasoning model whose thinking would then be judged."""

    def __init__(self, key: str, reasoning: dict, where: str):
        self.key, self.reasoning, self.where = key, reasoning, where
        self.texts = self.finished = 0
        self.warned = False

    def add(self, rows: list[dict]) -> None:
        end = self.reasoning["end_reasoning_string"]
        if self.reasoning["parse_reasoning"]:
            self.texts += len(rows)
            self.finished += sum(row[f"_{self.key}_finished_thinking"] for row in rows)
        elif not self.warned and any(end in row[self.key] for row in rows):
            self.warned = True
            logger.warning(
                "%s: a %s holds %r, the end of a reasoning model's thinking, but parse_reasoning is off in this "
                "model's generation settings: its thinking is judged with its answer; set parse_reasoning: true",
                self.where,
                self.key,
                end,
            )

    def log(self) -> None:
        if not self.reasoning["parse_reasoning"] or self.texts == 0:
            return
        end = self.reasoning["end_reasoning_string"]
        log = logger.warning if self.finished == 0 else logger.info
        log(
            "%s: %d of %d texts ended their thinking with %r; the other %d answer nothing (empty %s)%s",
            self.where,
            self.finished,
            self.texts,
            end,
            self.texts - self.finished,
            self.key,
            "" if self.finished else ": is end_reasoning_string right, and is this a reasoning model?",
        )


def log_model_input(request, backend, reasoning: dict) -> None:
    """Log what the model receives for one row: the exact tokens (special ones written out), the messages
    or the text, so a job's log shows how its prompts were rendered. With parse_reasoning, a model input that
    already ends the thinking (Qwen3's chat template with ``enable_thinking: false`` writes an empty
    ``<think>\n\n</think>``) stops the job: the texts would be all answer, none would hold the end string, and
    every generation would be empty."""
    if request.prompt_token_ids is not None:
        ids = list(request.prompt_token_ids)
        text = backend.tokenizer.decode(ids, skip_special_tokens=False)
        logger.info("model input of the first row (%d tokens, ids start %s): %s", len(ids), ids[:8], json.dumps(text))
    elif request.messages is not None:
        text = None  # rendered by the server
        logger.info("model input of the first row (messages): %s", json.dumps(list(request.messages)))
    else:
        text = request.prompt
        logger.info("model input of the first row (text): %s", json.dumps(request.prompt))
    end = reasoning["end_reasoning_string"]
    if reasoning["parse_reasoning"] and text is not None and text.rstrip().endswith(end.strip()):
        raise SnakeskillsError(
            f"parse_reasoning is true but the model input already ends the thinking (it ends with {end!r}, e.g. "
            "from chat_template_kwargs {enable_thinking: false}): the model's texts are all answer and none will "
            "hold the end string, so every generation would be empty; set parse_reasoning: false in this model's "
            "generation section"
        )


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
    reasoning: dict,
    allow_empty_chunk: bool = False,
) -> dict:
    """Generate the chunk, resuming from the progress file if one exists; returns counts.

    ``reasoning`` (``reasoning_settings``): how the model's texts become the records' fields (``text_fields``).

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
            "reasoning": reasoning,
        },
    )
    records = read_jsonl(prepared_path)
    start, end = chunk_bounds(len(records), chunk_index, num_chunks, allow_empty=allow_empty_chunk)
    first_batch = True
    progress = Progress(end - start, label=f"generate {Path(output_path).name}")
    report = ReasoningReport("generation", reasoning, f"generate {Path(output_path).name}")

    def generate_batch(batch: list[dict]) -> list[dict]:
        nonlocal first_batch
        requests = [
            build_request(backend, prompt_config, record, row_seed(random_seed, record["id"])) for record in batch
        ]
        if first_batch:
            log_model_input(requests[0], backend, reasoning)
            first_batch = False
        results = generate_with_progress(backend, requests, sampling, progress)
        rows = [
            generated_record(record, result, random_seed, reasoning)
            for record, result in zip(batch, results, strict=True)
        ]
        report.add(rows)
        return rows

    counts = process_resumable(
        records[start:end],
        process_batch=generate_batch,
        output_path=output_path,
        rows_per_flush=rows_per_flush,
        job_fingerprint=job_fingerprint,
        progress=progress,
    )
    report.log()
    return {"rows": counts["rows"], "resumed_rows": counts["resumed_rows"], "generated_rows": counts["processed_rows"]}
