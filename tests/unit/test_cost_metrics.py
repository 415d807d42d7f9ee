"""Prices in the summaries (snakeskills.results.cost_metrics): a benchmark's block from judged records whose numbers
are worked out by hand below, its place in metrics.json, metrics.txt and problems.jsonl (and nothing of it where the
records have no price), the paired price difference, the Pareto frontier, the eval comparison's table of accuracy
against price, and the report's plot of it."""

from __future__ import annotations

import json

import numpy as np
import pytest

from snakeskills.errors import SnakeskillsError
from snakeskills.io import write_jsonl
from snakeskills.results.comparison import write_comparison
from snakeskills.results.cost_metrics import (
    TABLE_TITLE,
    accuracy_cost_points,
    accuracy_cost_table,
    cost_blocks,
    cost_metrics,
    format_cost_metrics,
    format_frontier,
    pareto_frontier,
)
from snakeskills.results.paired_bootstrap import (
    ProblemScores,
    paired_bootstrap,
    paired_cost_difference,
    read_problem_scores,
)
from snakeskills.results.report import plot_accuracy_cost
from snakeskills.results.summarize import write_benchmark_summary

COST_FIELDS = ("cost", "tool_call_log")


def row(problem, correct, calls=(), cost=None) -> dict:
    """A judged record of a run with priced tools: ``calls`` are (tool, price) pairs; the sample's price is theirs
    summed unless ``cost`` (a priced model's own answer) is given."""
    return {
        "id": problem,
        "predicted_answer": "1" if correct else "2",
        "symbolic_correct": correct,
        "num_generated_tokens": 10,
        "cost": sum(price for _, price in calls) if cost is None else cost,
        "tool_call_log": [
            {
                "tool": tool,
                "cost": price,
                "input_tokens": 5,
                "output_tokens": 7,
                "seconds": 0.5,
                "error": False,
                "timeout": False,
            }
            for tool, price in calls
        ],
    }


def plain(seeds: list[list[dict]]) -> list[list[dict]]:
    """The same records without prices (a run without priced tools)."""
    return [
        [{key: value for key, value in record.items() if key not in COST_FIELDS} for record in seed] for seed in seeds
    ]


# two seeds of three problems, 6 samples; by hand:
#   prices 0.5 + 0 + 0.5 + 0 + 1 + 0.75 = 2.75 -> 0.458333 per sample; priced: s0p1 s0p3 s1p2 s1p3 -> 4 of 6
#   expert: calls s0p1, s0p3 twice, s1p2, s1p3 = 5 -> 5/6 per sample, prices 2.75; called by 4 of 6 samples
#   calculator: calls s0p1, s1p1 = 2 -> 1/3 per sample, free; called by 2 of 6 samples
#   per problem (problems.jsonl): p1 0.5 + 0 = 0.5, p2 0 + 1 = 1, p3 0.5 + 0.75 = 1.25
SEEDS = [
    [
        row("p1", True, [("expert", 0.5), ("calculator", 0.0)]),
        row("p2", False),
        row("p3", True, [("expert", 0.25), ("expert", 0.25)]),
    ],
    [
        row("p1", True, [("calculator", 0.0)]),
        row("p2", True, [("expert", 1.0)]),
        row("p3", False, [("expert", 0.75)]),
    ],
]
BLOCK = {
    "samples": 6,
    "cost_per_sample": pytest.approx(2.75 / 6),
    "total_cost": 2.75,
    "share_with_cost": pytest.approx(400 / 6),
    "by_tool": {
        "calculator": {
            "calls": 2,
            "calls_per_sample": pytest.approx(1 / 3),
            "cost": 0.0,
            "cost_per_sample": 0.0,
            "share_calling": pytest.approx(100 / 3),
        },
        "expert": {
            "calls": 5,
            "calls_per_sample": pytest.approx(5 / 6),
            "cost": 2.75,
            "cost_per_sample": pytest.approx(2.75 / 6),
            "share_calling": pytest.approx(400 / 6),
        },
    },
}
LINES = (
    "price: 0.458 per sample (2.75 over 6 samples), 66.7% of samples have a price\n"
    "price by tool: calculator 0.00 per sample (0.33 calls per sample, 33.3% of samples call it); expert 0.458 per "
    "sample (0.83 calls per sample, 66.7% of samples call it)\n"
)


def test_the_block_counts_prices_shares_and_each_tools_calls():
    block = cost_metrics([record for seed in SEEDS for record in seed])
    assert block == BLOCK and list(block) == list(BLOCK)
    assert format_cost_metrics(block) == LINES


def test_every_calls_price_counts_in_its_tool_and_the_samples_in_the_total():
    """Prices of powers of two, so a call left out of a sum changes it exactly: 1/8 + 1/4 + 1/2 by one sample,
    1 by another, of 2 tools."""
    records = [
        row("p1", True, [("expert", 0.125), ("expert", 0.25), ("coder", 0.5)]),
        row("p2", False, [("coder", 1.0)]),
    ]
    block = cost_metrics(records)
    assert block["total_cost"] == 1.875 and block["cost_per_sample"] == 0.9375
    assert block["by_tool"]["expert"]["cost"] == 0.375 and block["by_tool"]["expert"]["calls"] == 2
    assert block["by_tool"]["coder"]["cost"] == 1.5 and block["by_tool"]["coder"]["calls"] == 2
    assert block["by_tool"]["coder"]["share_calling"] == 100.0 and block["by_tool"]["expert"]["share_calling"] == 50.0
    # a priced model evaluated alone: its answers' prices, no calls
    alone = cost_metrics([row("p1", True, cost=0.5), row("p2", False, cost=0.25)])
    assert (alone["total_cost"], alone["share_with_cost"], alone["by_tool"]) == (0.75, 100.0, {})
    assert (
        format_cost_metrics(alone) == "price: 0.375 per sample (0.750 over 2 samples), 100.0% of samples have a price\n"
    )


def test_no_block_without_a_price_and_a_missing_or_null_price_costs_nothing():
    assert cost_metrics(plain(SEEDS)[0]) is None and cost_metrics([]) is None
    assert cost_metrics([{**record, "cost": None} for record in SEEDS[0]]) is None
    block = cost_metrics(
        [row("p1", True, cost=1.0), {**row("p2", True), "cost": None}, plain([[row("p3", True)]])[0][0]]
    )
    assert (block["samples"], block["total_cost"], block["share_with_cost"]) == (3, 1.0, pytest.approx(100 / 3))


def summarized(folder, seeds, specs=None) -> tuple[dict, str, list[dict]]:
    """(metrics.json, metrics.txt, problems.jsonl) of summarizing ``seeds`` (one list of records per seed file) as
    benchmark sums."""
    paths = []
    for index, records in enumerate(seeds):
        paths.append(folder / f"output-rs{index}.jsonl")
        write_jsonl(paths[-1], records)
    table = write_benchmark_summary(
        "sums",
        paths,
        specs or {},
        metrics_path=folder / "metrics.json",
        table_path=folder / "metrics.txt",
        problems_path=folder / "problems.jsonl",
    )
    assert (folder / "metrics.txt").read_text() == table
    problems = [json.loads(line) for line in (folder / "problems.jsonl").read_text().splitlines()]
    return json.loads((folder / "metrics.json").read_text()), table, problems


def test_summarize_adds_the_block_and_each_problems_price_and_nothing_without_prices(tmp_path):
    metrics, table, problems = summarized(tmp_path / "priced", SEEDS)
    assert list(metrics) == ["sums", "sums/cost"] and metrics["sums/cost"] == BLOCK
    assert table.endswith(LINES)
    assert [(problem["id"], problem["cost"]) for problem in problems] == [("p1", 0.5), ("p2", 1.0), ("p3", 1.25)]
    # the same records without prices: the same files less the block, its lines and the problems' prices
    plain_metrics, plain_table, plain_problems = summarized(tmp_path / "plain", plain(SEEDS))
    assert list(plain_metrics) == ["sums"] and plain_metrics["sums"] == metrics["sums"]
    assert plain_table + LINES == table
    assert plain_problems == [{key: value for key, value in problem.items() if key != "cost"} for problem in problems]
    assert "cost" not in (tmp_path / "plain" / "problems.jsonl").read_text()
    # prices all null: nothing either
    nulls = [[{**record, "cost": None} for record in seed] for seed in SEEDS]
    null_metrics, null_table, null_problems = summarized(tmp_path / "nulls", nulls)
    assert (null_metrics, null_table, null_problems) == (plain_metrics, plain_table, plain_problems)
    # a price polars will not read as a number (a string): Python reads the file, and says where it is
    with pytest.raises(SnakeskillsError, match=r"output-rs0\.jsonl:1: judged row's 'cost' is 'cheap', not a number"):
        summarized(tmp_path / "text", [[{**SEEDS[0][0], "cost": "cheap"}, *SEEDS[0][1:]], SEEDS[1]])
    # a price written as an integer reads as any other
    integers = [
        [{**record, "cost": int(record["cost"])} if record["cost"] == 1.0 else record for record in seed]
        for seed in SEEDS
    ]
    assert summarized(tmp_path / "integers", integers)[0]["sums/cost"] == BLOCK


def test_a_metric_named_cost_stops_summarize_only_where_the_records_have_prices(tmp_path):
    specs = {"cost": {"function": "pass_hat_k", "options": {}, "key": "metrics.cost"}}
    with pytest.raises(SnakeskillsError, match=r"config key metrics\.cost .*summarize writes the samples' prices"):
        summarized(tmp_path / "priced", SEEDS, specs)
    assert summarized(tmp_path / "plain", plain(SEEDS), specs)[0]["sums/cost"] == {
        "pass^1": pytest.approx(400 / 6),
        "pass^2": pytest.approx(100 / 3),
    }


def scores(correct, cost=None, samples=4) -> ProblemScores:
    correct = np.asarray(correct, dtype=np.int64)
    return ProblemScores(
        [f"p{i}" for i in range(len(correct))],
        np.full(len(correct), samples),
        correct,
        None if cost is None else np.asarray(cost, dtype=np.float64),
    )


def test_the_price_difference_and_its_interval_take_the_gains_draws():
    generator = np.random.default_rng(1)
    correct = generator.integers(0, 5, 200)
    reference = scores(correct, cost=generator.uniform(1.0, 3.0, 200))
    # every problem cheaper: the whole interval below 0
    cheaper = scores(correct, cost=0.5 * reference.cost)
    result = paired_cost_difference(reference, cheaper)
    assert result["reference_cost"] == pytest.approx(reference.cost.mean() / 4)
    assert result["model_cost"] == pytest.approx(reference.cost.mean() / 8)
    assert result["difference"] == pytest.approx(-reference.cost.mean() / 8)
    assert result["ci_low"] < result["difference"] < result["ci_high"] < 0
    assert (result["problems"], result["resamples"], result["confidence"]) == (200, 10_000, 0.95)
    # the same prices: 0 and no interval
    same = paired_cost_difference(reference, reference)
    assert (same["difference"], same["ci_low"], same["ci_high"]) == (0, 0, 0)
    # a model without prices costs 0
    free = paired_cost_difference(reference, scores(correct))
    assert free["model_cost"] == 0 and free["difference"] == pytest.approx(-result["reference_cost"])
    assert paired_cost_difference(scores(correct), scores(correct))["ci_high"] == 0
    # prices equal to the correct samples: the price interval is the gain's over 100, drawn from the same problems
    other = generator.integers(0, 5, 200)
    base, tuned = scores(correct, cost=correct), scores(other, cost=other)
    gain, price = paired_bootstrap(base, tuned), paired_cost_difference(base, tuned)
    assert (100 * price["ci_low"], 100 * price["ci_high"]) == (
        pytest.approx(gain["ci_low"], abs=1e-4),
        pytest.approx(gain["ci_high"], abs=1e-4),
    )
    # the problems must match, as for the gain
    with pytest.raises(SnakeskillsError, match="problem ids differ"):
        paired_cost_difference(reference, ProblemScores(["x"], np.array([4]), np.array([1])))


def test_problem_scores_read_the_price_when_the_first_row_has_it(tmp_path):
    write_jsonl(tmp_path / "priced.jsonl", [{"id": "a", "samples": 2, "symbolic_correct": 1, "cost": 0.5}])
    assert read_problem_scores(tmp_path / "priced.jsonl").prices().tolist() == [0.25]
    write_jsonl(tmp_path / "free.jsonl", [{"id": "a", "samples": 2, "symbolic_correct": 1}])
    scores_read = read_problem_scores(tmp_path / "free.jsonl")
    assert scores_read.cost is None and scores_read.prices().tolist() == [0.0]
    write_jsonl(
        tmp_path / "bad.jsonl",
        [
            {"id": "a", "samples": 2, "symbolic_correct": 1, "cost": 0.5},
            {"id": "b", "samples": 2, "symbolic_correct": 1},
        ],
    )
    with pytest.raises(SnakeskillsError, match=r"bad\.jsonl:2: problem score row lacks a number 'cost'"):
        read_problem_scores(tmp_path / "bad.jsonl")


def test_the_frontier_keeps_the_models_no_other_beats_cheapest_first():
    points = [
        ("expert", 1.2, 86.0),
        ("base", 0.0, 12.0),
        ("grpo-round1", 0.31, 80.5),
        ("sft-round1", 0.5, 70.0),  # dearer and less accurate than grpo-round1
        ("dear", 1.2, 80.0),  # as dear as the expert, less accurate
        ("same", 0.31, 80.5),  # grpo-round1's twin: neither beats the other
        ("free", 0.0, 12.0),
    ]
    frontier = pareto_frontier(points)
    assert [name for name, _, _ in frontier] == ["base", "free", "grpo-round1", "same", "expert"]
    assert (
        format_frontier(pareto_frontier(points[:4]))
        == "base 0.00 -> 12.0%, grpo-round1 0.310 -> 80.5%, expert 1.20 -> 86.0%"
    )
    assert pareto_frontier([]) == []


# three models on four problems, two seeds each:
#   base: no prices (the run's base model without priced tools)
#   sft-round1: calls the expert at 0.5 on p1 and p2 of each seed, right on p1-p3: 1.0 of 4 samples' prices each seed
#   base-always-expert: calls the expert at 1.0 on every sample, right on every problem
EVAL_SEEDS = {
    "base": plain([[row("p1", True), row("p2", False), row("p3", False), row("p4", False)]] * 2),
    "sft-round1": [
        [
            row("p1", True, [("expert", 0.5)]),
            row("p2", True, [("expert", 0.5)]),
            row("p3", True),
            row("p4", False),
        ]
    ]
    * 2,
    "base-always-expert": [[row(problem, True, [("expert", 1.0)]) for problem in ("p1", "p2", "p3", "p4")]] * 2,
}


def compared(folder, seeds: dict, cost_references=()) -> tuple[dict, str]:
    """(eval/summary.json, eval/summary.txt) of the eval comparison of ``seeds`` ({model: seed records})."""
    runs, metrics_paths, problem_paths = [], [], []
    for model, model_seeds in seeds.items():
        summarized(folder / model, model_seeds)
        runs.append((model, "sums"))
        metrics_paths.append(folder / model / "metrics.json")
        problem_paths.append(folder / model / "problems.jsonl")
    text = write_comparison(
        runs=runs,
        metrics_paths=metrics_paths,
        problem_paths=problem_paths,
        base_model="base",
        teacher=None,
        summary_path=folder / "summary.json",
        table_path=folder / "summary.txt",
        flips_path=folder / "flips.tsv",
        cost_references=cost_references,
    )
    return json.loads((folder / "summary.json").read_text()), text


def test_the_eval_pairs_each_models_accuracy_and_price_with_the_references_and_tables_them(tmp_path):
    summary, text = compared(tmp_path / "priced", EVAL_SEEDS, ["base", "base-always-expert"])
    entries = {model: summary[model]["sums/accuracy_cost"] for model in EVAL_SEEDS}
    assert {model: (entry["accuracy"], entry["cost_per_problem"]) for model, entry in entries.items()} == {
        "base": (25.0, 0.0),
        "sft-round1": (75.0, 0.25),
        "base-always-expert": (100.0, 1.0),
    }
    assert list(entries["base"]["vs"]) == ["base-always-expert"]
    assert list(entries["sft-round1"]["vs"]) == ["base", "base-always-expert"]
    versus = entries["sft-round1"]["vs"]["base-always-expert"]
    assert versus["accuracy"]["gain"] == -25.0 and versus["accuracy"]["ci_high"] <= 0
    assert (versus["cost"]["reference_cost"], versus["cost"]["model_cost"], versus["cost"]["difference"]) == (
        1.0,
        0.25,
        -0.75,
    )
    assert versus["cost"]["ci_high"] < 0
    assert entries["sft-round1"]["vs"]["base"]["cost"]["difference"] == 0.25
    # the table: one row per model, a column per reference (blank in its own row), the frontier
    table = accuracy_cost_table(summary)
    assert table.startswith(TABLE_TITLE) and "\n" + table in text
    lines = table.splitlines()
    header = lines.index(next(line for line in lines if line.startswith("model")))
    cells = [[cell.strip() for cell in line.split("|")] for line in lines[header:]]
    assert cells[0] == ["model", "benchmark", "pass@1", "price/problem", "vs base", "vs base-always-expert"]
    assert cells[2][:5] == ["base", "sums", "25.00%", "0.00", ""]
    assert cells[3][:4] == ["sft-round1", "sums", "75.00%", "0.250"]
    assert cells[3][4].startswith("+50.00 [") and "] points, price +0.250 [" in cells[3][4]
    assert cells[4][5] == ""
    assert (
        "frontier on sums (price -> accuracy): base 0.00 -> 25.0%, sft-round1 0.250 -> 75.0%, "
        "base-always-expert 1.00 -> 100.0%" in lines
    )
    assert (
        "price by tool, sft-round1 on sums: expert 0.250 per sample (0.50 calls per sample, 50.0% of samples call it)"
        in lines
    )
    # no named-metric tables of the blocks
    assert "sums/cost" not in text and "sums/accuracy_cost" not in text


def test_without_prices_nothing_of_them_appears_in_the_eval(tmp_path):
    priced, text = compared(tmp_path / "priced", EVAL_SEEDS, ["base", "base-always-expert"])
    free = {model: plain(seeds) for model, seeds in EVAL_SEEDS.items()}
    summary, plain_text = compared(tmp_path / "plain", free, ["base", "base-always-expert"])
    assert text.replace("\n" + accuracy_cost_table(priced), "", 1) == plain_text
    assert summary == {
        model: {key: value for key, value in entries.items() if key not in ("sums/cost", "sums/accuracy_cost")}
        for model, entries in priced.items()
    }
    assert "accuracy against cost" not in plain_text and accuracy_cost_table(summary) == ""
    # the default run: no references, no prices
    assert compared(tmp_path / "default", free)[1] == plain_text
    # prices without references: the table, without reference columns
    unpaired = accuracy_cost_table(compared(tmp_path / "unpaired", EVAL_SEEDS)[0])
    assert "vs " not in unpaired and "frontier on sums" in unpaired


def test_a_reference_without_an_eval_run_stops_the_comparison(tmp_path):
    with pytest.raises(SnakeskillsError, match="reference model 'expert' has no eval run on benchmark 'sums'"):
        compared(tmp_path, EVAL_SEEDS, ["base", "expert"])


def test_the_plot_has_a_point_per_model_and_says_when_no_sample_had_a_price(tmp_path):
    summary, _ = compared(tmp_path / "priced", EVAL_SEEDS, ["base", "base-always-expert"])
    assert accuracy_cost_points(summary) == {
        "sums": [("base", 0.0, 25.0), ("sft-round1", 0.25, 75.0), ("base-always-expert", 1.0, 100.0)]
    }
    assert cost_blocks(summary["sft-round1"])["sums"]["total_cost"] == 2.0
    plot_accuracy_cost(summary, tmp_path / "accuracy_cost.png")
    assert (tmp_path / "accuracy_cost.png").read_bytes().startswith(b"\x89PNG")
    free = {model: {"sums": entries["sums"]} for model, entries in summary.items()}
    assert accuracy_cost_points(free) == {}
    plot_accuracy_cost(free, tmp_path / "none.png")
    assert (tmp_path / "none.png").read_bytes().startswith(b"\x89PNG")
