"""SFT's data: a round's judged samples filtered into training examples, in TRL's conversational ``messages`` format
(system?, user, assistant), one ``{"messages": [...]}`` object a line: TRL's ``SFTTrainer`` trains on
``load_dataset("json", ...)`` of it as is (it reads ``messages``; the ``id``/``problem``/``expected_answer`` fields
kept for tracing are ignored). An example whose generation called tools also has ``tool_output_spans``, the spans of
the tool outputs in the assistant's text, which ``sft.py`` masks out of the loss. The same examples are exported in
Alpaca format with a ``dataset_info.json`` for LLaMA-Factory, so a user can train elsewhere (without the mask: the
Alpaca format has none).
"""

from __future__ import annotations

from pathlib import Path

from snakeskills.errors import SnakeskillsError
from snakeskills.io import iter_jsonl, write_json
from snakeskills.judging.extraction_routes import EXTRACTION_ROUTE, credited_counts
from snakeskills.prompts import build_messages
from snakeskills.training.samples import SCORES, is_correct, sample_pass_rates, trained_text, write_round_data
from snakeskills.training.tool_masks import TOOL_OUTPUT_SPANS, trained_spans


def select_sft_records(
    judged_paths: list[str | Path],
    sources: list[str],
    prompts: list[dict],
    filters: dict,
    pass_rate: dict | None = None,
) -> tuple[list[dict], dict]:
    """Keep judged-correct (by ``filters.score``), complete, de-duplicated generations of the problems whose pass
    rate (over all the samples given) lies in ``pass_rate`` (sft.pass_rate; none: every problem); returns (records,
    counts per filter, the kept examples per source, and how the kept correct ones were credited:
    ``extraction_routes.credited_counts``, how many rest on a fallback extraction).

    ``sources`` names the model that wrote each judged file (a teacher, the base model, a round): it becomes each
    example's ``generated_by``. The generation is kept as text; ``prompts`` holds each file's resolved prompt, the
    student's with the file's benchmark question, so the example is what the student is asked on that benchmark,
    answered by whichever model wrote the generation.
    """
    if not len(sources) == len(prompts) == len(judged_paths):
        raise SnakeskillsError(
            f"{len(judged_paths)} judged files but {len(sources)} sources naming their models and "
            f"{len(prompts)} prompts"
        )
    counts = {"judged": 0, "incorrect": 0, "truncated": 0, "too_long": 0, "duplicate": 0, "over_per_problem_cap": 0}
    filtering = pass_rate is not None and (pass_rate["min"] > 0 or pass_rate["max"] < 1)
    rates = sample_pass_rates(judged_paths, filters["score"]) if filtering else {}
    if filtering:
        outside = [rate for rate in rates.values() if not pass_rate["min"] <= rate <= pass_rate["max"]]
        counts["problems_outside_pass_rate"] = len(outside)
        counts["outside_pass_rate"] = 0
    seen = set()
    kept_per_problem: dict[str, int] = {}
    kept_by_source = dict.fromkeys(sources, 0)
    credited_routes = []
    records = []
    for path, source, prompt in zip(judged_paths, sources, prompts, strict=True):
        for row_number, row in enumerate(iter_jsonl(path), start=1):
            counts["judged"] += 1
            if filtering and not pass_rate["min"] <= rates[str(row["id"]), str(row["problem"])] <= pass_rate["max"]:
                counts["outside_pass_rate"] += 1
                continue
            if "_generation_finished_thinking" in row:  # parse_reasoning: a text that never ended its thinking
                unfinished = not row["_generation_finished_thinking"]
                counts["unfinished_thinking"] = counts.get("unfinished_thinking", 0) + unfinished
            if filters["correct_only"] and not is_correct(row, filters["score"], f"{path}: row {row_number}"):
                counts["incorrect"] += 1
                continue
            if row["finish_reason"] != "stop":
                counts["truncated"] += 1
                continue
            limit = filters["max_generation_tokens"]
            if limit is not None and row["num_generated_tokens"] > limit:
                counts["too_long"] += 1
                continue
            text = trained_text(row)
            key = (row["problem"], text)
            if filters["dedup"] and key in seen:
                counts["duplicate"] += 1
                continue
            cap = filters["max_per_problem"]
            if cap is not None and kept_per_problem.get(row["id"], 0) >= cap:
                counts["over_per_problem_cap"] += 1
                continue
            seen.add(key)
            kept_per_problem[row["id"]] = kept_per_problem.get(row["id"], 0) + 1
            messages = build_messages(prompt, row) + [{"role": "assistant", "content": text}]
            example = {"id": row["id"], "problem": row["problem"]}
            if "expected_answer" in row:  # a code row has tests, not an expected answer
                example["expected_answer"] = row["expected_answer"]
            example = {**example, "generated_by": source, "messages": messages}
            spans = trained_spans(row, f"{path}: row {row_number}")
            if spans:  # of the assistant's text: its tool outputs, masked out of the loss (sft.py)
                example[TOOL_OUTPUT_SPANS] = spans
            records.append(example)
            kept_by_source[source] += 1
            if filters["correct_only"] or all(row.get(verdict) for verdict in SCORES[filters["score"]]):
                credited_routes.append(row.get(EXTRACTION_ROUTE))
    counts["kept"] = len(records)
    counts["problems_covered"] = len(kept_per_problem)
    counts["kept_by_source"] = kept_by_source
    counts.update(credited_counts(credited_routes))
    return records, counts


def write_sft_dataset(judged_paths, sources, prompts, filters, output_path, stats_path) -> dict:
    """The SFT data of ``filters`` (sft.filters; its ``pass_rate``, sft.pass_rate, where the plan gives one)."""
    records, counts = select_sft_records(judged_paths, sources, prompts, filters, filters.get("pass_rate"))
    if not records and counts.get("unfinished_thinking") == counts["judged"]:
        raise SnakeskillsError(
            f"no SFT examples: none of the {counts['judged']} generations ended its thinking, so none has an "
            "answer (parse_reasoning is on); is the model a reasoning model, and is end_reasoning_string the text "
            "that ends its thinking? (the generate logs count them)"
        )
    if not records and counts["truncated"]:
        raise SnakeskillsError(
            f"no SFT examples survived the filters ({counts}): {counts['truncated']} generations that the filters "
            "would keep were cut off before they ended (finish_reason length: generation.sampling.max_new_tokens); "
            "raise max_new_tokens"
        )
    if not records:
        raise SnakeskillsError(
            f"no SFT examples survived the filters ({counts}); the model solved none of the training problems "
            "- sample more seeds, bootstrap longer, or relax sft.filters"
        )
    return write_round_data(records, counts, output_path, stats_path, "SFT dataset")


def to_alpaca(record: dict) -> dict:
    """One SFT record as an Alpaca example: ``instruction``, ``input`` (empty), ``output``, ``system`` if any."""
    messages = record["messages"]
    roles = [message["role"] for message in messages]
    if roles not in (["user", "assistant"], ["system", "user", "assistant"]):
        raise SnakeskillsError(f"SFT record {record['id']!r}: expected (system,) user, assistant messages, got {roles}")
    example = {"instruction": messages[-2]["content"], "input": "", "output": messages[-1]["content"]}
    if roles[0] == "system":
        example["system"] = messages[0]["content"]
    return example


def llamafactory_dataset_info(dataset_name: str, file_name: str, *, with_system: bool) -> dict:
    """LLaMA-Factory's ``dataset_info.json`` entry for an Alpaca file in the same folder."""
    columns = {"prompt": "instruction", "query": "input", "response": "output"}
    if with_system:
        columns["system"] = "system"
    return {dataset_name: {"file_name": file_name, "formatting": "alpaca", "columns": columns}}


def write_sft_exports(sft_data_path, *, alpaca_path, dataset_info_path, dataset_name: str) -> int:
    """Write the SFT dataset as Alpaca JSON plus LLaMA-Factory's ``dataset_info.json``; returns the count.

    With both files in one folder, ``llamafactory-cli train ... --dataset_dir <folder> --dataset <name>``
    trains on it.
    """
    examples = [to_alpaca(record) for record in iter_jsonl(sft_data_path)]
    write_json(alpaca_path, examples)
    info = llamafactory_dataset_info(
        dataset_name, Path(alpaca_path).name, with_system=any("system" in example for example in examples)
    )
    write_json(dataset_info_path, info)
    return len(examples)
