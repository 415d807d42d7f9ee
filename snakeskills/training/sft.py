"""SFT's trainer: TRL's ``SFTTrainer`` on prompt/completion examples with the loss on the completion only, for a
round's SFT data (``sft_data``) and for the embedded default's bootstrap (``tiny_bootstrap``).

Prompts are encoded exactly as generation encodes them (``prompts.encode_messages``), not re-rendered by the
trainer, so the model is trained on the inputs it is evaluated on."""

from __future__ import annotations

from pathlib import Path

from snakeskills.errors import SnakeskillsError
from snakeskills.io import iter_jsonl
from snakeskills.prompts import encode_messages
from snakeskills.training.checkpoints import claim_checkpoints, trainer_dir_for
from snakeskills.training.rounds import RoundRun, run_round
from snakeskills.training.tool_masks import TOOL_OUTPUT_SPANS, completion_ids_and_mask
from snakeskills.training.trainer import run_trainer, section_trainer_arguments, training_callbacks

# the label of a token the loss is not on (the prompt's, as TRL's collator masks it)
IGNORE_INDEX = -100


def tokenize_prompt_completion(tokenizer, examples: list[dict], max_length: int):
    """A ``datasets.Dataset`` of ``input_ids`` and ``completion_mask`` (1 on the tokens the loss is on), as TRL's
    ``SFTTrainer`` takes an already tokenized prompt-completion dataset.

    ``prompt_ids`` are the model input as generation builds it (``prompts.encode_messages``: chat template
    applied, special tokens exactly once); the completion is tokenized on its own, as the model generates
    it after the prompt, and followed by the tokenizer's EOS so the model learns to stop. TRL turns the mask
    into labels (-100 on the prompt) and pads; an example whose prompt alone fills ``max_length`` is dropped.
    An example's ``tool_output_spans`` (of its completion) leave the tools' tokens out of the mask too
    (``tool_masks.completion_ids_and_mask``): the model does not learn to predict what a tool printed.
    """
    import datasets

    if tokenizer.eos_token_id is None:
        raise ValueError("tokenizer has no eos_token; SFT needs one to teach the model where to stop")
    rows = []
    for example in examples:
        prompt_ids = list(example["prompt_ids"])
        completion_ids, loss_mask = completion_ids_and_mask(
            tokenizer, example["completion"], example.get(TOOL_OUTPUT_SPANS) or []
        )
        completion_ids = completion_ids + [tokenizer.eos_token_id]
        input_ids = (prompt_ids + completion_ids)[:max_length]
        completion_mask = ([0] * len(prompt_ids) + loss_mask + [1])[:max_length]
        rows.append({"input_ids": input_ids, "completion_mask": completion_mask})
    return datasets.Dataset.from_list(rows)


def sft_trainer(
    model,
    tokenizer,
    examples: list[dict],
    *,
    training: dict,
    output_dir: str | Path,
    run_identity: dict,
    seed: int,
    threads: int,
    processes: int,
    distributed: str,
    callbacks: list | None = None,
):
    """TRL's ``SFTTrainer`` for ``model`` on ``examples`` (``prompt_ids``, ``completion``), with the loss on the
    completions only; returns (trainer, the checkpoint to resume from or None).

    ``training`` is a training section (sft.training, tiny_model.training): ``batch_size`` is examples per optimizer
    step, each of the ``processes`` taking ``batch_size / (processes x gradient_accumulation_steps)`` per forward.
    ``bf16`` "auto": bfloat16 mixed precision where the GPU supports it. ``packing``: several examples per row (TRL's
    best-fit decreasing, no padding, each attending to itself by its position ids).

    A checkpoint is saved under ``output_dir`` every ``checkpoint_minutes`` and every ``checkpoint_steps`` (0: not by
    that measure); training resumes from the newest complete one if ``run_identity``, the hyperparameters and the
    examples match, else the checkpoints there are discarded.

    With ``processes > 1`` this runs in each ``accelerate launch`` process (``WORLD_SIZE`` must match);
    ``distributed`` "fsdp" shards the model instead of replicating it (DDP)."""
    from trl import SFTConfig, SFTTrainer

    if not examples:
        raise ValueError("no training examples: nothing to fine-tune on")
    max_length, packing = training["max_length"], training["packing"]
    dataset = tokenize_prompt_completion(tokenizer, examples, max_length)
    common = section_trainer_arguments(
        training, output_dir=output_dir, seed=seed, threads=threads, processes=processes, distributed=distributed
    )
    arguments = SFTConfig(max_length=max_length, completion_only_loss=True, packing=packing, **common)
    hyperparameters = {**common, "max_length": max_length, "packing": packing}
    resume_from = claim_checkpoints(arguments, run_identity, hyperparameters, examples)
    trainer = SFTTrainer(
        model=model,
        args=arguments,
        train_dataset=dataset,
        processing_class=tokenizer,
        callbacks=[*(callbacks or []), *training_callbacks(training)],
    )
    return trainer, resume_from


def train_on_examples(model, tokenizer, examples: list[dict], **settings):
    """Train ``model`` in place on ``examples`` (``sft_trainer`` takes the settings); returns (metrics, trainer).

    The caller saves the model (``save_trained``), which also discards the checkpoint folder.
    """
    trainer, resume_from = sft_trainer(model, tokenizer, examples, **settings)
    return run_trainer(trainer, resume_from, len(examples)), trainer


def to_prompt_completion(record: dict, *, tokenizer, **formatting) -> dict:
    """An SFT record as the trainer's example: the prompt's token ids, exactly as generation builds them
    (``prompts.encode_messages``, with the prompt's chat template and its kwargs), the assistant's text, and its
    ``tool_output_spans`` where the record has them."""
    messages = record["messages"]
    if messages[-1]["role"] != "assistant":
        raise SnakeskillsError(f"SFT record {record['id']!r}: the last message must be the assistant's")
    prompt_ids = encode_messages(messages[:-1], tokenizer=tokenizer, **formatting)
    example = {"prompt_ids": prompt_ids, "completion": messages[-1]["content"]}
    if record.get(TOOL_OUTPUT_SPANS):
        example[TOOL_OUTPUT_SPANS] = record[TOOL_OUTPUT_SPANS]
    return example


def train(run: RoundRun) -> dict:
    """Fine-tune on the round's SFT data (``run.data_path``) and save the result (``rounds.run_round``). With
    ``run.world_size > 1`` this runs in every process ``launch.launch_training`` started."""

    def build(model, tokenizer):
        examples = [
            to_prompt_completion(record, tokenizer=tokenizer, **run.prompt_format())
            for record in iter_jsonl(run.data_path)
        ]
        trainer, resume_from = sft_trainer(
            model,
            tokenizer,
            examples,
            output_dir=trainer_dir_for(run.output_dir),
            run_identity=run.identity(),
            seed=run.seed,
            threads=run.threads,
            processes=run.world_size,
            distributed=run.distributed,
            training=run.training,
        )
        return trainer, resume_from, len(examples)

    return run_round(run, "sft", build)


def check_config(config: dict, processes: int) -> None:
    """SFT's own cross-key rules: none beyond those every method's section has (``plan.training.check_methods``)."""


def fine_tune_folder(base: str | Path, folder: Path, examples: list[dict], training: dict, **formatting) -> None:
    """A model built once per machine (``pretrained.recipe_folder``'s ``build``): every weight of ``base`` fine-tuned on
    the SFT records ``examples`` with ``training`` over the embedded default's ``sft.training``, on all cores, and
    written whole into ``folder`` (staged beside it, renamed into place at the end). ``formatting``: the prompts'
    functions and template where the records call tools through a chat template (``RoundRun.prompt_format``)."""
    import os
    import shutil

    import yaml

    from snakeskills.io import write_jsonl
    from snakeskills.settings.schema import DEFAULT_CONFIG, fill_defaults

    # the embedded default's sft section with the schema's defaults filled (as plan.config.default_config gives it)
    default_sft = yaml.safe_load(DEFAULT_CONFIG.read_text(encoding="utf-8")).get("sft") or {}
    sft_defaults = fill_defaults(default_sft, "#/properties/sft", "sft")
    staged = folder.parent / f".{folder.name}.staged"
    shutil.rmtree(staged, ignore_errors=True)
    data = folder.parent / f".{folder.name}.jsonl"
    write_jsonl(data, examples)
    train(
        RoundRun(
            weights="full",
            base_model_path=str(base),
            data_path=data,
            output_dir=staged,
            lora=None,
            training={**sft_defaults["training"], **training},
            chat_template=True,
            chat_template_kwargs={},
            seed=0,
            threads=os.cpu_count(),
            dtype="auto",
            trust_remote_code=False,
            **formatting,
        )
    )
    data.unlink()
    staged.rename(folder)
