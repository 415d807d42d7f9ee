"""The one runner of every job that asks a model about each row of a file: generate, the LLM judge and the LLM
contamination check of synthesized problems.

Rows go in; each row becomes one request (or needs none, where its answer is known without the model); the
model's text becomes record fields (``result_fields``: with ``parse_reasoning``, the answer after the thinking);
the rows are written resumably (``resumable``: a progress file under a fingerprint of the inputs and settings, so
a killed job goes on where it stopped and a changed one starts over), with progress lines (rate, ETA), a log of
the first model input, and a report on the model's thinking. Each kind of job only says how a row is asked and
what its output row holds.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from snakeskills.backends import SamplingParams
from snakeskills.errors import SnakeskillsError
from snakeskills.generation.resumable import process_resumable
from snakeskills.io import fingerprint
from snakeskills.progress import Progress, generate_with_progress
from snakeskills.settings.generation import Generation

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class AskedModel:
    """A model as a job asks it: its backend, the resolved prompt, the sampling, how its texts are read
    (``reasoning_settings``), rows per progress flush, and the files besides the job's inputs whose identity
    decides its answers (the workflow passes the job's settings file; progress written under others is not
    resumed). The backend's weights decide them too (``loaded_weights``): they are part of the fingerprint."""

    backend: object
    prompt: dict
    sampling: SamplingParams
    reasoning: dict
    rows_per_flush: int
    fingerprint_files: list = field(default_factory=list)


def loaded_weights(backend) -> str | None:
    """The identity of the weights a backend generates with (``model_server.weights_identity``: its model's and
    adapter's files by size, times and inode): what the shared server's key holds (``weights``), else that of the
    folders a local backend loaded (``model_path``, ``adapter_path``: hf, vllm); ``None`` for a remote model."""
    from snakeskills.backends.model_server import weights_identity

    weights = getattr(backend, "weights", None)
    if isinstance(weights, str):
        return weights
    model_path = getattr(backend, "model_path", None)
    if not isinstance(model_path, str | os.PathLike):
        return None
    return weights_identity(model_path, getattr(backend, "adapter_path", None))


def reasoning_settings(generation: Generation) -> dict:
    """The part of a model's ``generation`` settings that decides how its texts become record fields."""
    return {"parse_reasoning": generation.parse_reasoning, "end_reasoning_string": generation.end_reasoning_string}


def row_seed(random_seed: int, record_id: str) -> int:
    """A 63-bit seed for one (random seed, problem id): stable across runs, chunkings and batches."""
    digest = hashlib.sha256(f"{random_seed}\x00{record_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big") >> 1


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
    string: with parse_reasoning that text is the answer as it is, and the thinking ended unless the text was cut
    off (``length``) before any answer."""
    if result.reasoning_content is None or not reasoning["parse_reasoning"]:
        return text_fields(result.generation, key, reasoning)
    finished = bool(result.generation.strip()) or result.finish_reason != "length"
    return {
        key: result.generation.strip() if finished else "",
        f"_full_{key}": result.generation,
        f"_{key}_finished_thinking": finished,
    }


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


def ask_model_per_row(
    rows: list[dict],
    model: AskedModel,
    *,
    output_path: str | Path,
    inputs: list[str | Path],
    settings: dict,
    key: str,
    label: str,
    request_for: Callable[[dict], object],
    output_row: Callable[[dict, dict, object], dict],
    known: Callable[[dict], str | None] = lambda row: None,
) -> dict:
    """Ask ``model`` about each row and write one output row per row, resumably; returns ``process_resumable``'s
    counts with this run's ``model_calls`` and ``known`` (rows answered without the model).

    ``request_for(row)``: the row's request. ``known(row)``: the certain answer text (the model is not asked), else
    ``None``. The text becomes ``result_fields`` under ``key``, and ``output_row(row, fields, result)`` the output row
    (``result``: the backend's, ``None`` for a known row). ``inputs``, ``settings``, ``model.fingerprint_files`` and
    the loaded weights (``loaded_weights``, so a round retrained in place starts over) make the fingerprint a resumed
    job must match. ``label`` names the job in progress lines."""
    weights = loaded_weights(model.backend)
    job_fingerprint = fingerprint(
        [*inputs, *model.fingerprint_files],
        {
            **settings,
            "prompt": model.prompt,
            "sampling": dataclasses.asdict(model.sampling),
            "reasoning": model.reasoning,
            **({} if weights is None else {"weights": weights}),
        },
    )
    progress = Progress(len(rows), label=label)
    report = ReasoningReport(key, model.reasoning, label)
    calls = {"model_calls": 0, "known": 0}

    def ask_batch(batch: list[dict]) -> list[dict]:
        known_texts = [known(row) for row in batch]
        asked = [index for index, text in enumerate(known_texts) if text is None]
        if len(asked) < len(batch):  # answers known without the model
            progress.advance(len(batch) - len(asked))
        requests = [request_for(batch[index]) for index in asked]
        if requests and calls["model_calls"] == 0:
            log_model_input(requests[0], model.backend, model.reasoning)
        results = generate_with_progress(model.backend, requests, model.sampling, progress) if requests else []
        fields: list[dict | None] = [None if text is None else {key: text} for text in known_texts]
        answers: list[object] = [None] * len(batch)
        for index, result in zip(asked, results, strict=True):
            fields[index], answers[index] = result_fields(result, key, model.reasoning), result
        report.add([fields[index] for index in asked])
        calls["model_calls"] += len(asked)
        calls["known"] += len(batch) - len(asked)
        return [output_row(row, fields[i], answers[i]) for i, row in enumerate(batch)]

    counts = process_resumable(
        rows,
        process_batch=ask_batch,
        output_path=output_path,
        rows_per_flush=model.rows_per_flush,
        job_fingerprint=job_fingerprint,
        progress=progress,
    )
    report.log()
    return {**counts, **calls}
