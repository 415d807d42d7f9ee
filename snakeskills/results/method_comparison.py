"""Training methods side by side: each tuned model's training cost (the table below the comparison: the problems
and records it trained on, the completions a method that samples while training drew, tokens, optimizer steps,
seconds) and the paired comparison of rounds of the same number trained by different methods from the same base
model (``paired.compare``: the same problems, the same bootstrap draws)."""

from __future__ import annotations

from pathlib import Path

from snakeskills.io import read_json
from snakeskills.results.method_wording import RECORDS_MEANING
from snakeskills.results.metrics import aligned_rows
from snakeskills.results.paired_bootstrap import compare
from snakeskills.results.paired_bootstrap import describe as describe_paired
from snakeskills.training.methods import TRAINING_METHODS, training_method

# the key of a model's training cost in eval/summary.json, and of its paired comparison with another method's round
TRAINING_COST = "training/cost"
PAIRED_GAIN_OVER = "paired_gain_over"

# the cost table's columns after model, method and round, each named with its unit, meaning the same in every row
# and explained once under the table; each method's records column (sft_examples, dpo_pairs, kto_samples:
# ``TrainingMethod.records``, the records its trainer drew: ``records_trained``) comes after train_problems. A cell is
# blank where its column does not apply to the row's method or its trainer did not record it; a column blank in every
# row is left out
COST_COLUMNS = {
    "problems_kept_by_pass_rate": "train problems whose pass rate under the previous model lies in the method's "
    "pass_rate (<method>.pass_rate), of all train problems (kept/all)",
    "train_problems": "distinct train problems the round's training data covers (GRPO: the problems it draws "
    "from); fewer than those kept where a problem gave no record (a DPO pair needs a correct and an incorrect "
    "sample)",
    "completions_sampled": "completions the trainer sampled while training (GRPO: optimizer_steps x "
    "grpo.training.batch_size, grpo.num_generations per problem drawn)",
    "train_tokens": "tokens the trainer fed the model, prompts and answers (sampled completions for GRPO), padding "
    "left out (TRL's num_tokens); blank for a run resumed from a checkpoint whose trainer counts from the resume "
    "(SFT, DPO, KTO; GRPO keeps its count in the trainer state); a round trained in segments: all of them",
    "optimizer_steps": "optimizer steps the trainer took",
    "wall_seconds": "seconds the trainer ran (since the resume, for a run resumed from a checkpoint; a round trained "
    "in segments: all of them); the data rules and the samples they read are not in it",
    "validation_seconds": "seconds the generate and judge jobs evaluating the round's checkpoints on validation_split "
    "ran (<method>.training.eval_every_steps; each job's log, first line to last: a model server that several jobs "
    "share loads outside them)",
}


def training_cost(method: str, round_number: int, tuned_folder: str | Path, stats_path: str | Path) -> dict:
    """A tuned model's cost, keyed by ``COST_COLUMNS`` and its method's records column (``TrainingMethod.records``:
    the records its trainer drew, ``records_trained``), from its data rule's stats.json (``stats_path``) and its
    trainer's training_metrics.json; a key whose column does not apply to the method is left out, one its trainer
    did not record is ``None``."""
    metrics = read_json(Path(tuned_folder) / "training_metrics.json")
    stats = read_json(stats_path)
    entry = training_method(method)
    cost = {"method": method, "round": round_number}
    if "problems_in_pass_rate" in stats:  # the data rules that filter by pass rate count what they kept, of all
        cost["problems_kept_by_pass_rate"] = f"{stats['problems_in_pass_rate']}/{stats['problems']}"
    cost["train_problems"] = stats[entry.problems_stat]
    if entry.records is not None:
        cost[entry.records.column] = records_trained(metrics, stats[entry.records.stat])
    if entry.samples_while_training:
        cost["completions_sampled"] = metrics.get("completions_sampled")
    cost["train_tokens"] = trained_tokens(metrics)
    cost["optimizer_steps"] = metrics["global_step"]
    runtime = metrics.get("train_runtime")
    cost["wall_seconds"] = None if runtime is None else round(float(runtime), 1)
    return cost


def records_trained(metrics: dict, records: int) -> int:
    """The distinct records of a round's data (``records`` of them) its trainer drew: all of them once it made a whole
    pass over the data; for a fraction of a pass (``num_epochs`` below 1, or ``max_steps`` ending it first), that
    fraction of them: the trainer's last logged ``epoch`` (passes made, counted in batches) times the records,
    rounded, to within a batch (a pass's last batch is partial; with SFT's packing, a batch is of packed rows). All of
    them where its metrics logged no epoch."""
    epochs = [entry["epoch"] for entry in metrics.get("log_history", []) if "epoch" in entry]
    return records if not epochs else min(records, round(epochs[-1] * records))


def trained_tokens(metrics: dict) -> int | None:
    """The tokens a trainer fed the model over its round: TRL's running count (``num_tokens``), as last logged in the
    metrics' ``log_history``; for a round trained in segments, the sum of its segments' (``round_train_tokens``,
    ``segment_tokens``). ``None`` where it logged none, or the run resumed from a checkpoint and its trainer counts
    from the resume (``TrainingMethod.counts_tokens_across_resumes``: TRL's SFT, DPO and KTO trainers)."""
    if "round_train_tokens" in metrics:
        return metrics["round_train_tokens"]
    if metrics.get("resumed_from_checkpoint") and not _counts_across_resumes(metrics):
        return None
    counts = _token_counts(metrics)
    return counts[-1][1] if counts else None


def segment_tokens(metrics: dict, start_step: int) -> int | None:
    """The tokens a training segment (a job that resumed the trainer state of step ``start_step``, 0 for the first)
    trained itself, from its training_metrics.json; ``None`` as ``trained_tokens`` says, or where a trainer that
    counts from the resume resumed anything but the previous segment's state (a rerun after a kill inside it)."""
    counts = _token_counts(metrics)
    if not counts:
        return None
    if _counts_across_resumes(metrics):  # the count restored with the state comes first in the log
        before = [count for step, count in counts if step <= start_step]
        return counts[-1][1] - (before[-1] if before else 0)
    if metrics.get("resumed_from_checkpoint") not in (None, metrics.get("segment", {}).get("resumed_state")):
        return None
    own = [count for step, count in counts if step > start_step]
    return own[-1] if own else None


def _token_counts(metrics: dict) -> list[tuple[int, int]]:
    """(step, num_tokens) of each log_history entry that has the count, in order."""
    return [
        (int(entry.get("step", 0)), int(entry["num_tokens"]))
        for entry in metrics.get("log_history", [])
        if "num_tokens" in entry
    ]


def _counts_across_resumes(metrics: dict) -> bool:
    method = metrics.get("training_method")
    return method in TRAINING_METHODS and TRAINING_METHODS[method].counts_tokens_across_resumes


def cost_columns(costs: dict[str, dict]) -> dict[str, str]:
    """The cost table's columns for ``costs`` with what each holds: ``COST_COLUMNS`` with the records columns of
    the methods in ``costs`` after train_problems, less those blank in every row."""
    methods = {cost["method"] for cost in costs.values()}
    records = {
        method.records.column: RECORDS_MEANING[method.name]
        for method in TRAINING_METHODS.values()
        if method.name in methods and method.records is not None
    }
    names = list(COST_COLUMNS)
    split = names.index("train_problems") + 1
    columns = {
        **{name: COST_COLUMNS[name] for name in names[:split]},
        **records,
        **{name: COST_COLUMNS[name] for name in names[split:]},
    }
    return {
        name: meaning for name, meaning in columns.items() if any(cost.get(name) is not None for cost in costs.values())
    }


def format_costs(costs: dict[str, dict]) -> str:
    """The costs as a table, one row per tuned model, then each column's meaning once (empty without tuned
    models)."""
    if not costs:
        return ""
    columns = cost_columns(costs)
    rows = [["model", "method", "round", *columns]]
    for model, cost in costs.items():
        cells = [cost["method"], cost["round"], *(cost.get(column) for column in columns)]
        rows.append([model, *("" if cell is None else str(cell) for cell in cells)])
    notes = "".join(f"  {column}: {meaning}\n" for column, meaning in columns.items())
    return (
        "\ntraining cost by model (a blank cell: the column does not apply to the method, or its trainer did not "
        "record it)\n" + "\n".join(aligned_rows(rows, rule_under_header=True)) + "\n" + notes
    )


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
