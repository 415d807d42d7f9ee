"""LLM-as-a-judge: a model reads the problem, the expected and the predicted answer and says Yes or No.

Runs through the same backend interface as generation (``hf`` here; any registered backend).
Adds ``judgement`` (the judge's text) and ``judge_correct`` (its verdict) to each judged record.
The model is not called where the verdict is certain: no extracted answer is "No", and a predicted
answer that equals the expected one character for character (after stripping spaces) is "Yes";
those judgements say so in their text. Run by the model jobs' runner (``model_job``): resumable, per-row seeds.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path

from snakeskills.backends import build_request
from snakeskills.errors import SnakeskillsError
from snakeskills.generation.model_job import AskedModel, ask_model_per_row, row_seed
from snakeskills.io import read_jsonl

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


def judged_row(row: dict, fields: dict, verdict: str, key: str) -> dict:
    """A row with a judging model's text fields and its verdict (``parse_judgement`` of the text)."""
    return {**row, **fields, verdict: parse_judgement(fields[key])}


def llm_judge_chunk(model: AskedModel, *, judged_path: str | Path, output_path: str | Path) -> dict:
    """Judge every row of a rule-based-judged chunk with ``model``; returns counts (rows, model calls, skipped).

    A reasoning judge's verdict is read from the text after its thinking (``judgement``; ``_full_judgement`` keeps
    the whole text)."""
    rows = read_jsonl(judged_path)
    for line_number, row in enumerate(rows, start=1):
        for field in ("id", "problem", "expected_answer", "predicted_answer", "random_seed"):
            if field not in row:
                raise SnakeskillsError(f"{judged_path}:{line_number}: judged row lacks field {field!r}")

    def request_for(row: dict):
        row = {**row, "predicted_answer": str(row["predicted_answer"])}
        return build_request(model.backend, model.prompt, row, row_seed(row["random_seed"], f"judge\x00{row['id']}"))

    counts = ask_model_per_row(
        rows,
        model,
        output_path=output_path,
        inputs=[judged_path],
        settings={},
        key="judgement",
        label=f"llm judge {Path(output_path).name}",
        request_for=request_for,
        output_row=lambda row, fields, _: judged_row(row, fields, "judge_correct", "judgement"),
        known=certain_judgement,
    )
    counts["skipped_calls"] = counts.pop("known")
    logger.info("llm judge: %s", counts)
    return counts
