"""DPO's data: (correct, incorrect) pairs of samples of the same prompt, from the previous model's judged train
samples, in TRL's conversational preference format (``prompt`` messages, ``chosen`` and ``rejected`` assistant
messages; the trainer encodes the prompt exactly as generation did; an answer that called tools adds
``chosen_tool_output_spans`` or ``rejected_tool_output_spans``, its tool outputs' spans, which ``dpo.py`` masks out
of the loss), and the same pairs for LLaMA-Factory (pairwise Alpaca, ``ranking: true`` in its ``dataset_info.json``;
without the mask)."""

from __future__ import annotations

import math
from pathlib import Path

from snakeskills.errors import SnakeskillsError
from snakeskills.io import iter_jsonl, write_json
from snakeskills.judging.extraction_routes import EXTRACTION_ROUTE, credited_counts
from snakeskills.training.samples import Problem, problems_in_pass_rate, trained_text, write_round_data
from snakeskills.training.tool_masks import TOOL_OUTPUT_SPANS, trained_spans


def pair_indices(num_chosen: int, num_rejected: int, limit: int | None) -> list[tuple[int, int]]:
    """Which (chosen, rejected) combinations to pair, at most ``limit`` (``None``: all of them), so that each text
    is used about as often as the others: the k-th pair is (k mod chosen, k mod rejected), every text of both sides
    in the first max(chosen, rejected) pairs; after lcm(chosen, rejected) pairs, when those repeat, the rejected
    side shifts by one, so every combination comes exactly once."""
    cycle = math.lcm(num_chosen, num_rejected)
    total = num_chosen * num_rejected
    count = total if limit is None else min(limit, total)
    return [(k % num_chosen, (k + k // cycle) % num_rejected) for k in range(count)]


def problem_samples(problem: Problem, include_truncated: bool) -> tuple[list[dict], list[dict], dict]:
    """A problem's chosen samples (correct and complete) and rejected samples (incorrect; cut-off ones only with
    ``include_truncated``), one per distinct text, in sample order, and what was left out."""
    chosen, rejected = [], []
    texts = {True: set(), False: set()}
    left_out = {"duplicate": 0, "truncated": 0}
    for sample, correct in zip(problem.samples, problem.correct, strict=True):
        text = trained_text(sample)
        complete = sample["finish_reason"] == "stop"
        if not complete and (correct or not include_truncated):
            left_out["truncated"] += 1
            continue
        if text in texts[correct]:
            left_out["duplicate"] += 1
            continue
        texts[correct].add(text)
        (chosen if correct else rejected).append(sample)
    return chosen, rejected, left_out


def select_pairs(
    judged_paths: list[str | Path], benchmarks: list[str], prompts: list[dict], pairs: dict, pass_rate: dict
) -> tuple[list[dict], dict]:
    """The preference pairs of every problem in the pass-rate range (``pairs``: dpo.pairs; ``pass_rate``:
    dpo.pass_rate) and the counts: problems kept and dropped by the filter, problems with only correct or only
    incorrect samples (no pair), samples left out as duplicates or cut off, pairs made, and how the chosen answers
    the pairs use were credited (``extraction_routes.credited_counts``: how many rest on a fallback extraction)."""
    problems, counts = problems_in_pass_rate(judged_paths, benchmarks, prompts, pairs["score"], pass_rate)
    counts.update(only_correct=0, only_incorrect=0, duplicate=0, truncated=0)
    records = []
    paired_problems = 0
    chosen_routes = []
    for problem in problems:
        chosen, rejected, left_out = problem_samples(problem, pairs["include_truncated"])
        counts["duplicate"] += left_out["duplicate"]
        counts["truncated"] += left_out["truncated"]
        if not rejected:
            counts["only_correct"] += bool(chosen)
            continue
        if not chosen:
            counts["only_incorrect"] += 1
            continue
        paired_problems += 1
        indices = pair_indices(len(chosen), len(rejected), pairs["max_per_problem"])
        chosen_routes += [chosen[index].get(EXTRACTION_ROUTE) for index in sorted({index for index, _ in indices})]
        for chosen_index, rejected_index in indices:
            record = {"id": problem.row["id"], "benchmark": problem.benchmark, "problem": problem.row["problem"]}
            if "expected_answer" in problem.row:
                record["expected_answer"] = problem.row["expected_answer"]
            sides = {"chosen": chosen[chosen_index], "rejected": rejected[rejected_index]}
            record["prompt"] = problem.prompt
            for side, sample in sides.items():
                record[side] = [{"role": "assistant", "content": trained_text(sample)}]
            for side, sample in sides.items():
                spans = trained_spans(sample, f"{problem.benchmark} problem {problem.row['id']!r}")
                if spans:  # of the side's answer: its tool outputs, masked out of the loss (dpo.py)
                    record[f"{side}_{TOOL_OUTPUT_SPANS}"] = spans
            records.append(record)
    counts["problems_paired"] = paired_problems
    counts["pairs"] = len(records)
    counts.update(credited_counts(chosen_routes))
    return records, counts


def write_preference_pairs(judged_paths, benchmarks, prompts, pairs, pass_rate, output_path, stats_path) -> dict:
    records, counts = select_pairs(judged_paths, benchmarks, prompts, pairs, pass_rate)
    if not records:
        raise SnakeskillsError(
            f"no DPO pairs: no train problem has both a correct and an incorrect sample of the previous model "
            f"({counts}); sample more seeds (train_num_seeds), raise the sampling temperature, or widen dpo.pass_rate"
        )
    return write_round_data(records, counts, output_path, stats_path, "DPO pairs")


def to_pairwise_alpaca(record: dict) -> dict:
    """One pair as LLaMA-Factory's pairwise Alpaca example: ``instruction``, ``input`` (empty), ``chosen``,
    ``rejected``, ``system`` if any."""
    roles = [message["role"] for message in record["prompt"]]
    if roles not in (["user"], ["system", "user"]):
        raise SnakeskillsError(f"DPO pair of {record['id']!r}: expected (system,) user prompt messages, got {roles}")
    example = {
        "instruction": record["prompt"][-1]["content"],
        "input": "",
        "chosen": record["chosen"][0]["content"],
        "rejected": record["rejected"][0]["content"],
    }
    if roles[0] == "system":
        example["system"] = record["prompt"][0]["content"]
    return example


def write_pairwise_exports(pairs_path, *, pairwise_path, dataset_info_path, dataset_name: str) -> int:
    """The pairs as LLaMA-Factory's pairwise Alpaca JSON and its ``dataset_info.json`` (``ranking: true``): with both
    in one folder, ``llamafactory-cli train --stage dpo --dataset_dir <folder> --dataset <name>`` trains on them."""
    examples = [to_pairwise_alpaca(record) for record in iter_jsonl(pairs_path)]
    write_json(pairwise_path, examples)
    columns = {"prompt": "instruction", "query": "input", "chosen": "chosen", "rejected": "rejected"}
    if any("system" in example for example in examples):
        columns["system"] = "system"
    info = {
        dataset_name: {
            "file_name": Path(pairwise_path).name,
            "formatting": "alpaca",
            "ranking": True,
            "columns": columns,
        }
    }
    write_json(dataset_info_path, info)
    return len(examples)
