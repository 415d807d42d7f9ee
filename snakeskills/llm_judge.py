"""LLM-as-a-judge: a model reads the problem, the expected and the predicted answer and says Yes or No.

Runs through the same backend interface as generation (``hf`` here; any registered backend).
Adds ``judgement`` (the judge's text) and ``judge_correct`` (its verdict) to each judged record.
The model is not called where the verdict is certain: no extracted answer is "No", and a predicted
answer that equals the expected one character for character (after stripping spaces) is "Yes";
those judgements say so in their text. Resumable like generation (progress file, per-row seeds).
"""

from __future__ import annotations

import dataclasses
import logging
import re
from pathlib import Path

from snakeskills.backends import SamplingParams, build_request
from snakeskills.errors import SnakeskillsError
from snakeskills.generate import ReasoningReport, result_fields, row_seed
from snakeskills.io import fingerprint, read_jsonl
from snakeskills.progress import Progress, generate_with_progress
from snakeskills.resumable import process_resumable

logger = logging.getLogger(__name__)

JUDGEMENT = re.compile(r"judgement\s*:\s*\**\s*(yes|no)\b", re.IGNORECASE)
NO_ANSWER_JUDGEMENT = "No answer was extracted from the generation, so the judge model was not called.\nJudgement: No"
EXACT_MATCH_JUDGEMENT = (
    "The predicted answer equals the expected answer exactly, so the judge model was not called.\nJudgement: Yes"
)


def parse_judgement(text: str) -> bool:
    """The verdict of the last ``Judgement: Yes/No`` in the text; no such line counts as No."""
    matches = JUDGEMENT.findall(text)
    return bool(matches) and matches[-1].lower() == "yes"


def certain_judgement(record: dict) -> str | None:
    """The judgement when the model need not be asked, else ``None``."""
    predicted = record["predicted_answer"]
    if predicted is None:
        return NO_ANSWER_JUDGEMENT
    if str(predicted).replace(" ", "") == str(record["expected_answer"]).replace(" ", ""):
        return EXACT_MATCH_JUDGEMENT
    return None


def ask_judging_model(
    batch: list[dict], *, certain, request_for, verdict: str, backend, sampling, progress, report: ReasoningReport
) -> tuple[list[dict], int]:
    """A judging model's verdict on each row of a batch; returns the rows and how many the model was asked.

    ``certain(row)`` is the judgement text where the verdict is known without the model (the model is not asked),
    else None: the model answers ``request_for(row)``, and its text becomes the row's ``report.key`` field (with a
    reasoning judge's fields, ``result_fields``). ``verdict`` gets ``parse_judgement`` of that field."""
    key = report.key
    fields = [{key: text} if (text := certain(row)) is not None else None for row in batch]
    to_ask = [index for index, known in enumerate(fields) if known is None]
    progress.advance(len(batch) - len(to_ask))  # verdicts certain without the model
    requests = [request_for(batch[index]) for index in to_ask]
    results = generate_with_progress(backend, requests, sampling, progress) if requests else []
    for index, result in zip(to_ask, results, strict=True):
        fields[index] = result_fields(result, key, report.reasoning)
    report.add([fields[index] for index in to_ask])
    judged = [{**row, **known, verdict: parse_judgement(known[key])} for row, known in zip(batch, fields, strict=True)]
    return judged, len(to_ask)


def llm_judge_chunk(
    *,
    backend,
    judged_path: str | Path,
    output_path: str | Path,
    prompt: dict,
    sampling: SamplingParams,
    rows_per_flush: int,
    fingerprint_files: list[str | Path],
    reasoning: dict,
) -> dict:
    """Judge every row of a rule-based-judged chunk; returns counts (rows, model calls, skipped).

    ``fingerprint_files``: the files, besides the judged chunk, whose identity decides the judgements
    (the workflow passes its LLM judge settings file); progress written under others is not resumed.
    ``reasoning``: the judge's parse_reasoning settings; a reasoning judge's verdict is read from the text after
    its thinking (``judgement``; ``_full_judgement`` keeps the whole text).
    """
    job_fingerprint = fingerprint(
        [judged_path, *fingerprint_files],
        {"prompt": prompt, "sampling": dataclasses.asdict(sampling), "reasoning": reasoning},
    )
    rows = read_jsonl(judged_path)
    for line_number, row in enumerate(rows, start=1):
        for field in ("id", "problem", "expected_answer", "predicted_answer", "random_seed"):
            if field not in row:
                raise SnakeskillsError(f"{judged_path}:{line_number}: judged row lacks field {field!r}")
    calls = {"model": 0, "skipped": 0}
    progress = Progress(len(rows), label=f"llm judge {Path(output_path).name}")
    report = ReasoningReport("judgement", reasoning, f"llm judge {Path(output_path).name}")

    def request_for(row: dict):
        row = {**row, "predicted_answer": str(row["predicted_answer"])}
        return build_request(backend, prompt, row, row_seed(row["random_seed"], f"judge\x00{row['id']}"))

    def judge_batch(batch: list[dict]) -> list[dict]:
        judged, asked = ask_judging_model(
            batch,
            certain=certain_judgement,
            request_for=request_for,
            verdict="judge_correct",
            backend=backend,
            sampling=sampling,
            progress=progress,
            report=report,
        )
        calls["model"] += asked
        calls["skipped"] += len(batch) - asked
        return judged

    counts = process_resumable(
        rows,
        process_batch=judge_batch,
        output_path=output_path,
        rows_per_flush=rows_per_flush,
        job_fingerprint=job_fingerprint,
        progress=progress,
    )
    report.log()
    counts.update(model_calls=calls["model"], skipped_calls=calls["skipped"])
    logger.info("llm judge: %s", counts)
    return counts
