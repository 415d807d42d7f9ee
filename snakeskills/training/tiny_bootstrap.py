"""The embedded default's model, bootstrap-trained: the tiny Llama (``models.tiny_model``) given a short supervised
bootstrap that stops at a chosen greedy accuracy, saved with its metrics (``BOOTSTRAP_METRICS_FILE``).
"""

from __future__ import annotations

import logging
from pathlib import Path

from snakeskills.models.tiny_model import build_char_tokenizer, build_tiny_llama
from snakeskills.settings.tools import Tools

logger = logging.getLogger(__name__)

# written beside the built checkpoint: the bootstrap's training metrics, validation history and target
BOOTSTRAP_METRICS_FILE = "bootstrap_metrics.json"


def build_and_bootstrap(
    *,
    bootstrap_records: list[dict],
    validation_records: list[dict],
    prompt_config: dict,
    completion_template: str,
    output_dir: str | Path,
    architecture: dict,
    training: dict,
    stop_at_accuracy: float,
    check_every_steps: int,
    seed: int,
    threads: int,
    tool_completion: str | list[str] | None = None,
    tool_share: float = 0.0,
    tools: Tools | None = None,
) -> dict:
    """Build the tiny model, give it a short supervised bootstrap, save it to ``output_dir``.

    Training stops as soon as greedy accuracy on ``validation_records`` (problems the bootstrap
    never trains on) reaches ``stop_at_accuracy``, so the base model starts with a modest skill,
    leaving room for the loop (sample -> keep correct -> SFT) to show a real gain.

    With ``tools`` (the run's) a share ``tool_share`` of the bootstrap problems, chosen by ``seed``, is
    answered by ``tool_completion`` (a call, the tool's output in its tags, the answer; a list of templates, one per
    tool: taken in turn), with the output masked out of the loss; the validation then answers with the tools
    (greedy, ``tools.loop``).
    """
    from snakeskills.io import write_json
    from snakeskills.prompts import fill_template, model_input_ids
    from snakeskills.training.checkpoints import trainer_dir_for
    from snakeskills.training.sft import train_on_examples
    from snakeskills.training.trainer import save_trained

    output_dir = Path(output_dir)
    tokenizer = build_char_tokenizer()
    model = build_tiny_llama(tokenizer, seed=seed, **architecture)
    num_parameters = sum(parameter.numel() for parameter in model.parameters())
    logger.info("built tiny Llama with %d parameters, vocabulary %d", num_parameters, len(tokenizer))
    calling = tool_calling_rows(len(bootstrap_records), tool_share if tools and tool_completion else 0.0, seed)
    templates = [tool_completion] if isinstance(tool_completion, str) else list(tool_completion or [])
    # several templates (one per tool): the calling rows take them in turn
    chosen = {index: templates[turn % len(templates)] for turn, index in enumerate(sorted(calling))}
    use = None
    if tools is not None:
        from snakeskills.tools.loop import tool_use

        use = tool_use(tools)
    tags = [tool.tags for tool in use.tools().values()] if use is not None else None
    examples = [
        bootstrap_example(
            model_input_ids(prompt_config, record, tokenizer),
            fill_template(chosen.get(index, completion_template), record),
            tags if index in calling else None,
        )
        for index, record in enumerate(bootstrap_records)
    ]
    if calling:
        logger.info("%d of %d bootstrap problems answered with a tool call", len(calling), len(examples))
    validation = [
        {"prompt_ids": model_input_ids(prompt_config, record, tokenizer), "expected_answer": record["expected_answer"]}
        for record in validation_records
    ]
    max_new_tokens = max(len(tokenizer(example["completion"])["input_ids"]) for example in examples) + 2
    stopper = accuracy_stop_callback(
        tokenizer,
        validation,
        target=stop_at_accuracy,
        check_every=check_every_steps,
        max_new_tokens=max_new_tokens,
        tools=use,
    )
    metrics, trainer = train_on_examples(
        model,
        tokenizer,
        examples,
        output_dir=trainer_dir_for(output_dir),
        run_identity={
            "architecture": architecture,
            "stop_at_accuracy": stop_at_accuracy,
            "check_every_steps": check_every_steps,
            "validation": validation,
        },
        seed=seed,
        threads=threads,
        processes=1,
        distributed="ddp",
        callbacks=[stopper],
        training=training,
    )
    metrics["num_parameters"] = num_parameters
    metrics["validation_history"] = stopper.history
    metrics["final_validation_accuracy"] = greedy_accuracy(
        model,
        tokenizer,
        [v["prompt_ids"] for v in validation],
        [v["expected_answer"] for v in validation],
        max_new_tokens,
        tools=use,
    )
    metrics["stop_at_accuracy"] = stop_at_accuracy
    metrics["reached_target"] = metrics["final_validation_accuracy"] >= stop_at_accuracy
    if metrics["reached_target"]:
        logger.info(
            "bootstrap reached its target: greedy validation accuracy %.3f >= tiny_model.stop_at_accuracy %g "
            "after %d steps",
            metrics["final_validation_accuracy"],
            stop_at_accuracy,
            metrics["global_step"],
        )
    else:
        logger.warning("%s", bootstrap_miss(metrics))

    def finish(staging):
        tokenizer.save_pretrained(staging)
        write_json(staging / BOOTSTRAP_METRICS_FILE, metrics)

    save_trained(trainer, output_dir, finish)
    return metrics


def bootstrap_miss(metrics: dict) -> str | None:
    """One line saying that a bootstrap ended below its target (what it reached, what was asked, what to change),
    from its metrics (``BOOTSTRAP_METRICS_FILE``); ``None`` when it reached the target."""
    if metrics.get("reached_target", True):  # an older checkpoint's metrics have no target: nothing
        return None
    return (
        f"warning: the tiny model's bootstrap missed its target: greedy validation accuracy "
        f"{metrics['final_validation_accuracy']:.3f} after all {metrics['global_step']} steps "
        f"({metrics['num_examples']} bootstrap problems), tiny_model.stop_at_accuracy asks "
        f"{metrics['stop_at_accuracy']:g}; the base model is weaker than intended: give the bootstrap split more "
        "problems, raise tiny_model.training.num_epochs, or lower tiny_model.stop_at_accuracy"
    )


def tool_calling_rows(count: int, share: float, seed: int) -> set[int]:
    """The bootstrap rows answered with a tool call: ``share`` of ``count``, chosen by ``seed``."""
    import random

    return set(random.Random(f"{seed}/tool-calling").sample(range(count), round(share * count)))


def bootstrap_example(prompt_ids: list[int], completion: str, tags: list | None) -> dict:
    """One bootstrap example; a completion with a tool call (``tags``: every tool's ``protocol.Tags``) carries its
    tool outputs' spans (masked in the loss)."""
    example = {"prompt_ids": prompt_ids, "completion": completion}
    if tags is not None:
        from snakeskills.tools.protocol import tools_output_spans

        spans = tools_output_spans(completion, tags)
        if spans:
            example["tool_output_spans"] = [list(span) for span in spans]
    return example


def greedy_accuracy(
    model, tokenizer, prompts: list[list[int]], expected: list[str], max_new_tokens: int, tools=None
) -> float:
    """Share of prompts (token ids) whose greedy completion's ``\\boxed{}`` answer matches the expected answer;
    with ``tools`` (a ``tools.loop.ToolUse``), completions that call the tool, judged after its last output."""
    import torch

    from snakeskills.judging.extractors import extract_answer
    from snakeskills.judging.judge import exact_match

    was_training = model.training
    model.eval()
    if tools is not None:
        texts = _greedy_with_tools(model, tokenizer, prompts, max_new_tokens, tools)
        model.train(was_training)
        predicted = [extract_answer(text, method="boxed", regex=None) for text in texts]
        correct = sum(exact_match(answer, gold) for answer, gold in zip(predicted, expected, strict=True))
        return correct / len(prompts)
    encoded = tokenizer.pad({"input_ids": prompts}, return_tensors="pt", padding=True, padding_side="left")
    with torch.inference_mode():
        output = model.generate(
            **encoded.to(model.device),
            do_sample=False,
            max_new_tokens=max_new_tokens,
            pad_token_id=tokenizer.pad_token_id,
            eos_token_id=tokenizer.eos_token_id,
        )
    texts = tokenizer.batch_decode(output[:, encoded["input_ids"].shape[1] :], skip_special_tokens=True)
    if was_training:
        model.train()
    predicted = [extract_answer(text, method="boxed", regex=None) for text in texts]
    correct = sum(exact_match(answer, gold) for answer, gold in zip(predicted, expected, strict=True))
    return correct / len(prompts)


def _greedy_with_tools(model, tokenizer, prompts: list[list[int]], max_new_tokens: int, tools) -> list[str]:
    """Each prompt's greedy transcript with the tool (``tools.loop``), as the judge reads it (after the last output)."""
    from snakeskills.backends.hf import HFBackend
    from snakeskills.backends.types import GenerationRequest, SamplingParams
    from snakeskills.tools.loop import ToolLoop
    from snakeskills.tools.protocol import answer_text

    loop = ToolLoop(HFBackend.around(model, tokenizer, batch_size=len(prompts)), tools)
    greedy = SamplingParams(temperature=0.0, top_p=1.0, top_k=0, max_new_tokens=max_new_tokens)
    results = loop.generate([GenerationRequest(seed=0, prompt_token_ids=tuple(ids)) for ids in prompts], greedy)
    return [answer_text(result.generation, result.tools["tool_output_spans"]) for result in results]


def accuracy_stop_callback(
    tokenizer, validation: list[dict], *, target: float, check_every: int, max_new_tokens: int, tools=None
):
    """A TrainerCallback ending training once greedy accuracy on ``validation`` reaches ``target``.

    The bootstrap's purpose is a base model with a chosen, modest skill level; stopping on a
    measured accuracy (held-out problems) lands there reliably, whatever the hardware's float
    rounding does to the exact step at which the tiny model starts to generalise.
    """
    from transformers import TrainerCallback

    prompts = [record["prompt_ids"] for record in validation]
    expected = [record["expected_answer"] for record in validation]

    class StopAtAccuracy(TrainerCallback):
        def __init__(self):
            self.history = []

        def on_step_end(self, args, state, control, model=None, **kwargs):
            if state.global_step % check_every:
                return control
            accuracy = greedy_accuracy(model, tokenizer, prompts, expected, max_new_tokens, tools=tools)
            self.history.append({"step": state.global_step, "validation_accuracy": accuracy})
            logger.info("bootstrap step %d: greedy validation accuracy %.3f", state.global_step, accuracy)
            if accuracy >= target:
                control.should_training_stop = True
            return control

    return StopAtAccuracy()
