"""SFT stage: filter judged generations into a dataset, then train a LoRA adapter with peft.

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


def select_sft_records(judged_paths: list[str | Path], prompt_config: dict, filters: dict) -> tuple[list[dict], dict]:
    """Keep judged-correct (by ``filters.score``), complete, de-duplicated generations; returns (records,
    counts per filter)."""
    counts = {"judged": 0, "incorrect": 0, "truncated": 0, "too_long": 0, "duplicate": 0, "over_per_problem_cap": 0}
    seen = set()
    kept_per_problem: dict[str, int] = {}
    records = []
    for path in judged_paths:
        for row_number, row in enumerate(iter_jsonl(path), start=1):
            counts["judged"] += 1
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
            key = (row["problem"], row["generation"])
            if filters["dedup"] and key in seen:
                counts["duplicate"] += 1
                continue
            cap = filters["max_per_problem"]
            if cap is not None and kept_per_problem.get(row["id"], 0) >= cap:
                counts["over_per_problem_cap"] += 1
                continue
            seen.add(key)
            kept_per_problem[row["id"]] = kept_per_problem.get(row["id"], 0) + 1
            messages = build_messages(prompt_config, row) + [{"role": "assistant", "content": row["generation"]}]
            records.append(
                {
                    "id": row["id"],
                    "problem": row["problem"],
                    "expected_answer": row["expected_answer"],
                    "messages": messages,
                }
            )
    counts["kept"] = len(records)
    counts["problems_covered"] = len(kept_per_problem)
    return records, counts


def write_sft_dataset(judged_paths, prompt_config, filters, output_path, stats_path) -> dict:
    records, counts = select_sft_records(judged_paths, prompt_config, filters)
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


def to_prompt_completion(record: dict, *, chat_template: bool, tokenizer) -> dict:
    """An SFT record as the trainer's example: the prompt's token ids, exactly as generation builds them
    (``prompts.encode_messages``), and the assistant's text."""
    messages = record["messages"]
    if messages[-1]["role"] != "assistant":
        raise SnakeskillsError(f"SFT record {record['id']!r}: the last message must be the assistant's")
    prompt_ids = encode_messages(messages[:-1], chat_template=chat_template, tokenizer=tokenizer)
    return {"prompt_ids": prompt_ids, "completion": messages[-1]["content"]}


def train_lora(
    *,
    base_model_path: str,
    sft_data_path: str | Path,
    output_dir: str | Path,
    lora: dict,
    training: dict,
    chat_template: bool,
    seed: int,
    threads: int,
    trust_remote_code: bool,
    init_adapter_path: str | Path | None = None,
) -> dict:
    """Train a LoRA adapter on the SFT dataset and save it (adapter + tokenizer) to ``output_dir``.

    With ``init_adapter_path`` the adapter saved there is loaded onto the base model and trained
    further (its LoRA settings are kept); otherwise a fresh LoRA is set up from ``lora``.
    """
    import torch
    from peft import LoraConfig, PeftModel, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from snakeskills.training import discard_trainer_dir, train_on_examples, trainer_dir_for

    if not Path(base_model_path).exists():
        raise SnakeskillsError(f"model path {base_model_path!r} does not exist (config: model.path)")
    torch.manual_seed(seed)
    tokenizer = AutoTokenizer.from_pretrained(base_model_path, trust_remote_code=trust_remote_code)
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    model = AutoModelForCausalLM.from_pretrained(base_model_path, trust_remote_code=trust_remote_code)
    if init_adapter_path is not None:
        if not Path(init_adapter_path).is_dir():
            raise SnakeskillsError(
                f"adapter {init_adapter_path!r} to continue from does not exist (sft.init: continue)"
            )
        model = PeftModel.from_pretrained(model, str(init_adapter_path), is_trainable=True)
        logger.info("continuing from adapter %s", init_adapter_path)
    else:
        model = get_peft_model(
            model,
            LoraConfig(
                r=lora["r"],
                lora_alpha=lora["alpha"],
                lora_dropout=lora["dropout"],
                target_modules=lora["target_modules"],
                task_type="CAUSAL_LM",
            ),
        )
        logger.info("training a fresh LoRA on %s", base_model_path)
    examples = [
        to_prompt_completion(record, chat_template=chat_template, tokenizer=tokenizer)
        for record in iter_jsonl(sft_data_path)
    ]
    trainer_dir = trainer_dir_for(output_dir)
    metrics = train_on_examples(
        model,
        tokenizer,
        examples,
        output_dir=trainer_dir,
        # the model folders by identity (a re-trained adapter is a new folder, renamed into place)
        run_identity={
            "models": fingerprint([base_model_path, *([] if init_adapter_path is None else [init_adapter_path])], {}),
            "lora": lora,
        },
        seed=seed,
        threads=threads,
        **training,
    )
    metrics["init_adapter"] = None if init_adapter_path is None else str(init_adapter_path)
    with atomic_directory(output_dir) as staging:
        model.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        write_json(staging / "training_metrics.json", metrics)
    discard_trainer_dir(trainer_dir)
    return metrics


def merge_adapter(
    *, base_model_path: str, adapter_path: str | Path, output_dir: str | Path, trust_remote_code: bool
) -> None:
    """Write base + LoRA as one full checkpoint (``merge_and_unload``), with the tokenizer, atomically."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(base_model_path, dtype="auto", trust_remote_code=trust_remote_code)
    merged = PeftModel.from_pretrained(model, str(adapter_path)).merge_and_unload()
    tokenizer = AutoTokenizer.from_pretrained(adapter_path)
    with atomic_directory(output_dir) as staging:
        merged.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
    logger.info("merged %s + %s into %s", base_model_path, adapter_path, output_dir)
