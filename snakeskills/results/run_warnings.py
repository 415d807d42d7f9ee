"""Warnings where a run is weak: one line each, in the job's log and gathered at the end of the eval comparison.

What is checked (thresholds in the config's ``warnings`` section):
- a round trained on too few SFT examples, from too few problems, or in too few optimizer steps; a round of another
  method on too few examples (pairs, samples) or problems, or in too few optimizer steps;
- a model whose samples on a benchmark hit ``max_new_tokens`` (truncated) or give no answer too often;
- a built tiny model whose bootstrap missed its target (``tiny_model.bootstrap_miss`` words that one).
"""

from __future__ import annotations

import math

from snakeskills.results.metrics import headline_modes
from snakeskills.training.methods import training_method

WARNING = "warning: "


def optimizer_steps(examples: int, training: dict) -> int:
    """The optimizer steps a round's examples make: num_epochs x examples / batch_size, rounded up (packing, where
    on, makes fewer)."""
    return math.ceil(training["num_epochs"] * math.ceil(examples / training["batch_size"]))


def too_few(thresholds: dict, *counts: tuple[int, str, str]) -> list[str]:
    """What falls short: each (count, its threshold's key in ``warnings``, what was counted) below its threshold."""
    return [
        f"{what} (warnings.{key} {thresholds[key]})" for count, key, what in counts if count < thresholds[key]
    ]


def sft_warnings(model: str, stats: dict, training: dict, thresholds: dict) -> list[str]:
    """``stats``: the round's sft stats.json (kept, problems_covered, judged); ``training``: sft.training."""
    examples, problems = stats["kept"], stats["problems_covered"]
    steps = optimizer_steps(examples, training)
    weak = too_few(
        thresholds,
        (examples, "min_sft_examples", f"{examples} SFT examples"),
        (problems, "min_sft_problems", f"from {problems} problems"),
        (steps, "min_optimizer_steps", f"{steps} optimizer steps"),
    )
    if not weak:
        return []
    return [
        f"{WARNING}{model} trains on {examples} SFT examples of {problems} problems ({stats['judged']} samples judged),"
        f" {steps} optimizer steps: too few: " + "; ".join(weak) + ". Sample more seeds or problems (train_num_seeds),"
        " or train a stronger or longer-bootstrapped base model"
    ]


def training_warnings(model: str, cost: dict, thresholds: dict) -> list[str]:
    """A round's warning from its training cost (``method_comparison.training_cost``): too few examples (where its
    method warns on them) or problems (warnings.min_sft_examples, min_sft_problems) or optimizer steps
    (min_optimizer_steps)."""
    method = training_method(cost["method"])
    examples, problems, steps = cost["examples"], cost["problems"], cost["optimizer_steps"]
    counted = [(examples, "min_sft_examples", f"{examples} {method.examples}")] if method.warn_on_examples else []
    counted += [(problems, "min_sft_problems", f"{problems} problems")]
    weak = too_few(thresholds, *counted, (steps, "min_optimizer_steps", f"{steps} optimizer steps"))
    if not weak:
        return []
    return [
        f"{WARNING}{model} trains on {examples} {method.examples} of {problems} problems in {steps} optimizer"
        f" steps: too few: " + "; ".join(weak) + f". {method.too_little_data} (its stats.json counts why problems "
        "were left out)"
    ]


def metrics_warnings(model: str, benchmark: str, split: str, metrics: dict, thresholds: dict) -> list[str]:
    """``metrics``: one benchmark's ``{eval_mode: {metric: value}}`` from metrics.json."""
    values = metrics[headline_modes(metrics)[0]]
    where = f"{model} on {benchmark} ({split})"
    lines = []
    truncated = values.get("truncated")
    if truncated is not None and truncated > thresholds["max_truncated_share"]:
        lines.append(
            f"{WARNING}{where}: {truncated:.1f}% of samples hit max_new_tokens (warnings.max_truncated_share "
            f"{thresholds['max_truncated_share']}%): raise generation.max_new_tokens, or the model does not stop"
        )
    no_answer = values.get("no_answer")
    if no_answer is not None and no_answer > thresholds["max_no_answer_share"]:
        lines.append(
            f"{WARNING}{where}: {no_answer:.1f}% of samples give no answer the judge can read "
            f"(warnings.max_no_answer_share {thresholds['max_no_answer_share']}%): check the prompt's answer format "
            "against judge.extraction (the judged files show what the model wrote)"
        )
    return lines


def format_warnings(lines: list[str]) -> str:
    """The comparison's closing section: every warning, or nothing."""
    if not lines:
        return ""
    return f"\nwarnings ({len(lines)}):\n" + "".join(f"  {line.removeprefix(WARNING)}\n" for line in lines)
