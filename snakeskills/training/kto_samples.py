"""KTO's data: every judged train sample of the previous model as unpaired feedback, desirable when the judge says
correct and undesirable when not (no pair from the same problem needed), in TRL's conversational unpaired preference
format (``prompt`` messages, ``completion`` assistant message, ``label``, and for a completion that called tools
``tool_output_spans``, its tool outputs' spans, which ``kto.py`` masks out of the loss); the trainer encodes the
prompt exactly as generation did."""

from __future__ import annotations

from pathlib import Path

from snakeskills.errors import SnakeskillsError
from snakeskills.judging.extraction_routes import EXTRACTION_ROUTE, credited_counts
from snakeskills.training.samples import problems_in_pass_rate, trained_text, write_round_data
from snakeskills.training.tool_masks import TOOL_OUTPUT_SPANS, trained_spans


def select_kto_samples(
    judged_paths: list[str | Path], benchmarks: list[str], prompts: list[dict], samples: dict, pass_rate: dict
) -> tuple[list[dict], dict]:
    """The labelled samples of every problem in the pass-rate range (``samples``: kto.samples; ``pass_rate``:
    kto.pass_rate) and the counts: problems kept and dropped by the filter, samples left out as repeats of the same
    text, cut off (an incorrect one only with ``include_truncated``) or over the per-problem cap, the desirable
    and undesirable samples kept, and how the desirable ones were credited (``extraction_routes.credited_counts``:
    how many rest on a fallback extraction)."""
    problems, counts = problems_in_pass_rate(judged_paths, benchmarks, prompts, samples["score"], pass_rate)
    counts.update(duplicate=0, truncated=0, over_per_problem_cap=0)
    records = []
    desirable_routes = []
    kept_problems = 0
    cap = samples["max_per_problem"]
    for problem in problems:
        seen: set[str] = set()
        kept = 0
        for sample, correct in zip(problem.samples, problem.correct, strict=True):
            text = trained_text(sample)
            if sample["finish_reason"] != "stop" and (correct or not samples["include_truncated"]):
                counts["truncated"] += 1
                continue
            if text in seen:
                counts["duplicate"] += 1
                continue
            if cap is not None and kept >= cap:
                counts["over_per_problem_cap"] += 1
                continue
            seen.add(text)
            kept += 1
            record = {"id": problem.row["id"], "benchmark": problem.benchmark, "problem": problem.row["problem"]}
            if "expected_answer" in problem.row:
                record["expected_answer"] = problem.row["expected_answer"]
            completion = [{"role": "assistant", "content": text}]
            record = {**record, "prompt": problem.prompt, "completion": completion, "label": correct}
            spans = trained_spans(sample, f"{problem.benchmark} problem {problem.row['id']!r}")
            if spans:  # of the completion: its tool outputs, masked out of the loss (kto.py)
                record[TOOL_OUTPUT_SPANS] = spans
            records.append(record)
            if correct:
                desirable_routes.append(sample.get(EXTRACTION_ROUTE))
        kept_problems += kept > 0
    counts["problems_kept"] = kept_problems
    counts["desirable"] = sum(record["label"] for record in records)
    counts["undesirable"] = len(records) - counts["desirable"]
    counts["samples"] = len(records)
    counts.update(credited_counts(desirable_routes))
    return records, counts


def write_kto_samples(judged_paths, benchmarks, prompts, samples, pass_rate, output_path, stats_path) -> dict:
    records, counts = select_kto_samples(judged_paths, benchmarks, prompts, samples, pass_rate)
    if not counts["desirable"] or not counts["undesirable"]:
        kind = "desirable (judged correct)" if not counts["desirable"] else "undesirable (judged incorrect)"
        cut_off = (
            f"; {counts['truncated']} samples were left out because they were cut off before they ended "
            "(generation.sampling.max_new_tokens)"
            if counts["truncated"]
            else ""
        )
        raise SnakeskillsError(
            f"no {kind} KTO samples among the previous model's judged train samples ({counts}): KTO needs both; "
            f"sample more seeds (train_num_seeds), raise the sampling temperature, or widen kto.pass_rate{cut_off}"
        )
    return write_round_data(records, counts, output_path, stats_path, "KTO samples")
