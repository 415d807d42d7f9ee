"""Training methods side by side: each tuned model's training cost (the data it trained on, optimizer steps, wall
time; the completions a method that samples while training drew) and the paired comparison of rounds of the same number trained by different
methods from the same base model (``paired.compare``: the same problems, the same bootstrap draws)."""

from __future__ import annotations

from pathlib import Path

from snakeskills.io import read_json
from snakeskills.results.metrics import aligned_rows
from snakeskills.results.paired_bootstrap import compare
from snakeskills.results.paired_bootstrap import describe as describe_paired
from snakeskills.training.methods import training_method

# the key of a model's training cost in eval/summary.json, and of its paired comparison with another method's round
TRAINING_COST = "training/cost"
PAIRED_GAIN_OVER = "paired_gain_over"


def training_cost(method: str, round_number: int, tuned_folder: str | Path, stats_path: str | Path) -> dict:
    """A tuned model's cost: its method and round, the examples it trained on (``TrainingMethod.examples``: SFT
    examples, DPO pairs, ...), the problems they cover, optimizer steps, the trainer's wall time (seconds) and, for a
    method that samples while training (GRPO), the completions it sampled."""
    metrics = read_json(Path(tuned_folder) / "training_metrics.json")
    stats = read_json(stats_path)
    entry = training_method(method)
    cost = {
        "method": method,
        "round": round_number,
        "examples": stats[entry.examples_stat] if entry.examples_stat else metrics.get("num_examples"),
        "problems": stats.get(entry.problems_stat),
        "optimizer_steps": metrics.get("global_step"),
        "wall_seconds": round(float(metrics.get("train_runtime", 0.0)), 1),
    }
    if "problems_in_pass_rate" in stats:  # dpo, kto, grpo: the problems the pass-rate filter kept, of all
        cost["in_pass_rate"] = f"{stats['problems_in_pass_rate']}/{stats['problems']}"
    if entry.samples_while_training:
        cost["completions_sampled"] = metrics.get("completions_sampled")
    return cost


def format_costs(costs: dict[str, dict]) -> str:
    """The costs as a table, one row per tuned model (empty without tuned models)."""
    if not costs:
        return ""
    columns = ["method", "round", "examples", "problems", "in_pass_rate", "optimizer_steps", "wall_seconds"]
    columns.append("completions_sampled")
    rows = [["model", *columns]]
    for model, cost in costs.items():
        rows.append([model, *("" if cost.get(column) is None else str(cost[column]) for column in columns)])
    methods = [training_method(cost["method"]) for cost in costs.values()]
    *others, last = dict.fromkeys(method.examples for method in methods)
    examples = f"{', '.join(others)} or {last}" if others else last
    note = (
        f"examples: {examples}; in_pass_rate: train problems the pass-rate filter kept; wall_seconds: the training "
        "job's trainer"
    )
    return "\ntraining cost by model (" + note + ")\n" + "\n".join(aligned_rows(rows, rule_under_header=True)) + "\n"


def compare_methods(pairs: list[tuple[str, str]], benchmarks: list[str], problems: dict, summary: dict) -> list[str]:
    """Each (model, other) pair's paired comparison on each benchmark, stored in ``summary[model]`` under
    ``"<benchmark>/paired_gain_over/<other>"``; returns the lines for the comparison text."""
    lines = []
    for model, other in pairs:
        for benchmark in benchmarks:
            entry, _ = compare(model, other, benchmark, problems[other, benchmark], problems[model, benchmark])
            summary[model][f"{benchmark}/{PAIRED_GAIN_OVER}/{other}"] = entry
            lines.append(
                f"{model} vs {other} on {benchmark}: {entry['gain']:+.2f} points\n  {describe_paired(model, entry)}"
            )
    return lines
