"""SFT stage: filter judged generations into a dataset, then fine-tune on it: a LoRA adapter (peft) or all weights.

The dataset uses TRL's conversational ``messages`` format (system?, user, assistant), one
``{"messages": [...]}`` object a line: TRL's ``SFTTrainer`` trains on ``load_dataset("json", ...)`` of
it as is (it reads ``messages``; the ``id``/``problem``/``expected_answer`` fields kept for tracing are
ignored). The same examples are exported in Alpaca format with a ``dataset_info.json`` for LLaMA-Factory,
so a user can train elsewhere.
"""

from __future__ import annotations

import logging
from pathlib import Path

from snakeskills.errors import SnakeskillsError
from snakeskills.io import atomic_directory, fingerprint, iter_jsonl, write_json, write_jsonl
from snakeskills.prompts import build_messages, encode_messages

logger = logging.getLogger(__name__)


SCORES = {
    "symbolic_correct": ("symbolic_correct",),
    "judge_correct": ("judge_correct",),
    "both": ("symbolic_correct", "judge_correct"),
}


def is_correct(row: dict, score: str, where: str) -> bool:
    """The row's verdict under ``sft.filters.score``: symbolic_correct (the symbolic judge), judge_correct (the
    LLM judge) or both (each must say correct). A verdict the row lacks is an error naming ``where``."""
    verdicts = []
    for field in SCORES[score]:
        if field not in row:
            source = "an LLM judge (judge.llm)" if field == "judge_correct" else "the judge stage"
            raise SnakeskillsError(
                f"{where}: no {field!r} field, which sft.filters.score={score!r} needs; it is written by {source}"
            )
        verdicts.append(bool(row[field]))
    return all(verdicts)


def trained_text(row: dict) -> str:
    """The text a generation teaches: the whole text where a reasoning model's thinking was split off
    (``_full_generation``, parse_reasoning), so the student learns to think as well as to answer; else
    ``generation``."""
    return row["_full_generation"] if "_full_generation" in row else row["generation"]


def sample_pass_rates(judged_paths: list[str | Path], score: str) -> dict[tuple[str, str], float]:
    """Each problem's pass rate over all of ``judged_paths``' samples (keyed by id and problem text)."""
    solved: dict[tuple[str, str], list[bool]] = {}
    for path in judged_paths:
        for row_number, row in enumerate(iter_jsonl(path), start=1):
            verdict = is_correct(row, score, f"{path}: row {row_number}")
            solved.setdefault((str(row["id"]), str(row["problem"])), []).append(verdict)
    return {key: sum(verdicts) / len(verdicts) for key, verdicts in solved.items()}


def select_sft_records(
    judged_paths: list[str | Path],
    sources: list[str],
    prompts: list[dict],
    filters: dict,
    pass_rate: dict | None = None,
) -> tuple[list[dict], dict]:
    """Keep judged-correct (by ``filters.score``), complete, de-duplicated generations of the problems whose pass
    rate (over all the samples given) lies in ``pass_rate`` (sft.pass_rate; none: every problem); returns (records,
    counts per filter, and the kept examples per source).

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
            records.append({**example, "generated_by": source, "messages": messages})
            kept_by_source[source] += 1
    counts["kept"] = len(records)
    counts["problems_covered"] = len(kept_per_problem)
    counts["kept_by_source"] = kept_by_source
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
    if not records:
        raise SnakeskillsError(
            f"no SFT examples survived the filters ({counts}); the model solved none of the training problems "
            "- sample more seeds, bootstrap longer, or relax sft.filters"
        )
    write_jsonl(output_path, records)
    write_json(stats_path, counts)
    logger.info("SFT dataset: %s", counts)
    return counts


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


def to_prompt_completion(record: dict, *, chat_template: bool, chat_template_kwargs: dict, tokenizer) -> dict:
    """An SFT record as the trainer's example: the prompt's token ids, exactly as generation builds them
    (``prompts.encode_messages``, with the prompt's chat template and its kwargs), and the assistant's text."""
    messages = record["messages"]
    if messages[-1]["role"] != "assistant":
        raise SnakeskillsError(f"SFT record {record['id']!r}: the last message must be the assistant's")
    prompt_ids = encode_messages(
        messages[:-1], chat_template=chat_template, chat_template_kwargs=chat_template_kwargs, tokenizer=tokenizer
    )
    return {"prompt_ids": prompt_ids, "completion": messages[-1]["content"]}


METHODS = ("lora", "full")


def train_sft(
    *,
    method: str,
    base_model_path: str,
    sft_data_path: str | Path,
    output_dir: str | Path,
    lora: dict | None,
    training: dict,
    chat_template: bool,
    chat_template_kwargs: dict,
    seed: int,
    threads: int,
    dtype: str,
    trust_remote_code: bool,
    init_path: str | Path | None = None,
    processes: int = 1,
    distributed: str = "ddp",
) -> dict:
    """Fine-tune on the SFT dataset and save the result, with its tokenizer, to ``output_dir`` (atomically).

    ``method`` (sft.method) "lora": a LoRA adapter on the base model (``lora`` settings), saved as an adapter
    folder. "full": every weight of the model, saved as a full checkpoint in the dtype of the checkpoint it
    started from (or in ``dtype``, model.dtype, when it is not auto), which every backend loads as a model. The
    weights load under ``snakeskills.models``' dtype policies (``training.load_trainable_model``). ``init_path``
    (sft.init: continue) is the previous round's output, trained further: its adapter (lora, its LoRA settings
    kept) or its checkpoint (full). With ``processes > 1`` this runs in every process ``launch_training`` started
    (see ``train_on_examples``).
    """
    import torch

    from snakeskills.checkpoints import trainer_dir_for
    from snakeskills.training import load_trainable_model, save_tuned, train_on_examples

    if method not in METHODS:
        raise SnakeskillsError(f"sft.method: {method!r} is not one of {', '.join(METHODS)}")
    torch.manual_seed(seed)
    model, tokenizer, stored_dtype = load_trainable_model(
        method, base_model_path, init_path, lora, dtype, trust_remote_code
    )
    examples = [
        to_prompt_completion(
            record, chat_template=chat_template, chat_template_kwargs=chat_template_kwargs, tokenizer=tokenizer
        )
        for record in iter_jsonl(sft_data_path)
    ]
    metrics, trainer = train_on_examples(
        model,
        tokenizer,
        examples,
        output_dir=trainer_dir_for(output_dir),
        run_identity=run_identity(method, base_model_path, init_path, lora),
        seed=seed,
        threads=threads,
        processes=processes,
        distributed=distributed,
        **training,
    )
    metrics["method"] = method
    metrics["init_path"] = None if init_path is None else str(init_path)
    save_tuned(trainer, output_dir, tokenizer=tokenizer, metrics=metrics, stored_dtype=stored_dtype)
    return metrics


def run_identity(method: str, base_model_path: str, init_path, lora: dict | None) -> dict:
    """What a round's model is, for its checkpoints' fingerprint: the model folders by identity (a re-trained
    adapter or checkpoint is a new folder, renamed into place), lora or full, and the LoRA settings."""
    return {
        "models": fingerprint([base_model_path, *([] if init_path is None else [str(init_path)])], {}),
        "method": method,
        "lora": lora if method == "lora" else None,
    }


def launch_sft(arguments: dict, *, processes: int, on_cpu: bool, log_path: str | Path) -> dict:
    """``train_sft(**arguments)`` in ``processes`` processes (``training.launch_training``)."""
    from snakeskills.training import launch_training

    return launch_training("snakeskills.sft", arguments, processes=processes, log_path=log_path)


def merge_adapter(
    *, base_model_path: str, adapter_path: str | Path, output_dir: str | Path, dtype: str, trust_remote_code: bool
) -> None:
    """Write base + LoRA as one full checkpoint (``merge_and_unload``, in float32), saved in the base's dtype
    (or ``dtype``, model.dtype, when it is not auto), with the tokenizer, atomically."""
    from snakeskills.models import TRAINED_WEIGHTS, load_model, load_tokenizer, saved_dtype

    model = load_model(
        base_model_path,
        dtype=dtype,
        policy=TRAINED_WEIGHTS,
        trust_remote_code=trust_remote_code,
        adapter_path=adapter_path,
    )
    merged = model.merge_and_unload().to(saved_dtype(dtype, base_model_path, trust_remote_code))
    tokenizer = load_tokenizer(adapter_path, trust_remote_code=trust_remote_code)
    with atomic_directory(output_dir) as staging:
        merged.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
    logger.info("merged %s + %s into %s", base_model_path, adapter_path, output_dir)


if __name__ == "__main__":
    # one of the processes `launch_training` starts: train_sft's arguments come as one JSON argument
    from snakeskills.training import training_process_main

    training_process_main(train_sft)
