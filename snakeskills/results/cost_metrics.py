"""The price of samples, in a run whose tools or models have prices: per model and benchmark, by tool, and each
model's accuracy against its price. Prices are in the config's unit.

Fields read from a judged record:

- ``cost``: its tool calls' prices summed, or its own answer's price (a priced model evaluated alone); missing or
  null costs 0. Without any priced record there is no block anywhere (metrics, problems.jsonl, comparison, report).
- ``tool_call_log``: one ``{"tool", "cost", "input_tokens", "output_tokens", "seconds", "error", "timeout"}`` per
  call; missing: no call.

Summarize writes ``"<benchmark>/cost"`` to ``metrics.json`` (``cost_metrics``), its lines to ``metrics.txt`` and each
problem's price to problems.jsonl. The eval comparison stores accuracy against mean price per problem, paired with
each reference model's (``paired_bootstrap.compare_accuracy_cost``), under ``"<benchmark>/accuracy_cost"``, tables
the Pareto frontier (``accuracy_cost_table``, ``pareto_frontier``) and the report plots it."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

from snakeskills.errors import SnakeskillsError
from snakeskills.results.metrics import aligned_rows

# metrics.json's key of a benchmark's prices ("<benchmark>/cost"), and eval/summary.json's of a model's accuracy
# against its price ("<benchmark>/accuracy_cost")
COST_METRIC = "cost"
ACCURACY_COST = "accuracy_cost"
# the judged record's fields, and a tool call's price in its log entry
COST, TOOL_CALL_LOG = "cost", "tool_call_log"
VERDICT = "symbolic_correct"


def cost_metrics(records: Iterable[Mapping]) -> dict | None:
    """A benchmark's prices over its judged ``records`` (every seed's), or None where no record has a price
    (``cost``). Percentages are 0-100:

    - ``samples``: the records; ``cost_per_sample``: their mean price; ``total_cost``: their prices summed;
    - ``share_with_cost``: percent of the samples whose price is above 0;
    - ``by_tool``: per tool called (in name order), from the records' ``tool_call_log``: ``calls``,
      ``calls_per_sample``, ``cost`` (its calls' prices summed), ``cost_per_sample`` and ``share_calling`` (percent
      of the samples that called it at least once); empty where no record logs a call."""
    records = list(records)
    if not any(record.get(COST) is not None for record in records):
        return None
    samples = len(records)
    prices = [_price(record) for record in records]
    calls: dict[str, list[tuple[int, float]]] = {}  # tool: (sample index, price) per call
    for index, record in enumerate(records):
        for call in record.get(TOOL_CALL_LOG) or ():
            if not isinstance(call.get("tool"), str):
                raise SnakeskillsError(f"a {TOOL_CALL_LOG} entry names no tool: {call} (record {record.get('id')!r})")
            calls.setdefault(call["tool"], []).append((index, call.get(COST) or 0.0))
    by_tool = {}
    for tool, made in sorted(calls.items()):
        cost = math.fsum(price for _, price in made)
        by_tool[tool] = {
            "calls": len(made),
            "calls_per_sample": len(made) / samples,
            "cost": rounded_cost(cost),
            "cost_per_sample": rounded_cost(cost / samples),
            "share_calling": 100.0 * len({index for index, _ in made}) / samples,
        }
    total = math.fsum(prices)
    return {
        "samples": samples,
        "cost_per_sample": rounded_cost(total / samples),
        "total_cost": rounded_cost(total),
        "share_with_cost": 100.0 * sum(price > 0 for price in prices) / samples,
        "by_tool": by_tool,
    }


def _price(record: Mapping) -> float:
    value = record.get(COST)
    return 0.0 if value is None else float(value)


def rounded_cost(value: float) -> float:
    """A price to 12 significant digits: sums of prices read the same in every file (no trailing float noise)
    whatever the unit's scale."""
    return float(f"{value:.12g}")


def format_price(value: float, *, sign: bool = False) -> str:
    """A price as text: two decimals from 1 up (and 0), three significant digits below (``0.310``, ``0.000125``)."""
    decimals = 2 if value == 0 else max(2, 2 - math.floor(math.log10(abs(value))))
    return format(value, f"{'+' if sign else ''}.{decimals}f")


def format_by_tool(by_tool: dict[str, dict]) -> str:
    """A block's prices by tool on one line, ``expert 0.6 per sample (0.50 calls per sample, 37.5% of samples call
    it); ...``."""
    return "; ".join(
        f"{tool} {format_price(entry['cost_per_sample'])} per sample ({entry['calls_per_sample']:.2f} calls per "
        f"sample, {entry['share_calling']:.1f}% of samples call it)"
        for tool, entry in by_tool.items()
    )


def format_cost_metrics(block: dict) -> str:
    """metrics.txt's lines of a ``cost_metrics`` block: the price per sample, and by tool where the samples called
    one."""
    text = (
        f"price: {format_price(block['cost_per_sample'])} per sample ({format_price(block['total_cost'])} over "
        f"{block['samples']} samples), {block['share_with_cost']:.1f}% of samples have a price\n"
    )
    return text + (f"price by tool: {format_by_tool(block['by_tool'])}\n" if block["by_tool"] else "")


def is_cost_block(key: str, value) -> bool:
    """Whether a summary entry is a benchmark's prices (``"<benchmark>/cost"`` as ``cost_metrics`` writes it), not a
    user's metric that happens to be named ``cost`` in a run without prices."""
    return key.endswith(f"/{COST_METRIC}") and isinstance(value, dict) and "cost_per_sample" in value


def cost_blocks(entries: dict) -> dict[str, dict]:
    """``{benchmark: cost_metrics block}`` of one model's summary entries (metrics.json's or eval/summary.json's)."""
    return {key.removesuffix(f"/{COST_METRIC}"): value for key, value in entries.items() if is_cost_block(key, value)}


def is_accuracy_cost_entry(key: str, value) -> bool:
    """Whether an eval/summary.json entry is a model's accuracy against its price (``"<benchmark>/accuracy_cost"``,
    as the eval comparison writes it)."""
    return key.endswith(f"/{ACCURACY_COST}") and isinstance(value, dict) and "cost_per_problem" in value


def accuracy_cost_entries(entries: dict) -> dict[str, dict]:
    """``{benchmark: accuracy_cost entry}`` of one model's eval/summary.json entries."""
    return {
        key.removesuffix(f"/{ACCURACY_COST}"): value
        for key, value in entries.items()
        if is_accuracy_cost_entry(key, value)
    }


def accuracy_cost_points(summary: dict[str, dict]) -> dict[str, list[tuple[str, float, float]]]:
    """``{benchmark: [(model, mean price per problem, pass@1 percent), ...]}`` in summary order, over the models with
    an ``"<benchmark>/accuracy_cost"`` entry (a run with prices)."""
    points: dict[str, list[tuple[str, float, float]]] = {}
    for model, entries in summary.items():
        for benchmark, entry in accuracy_cost_entries(entries).items():
            points.setdefault(benchmark, []).append((model, entry["cost_per_problem"], entry["accuracy"]))
    return points


def pareto_frontier(points: Iterable[tuple[str, float, float]]) -> list[tuple[str, float, float]]:
    """The (name, price, accuracy) points no other point dominates (at least as accurate and at most as dear, one
    of the two strictly), cheapest first (the more accurate first at equal price)."""
    points = list(points)
    frontier = [point for point in points if not any(_dominates(other, point) for other in points)]
    return sorted(frontier, key=lambda point: (point[1], -point[2]))


def _dominates(one: tuple[str, float, float], other: tuple[str, float, float]) -> bool:
    _, price, accuracy = one
    _, other_price, other_accuracy = other
    return price <= other_price and accuracy >= other_accuracy and (price < other_price or accuracy > other_accuracy)


def format_frontier(frontier: list[tuple[str, float, float]]) -> str:
    """``base 0.00 -> 12.0%, expert 1.20 -> 86.0%``."""
    return ", ".join(f"{name} {format_price(price)} -> {accuracy:.1f}%" for name, price, accuracy in frontier)


TABLE_TITLE = (
    "accuracy against cost (eval split): pass@1 (the headline pass@1[avg-of-k] symbolic_correct) and the mean price "
    "of one\nsample per problem (0 for a model without prices)"
)
# after the title where the models are paired with reference models, at the pairs' confidence
VERSUS_NOTE = (
    "; 'vs <model>': the row's model less that model, accuracy in points\nand price, each with its {confidence}% "
    "paired-bootstrap interval over the problems"
)


def accuracy_cost_table(summary: dict[str, dict]) -> str:
    """The eval comparison's table of each model's accuracy against its price on each benchmark (eval/summary.json's
    ``"<benchmark>/accuracy_cost"`` entries), one row per (model, benchmark) in summary order under its title and one
    column per reference model (in summary order), then each benchmark's Pareto frontier and each model's prices by
    tool; empty where no model has an entry (a run without prices)."""
    points = accuracy_cost_points(summary)
    if not points:
        return ""
    paired = {
        reference
        for entries in summary.values()
        for entry in accuracy_cost_entries(entries).values()
        for reference in entry["vs"]
    }
    references = [model for model in summary if model in paired]
    rows = [["model", "benchmark", "pass@1", "price/problem", *(f"vs {reference}" for reference in references)]]
    for model, entries in summary.items():
        for benchmark, entry in accuracy_cost_entries(entries).items():
            rows.append(
                [
                    model,
                    benchmark,
                    f"{entry['accuracy']:.2f}%",
                    format_price(entry["cost_per_problem"]),
                    *(_versus(entry["vs"].get(reference)) for reference in references),
                ]
            )
    pairs = [
        pair
        for entries in summary.values()
        for entry in accuracy_cost_entries(entries).values()
        for pair in entry["vs"].values()
    ]
    title = TABLE_TITLE
    if pairs:
        title += VERSUS_NOTE.format(confidence=round(100 * pairs[0]["accuracy"]["confidence"]))
    lines = [title, *aligned_rows(rows, rule_under_header=True)]
    for benchmark, models in points.items():
        lines.append(f"frontier on {benchmark} (price -> accuracy): {format_frontier(pareto_frontier(models))}")
    for model, entries in summary.items():
        for benchmark, block in cost_blocks(entries).items():
            if block["by_tool"] and f"{benchmark}/{ACCURACY_COST}" in entries:
                lines.append(f"price by tool, {model} on {benchmark}: {format_by_tool(block['by_tool'])}")
    return "\n".join(lines) + "\n"


def _versus(paired: dict | None) -> str:
    """A reference column's cell: ``+12.50 [+8.00, +17.00] points, price +0.310 [+0.290, +0.330]``; blank in the
    reference's own row."""
    if paired is None:
        return ""
    accuracy, cost = paired["accuracy"], paired["cost"]
    return (
        f"{accuracy['gain']:+.2f} [{accuracy['ci_low']:+.2f}, {accuracy['ci_high']:+.2f}] points, price "
        f"{format_price(cost['difference'], sign=True)} [{format_price(cost['ci_low'], sign=True)}, "
        f"{format_price(cost['ci_high'], sign=True)}]"
    )
