"""NeMo-Skills' LLM contamination check of synthesized problems (synthesis.decontamination.llm_check): a judging
model reads each problem the n-gram check kept beside the eval problem most similar to it and says whether they
are the same problem; a Yes removes it. Run by the model jobs' runner (``model_job``)."""

from __future__ import annotations

import logging
from pathlib import Path

from snakeskills.backends import build_request
from snakeskills.generation.model_job import AskedModel, ask_model_per_row, row_seed
from snakeskills.io import read_jsonl, write_json, write_jsonl
from snakeskills.judging.llm_judge import judged_row
from snakeskills.synthesis.problems import NgramIndex, read_eval_problems

logger = logging.getLogger(__name__)

NO_SHARED_WORD_JUDGEMENT = (
    "The new problem shares no word with any eval problem, so the judge model was not called.\nJudgement: No"
)


def most_similar_rows(candidates: list[dict], eval_problems: list[dict]) -> list[dict]:
    """Each candidate beside its most similar eval problem: the one sharing the largest share of words
    (``NgramIndex`` of size 1: a lexical stand-in for NeMo-Skills' embedding retrieval, enough for what n-grams
    miss: rewordings around the same numbers)."""
    index = NgramIndex(eval_problems, 1)
    rows = []
    for candidate in candidates:
        similar, overlap = index.closest(candidate["problem"])
        rows.append(
            {
                "id": candidate["id"],
                "problem": candidate["problem"],
                "random_seed": candidate["random_seed"],
                "similar_problem": similar["problem"] if similar else None,
                "similar_benchmark": similar["benchmark"] if similar else None,
                "similar_id": similar["id"] if similar else None,
                "word_overlap": round(overlap, 4),
            }
        )
    return rows


def llm_contamination_check(
    model: AskedModel,
    *,
    candidates_path: str | Path,
    eval_paths: list[str | Path],
    problems_path: str | Path,
    checked_path: str | Path,
    stats_path: str | Path,
) -> dict:
    """Ask ``model`` whether each candidate is its most similar eval problem (``most_similar_rows``); a candidate
    sharing no word with any eval problem is kept without asking. ``checked_path`` gets every candidate with
    ``similar_problem`` (and its benchmark and id), ``word_overlap``, ``contamination_judgement`` (the model's
    text) and ``llm_contaminated``, written resumably; ``problems_path`` the candidates not judged the same,
    unchanged. A reasoning model's verdict is read after its thinking (``_full_contamination_judgement`` keeps the
    whole)."""
    candidates = read_jsonl(candidates_path)
    rows = most_similar_rows(candidates, read_eval_problems(eval_paths))
    ask_model_per_row(
        rows,
        model,
        output_path=checked_path,
        inputs=[candidates_path, *eval_paths],
        settings={},
        key="contamination_judgement",
        label=f"contamination check {Path(checked_path).name}",
        request_for=lambda row: build_request(
            model.backend, model.prompt, row, row_seed(row["random_seed"], f"same\x00{row['id']}")
        ),
        output_row=lambda row, fields, _: judged_row(row, fields, "llm_contaminated", "contamination_judgement"),
        known=lambda row: None if row["similar_problem"] is not None else NO_SHARED_WORD_JUDGEMENT,
    )
    checked = read_jsonl(checked_path)
    kept = [candidate for candidate, row in zip(candidates, checked, strict=True) if not row["llm_contaminated"]]
    counts = {
        "checked": len(checked),
        "asked": sum(row["similar_problem"] is not None for row in checked),
        "contaminated": len(checked) - len(kept),
        "clean": len(kept),
    }
    write_jsonl(problems_path, kept)
    write_json(stats_path, counts)
    logger.info("LLM contamination check: %s", counts)
    return counts
