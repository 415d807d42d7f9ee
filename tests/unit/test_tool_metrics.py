"""Tool use in the summaries (snakeskills.results.tool_metrics): a benchmark's block from judged records whose numbers
are worked out by hand below, its place in metrics.json and metrics.txt (and nothing of it where the records have no
tool fields), the eval comparison's table of each model's tool use, and the report's plot of it."""

from __future__ import annotations

import json

import pytest

from snakeskills.errors import SnakeskillsError
from snakeskills.io import write_jsonl
from snakeskills.results.comparison import format_comparison
from snakeskills.results.report import plot_tool_use, tool_use_points
from snakeskills.results.summarize import write_benchmark_summary
from snakeskills.results.tool_metrics import TABLE_TITLE, format_tool_metrics, tool_metrics, tool_use_table

TOOL_FIELDS = (
    "code_rounds_executed",
    "tool_errors",
    "num_code_timeouts",
    "code_execution_time",
    "tool_call_over_limit",
)


def row(problem, correct, calls, errors=0, timeouts=0, seconds=0.0, over_limit=False) -> dict:
    """A judged record of a run with tools: the verdict and the tool loop's fields."""
    return {
        "id": problem,
        "predicted_answer": "1" if correct else "2",
        "symbolic_correct": correct,
        "num_generated_tokens": 10,
        "code_rounds_executed": calls,
        "tool_errors": errors,
        "num_code_timeouts": timeouts,
        "code_execution_time": seconds,
        "tool_call_over_limit": over_limit,
        "tool_output_spans": [[0, 1]] * calls,
    }


# two seeds of four problems, 8 samples; by hand:
#   calls 2+0+1+3 + 0+2+0+2 = 10 -> 1.25 per sample
#   calling: s0p1 s0p3 s0p4 s1p2 s1p4 = 5 of 8 -> 62.5%; correct among them T F T F T -> 3 of 5 = 60%
#   without a call: s0p2 F, s1p1 T, s1p3 T -> 2 of 3 = 66.67%
#   errors 1 + 1 = 2 of 10 calls -> 20%; timeouts 1 + 1 = 2 -> 20%
#   seconds 0.5 + 10 + 1.5 + 0.25 + 10.75 = 23 -> 2.875 per sample; over the call limit: s0p4 -> 1
SEEDS = [
    [
        row("p1", True, 2, errors=1, seconds=0.5),
        row("p2", False, 0),
        row("p3", False, 1, timeouts=1, seconds=10.0),
        row("p4", True, 3, seconds=1.5, over_limit=True),
    ],
    [
        row("p1", True, 0),
        row("p2", False, 2, errors=1, seconds=0.25),
        row("p3", True, 0),
        row("p4", True, 2, timeouts=1, seconds=10.75),
    ],
]
BLOCK = {
    "samples": 8,
    "tool_calls": 10,
    "calls_per_sample": 1.25,
    "share_calling": 62.5,
    "accuracy_with_call": 60.0,
    "accuracy_without_call": pytest.approx(200 / 3),
    "tool_errors": 2,
    "error_share": 20.0,
    "timeouts": 2,
    "timeout_share": 20.0,
    "seconds_per_sample": 2.875,
    "samples_over_limit": 1,
}
LINES = (
    "tool use: 1.25 calls per sample (10 calls), 62.5% of 8 samples call a tool; symbolic_correct with a call 60.0%, "
    "without 66.7%\ntool calls failed: 2 (20.0%), timed out: 2 (20.0%); tool seconds per sample: 2.875; samples "
    "stopped at the call limit: 1\n"
)


def test_the_block_counts_calls_shares_accuracies_errors_timeouts_seconds_and_the_limit():
    block = tool_metrics([record for seed in SEEDS for record in seed])
    assert block == BLOCK and list(block) == list(BLOCK)
    assert format_tool_metrics(block) == LINES


def test_no_block_without_the_call_count_and_nulls_where_nothing_was_counted():
    plain = [{key: value for key, value in record.items() if key not in TOOL_FIELDS} for record in SEEDS[0]]
    assert tool_metrics(plain) is None and tool_metrics([]) is None
    assert tool_metrics([{**record, "code_rounds_executed": None} for record in SEEDS[0]]) is None
    # no sample calls: no accuracy with a call, no share of calls
    silent = tool_metrics([row("p1", True, 0), row("p2", False, 0)])
    assert silent["share_calling"] == 0.0 and silent["accuracy_with_call"] is None
    assert silent["accuracy_without_call"] == 50.0
    assert (silent["tool_errors"], silent["error_share"], silent["timeouts"], silent["timeout_share"]) == (
        0,
        None,
        0,
        None,
    )
    # every sample calls: no accuracy without a call
    assert tool_metrics([row("p1", True, 1), row("p2", False, 4)])["accuracy_without_call"] is None
    # NeMo-Skills' records count calls, timeouts and seconds but no errors nor the limit; a row without the fields
    # (among rows with them) made no call
    nemo = [{"symbolic_correct": True, "code_rounds_executed": 3, "num_code_timeouts": 1, "code_execution_time": 2.0}]
    block = tool_metrics([*nemo, {"symbolic_correct": False}])
    assert (block["samples"], block["calls_per_sample"], block["share_calling"]) == (2, 1.5, 50.0)
    assert (block["accuracy_with_call"], block["accuracy_without_call"]) == (100.0, 0.0)
    assert (block["timeouts"], block["timeout_share"], block["seconds_per_sample"]) == (1, pytest.approx(100 / 3), 1.0)
    assert (block["tool_errors"], block["error_share"], block["samples_over_limit"]) == (None, None, None)
    assert "tool calls failed: -, timed out: 1 (33.3%)" in format_tool_metrics(block)
    assert "samples stopped at the call limit: -" in format_tool_metrics(block)


def summarized(tmp_path, seeds, specs=None) -> tuple[dict, str]:
    """(metrics.json, metrics.txt) of summarizing ``seeds`` (one list of records per seed file) as benchmark sums."""
    paths = []
    for index, records in enumerate(seeds):
        paths.append(tmp_path / f"output-rs{index}.jsonl")
        write_jsonl(paths[-1], records)
    table = write_benchmark_summary(
        "sums",
        paths,
        specs or {},
        metrics_path=tmp_path / "metrics.json",
        table_path=tmp_path / "metrics.txt",
        problems_path=tmp_path / "problems.jsonl",
    )
    assert (tmp_path / "metrics.txt").read_text() == table
    return json.loads((tmp_path / "metrics.json").read_text()), table


def test_summarize_adds_the_block_over_every_seed_and_nothing_else(tmp_path):
    metrics, table = summarized(tmp_path / "tools", SEEDS)
    assert list(metrics) == ["sums", "sums/tools"]
    assert metrics["sums/tools"] == BLOCK
    assert table.endswith(LINES)
    # the same records without the tool fields (a run without tools): the same metrics.json less the block, the same
    # metrics.txt less its lines
    plain = [
        [{key: value for key, value in record.items() if key not in TOOL_FIELDS} for record in seed] for seed in SEEDS
    ]
    plain_metrics, plain_table = summarized(tmp_path / "plain", plain)
    assert list(plain_metrics) == ["sums"] and plain_metrics["sums"] == metrics["sums"]
    assert plain_table + LINES == table
    # a value polars will not read as its type (a count written 2.0): Python reads the file, to the same block
    seeds = [[{**SEEDS[0][0], "code_rounds_executed": 2.0}, *SEEDS[0][1:]], SEEDS[1]]
    assert summarized(tmp_path / "python", seeds)[0]["sums/tools"] == BLOCK


def test_a_metric_named_tools_stops_summarize_only_where_the_records_used_tools(tmp_path):
    specs = {"tools": {"function": "pass_hat_k", "options": {}, "key": "metrics.tools"}}
    with pytest.raises(
        SnakeskillsError, match=r"config key metrics\.tools .*summarize writes tool use under that name"
    ):
        summarized(tmp_path / "tools", SEEDS, specs)
    plain = [
        [{key: value for key, value in record.items() if key not in TOOL_FIELDS} for record in seed] for seed in SEEDS
    ]
    assert summarized(tmp_path / "plain", plain, specs)[0]["sums/tools"] == {"pass^1": 62.5, "pass^2": 50.0}


def modes(score: float) -> dict:
    return {
        mode: {"num_entries": 4, "symbolic_correct": score} for mode in ("pass@1[avg-of-2]", "majority@2", "pass@2")
    }


# sft-round1 never calls its tool: a share of 0 and no accuracy with a call
SILENT = tool_metrics([row("p1", True, 0), row("p2", False, 0)])
SUMMARY = {
    "base": {"sums": modes(62.5), "sums/tools": tool_metrics([record for seed in SEEDS for record in seed])},
    "sft-round1": {"sums": modes(50.0), "sums/tools": SILENT},
}


def test_the_comparison_tables_each_models_tool_use_and_only_adds_that_table():
    text = format_comparison(SUMMARY, "base")
    table = tool_use_table(SUMMARY)
    assert table.startswith(TABLE_TITLE + "\n")
    cells = [[cell.strip() for cell in line.split("|")] for line in table.removeprefix(TABLE_TITLE).splitlines()[1:]]
    assert cells[0] == [
        "model",
        "benchmark",
        "calls/sample",
        "calling",
        "correct with call",
        "correct without call",
        "failed calls",
        "timeouts",
        "tool s/sample",
        "over limit",
    ]
    assert cells[2] == ["base", "sums", "1.25", "62.5%", "60.0%", "66.7%", "2 (20.0%)", "2 (20.0%)", "2.875", "1"]
    assert cells[3] == ["sft-round1", "sums", "0.00", "0.0%", "-", "50.0%", "0", "0", "0.000", "0"]
    # the comparison without the blocks is the comparison with them less this table (not a named metric's table)
    plain = {model: {"sums": entries["sums"]} for model, entries in SUMMARY.items()}
    assert tool_use_table(plain) == "" and "tool use" not in format_comparison(plain, "base")
    assert text.replace("\n" + tool_use_table(SUMMARY), "", 1) == format_comparison(plain, "base")
    # a user's metric named tools, in a run without tools, is a named metric as before
    named = {model: {**entries, "sums/tools": {"ids": [model]}} for model, entries in plain.items()}
    assert tool_use_table(named) == "" and "sums/tools" in format_comparison(named, "base")


def test_the_plot_has_a_group_per_model_and_says_when_no_model_used_tools(tmp_path):
    assert tool_use_points(SUMMARY) == {"sums": [("base", SUMMARY["base"]["sums/tools"]), ("sft-round1", SILENT)]}
    plot_tool_use(SUMMARY, tmp_path / "tool_use.png")
    assert (tmp_path / "tool_use.png").read_bytes().startswith(b"\x89PNG")
    plain = {model: {"sums": entries["sums"]} for model, entries in SUMMARY.items()}
    assert tool_use_points(plain) == {}
    plot_tool_use(plain, tmp_path / "none.png")
    assert (tmp_path / "none.png").read_bytes().startswith(b"\x89PNG")


def test_the_eval_summary_carries_each_models_block_from_its_metrics_json_and_tables_them(tmp_path):
    from snakeskills.results.comparison import write_comparison

    # the base model's samples are SEEDS; sft-round1's call on every problem and are all right
    tuned = [[row(record["id"], True, 1, seconds=0.5) for record in seed] for seed in SEEDS]
    runs, metrics_paths, problem_paths = [], [], []
    for model, seeds in (("base", SEEDS), ("sft-round1", tuned)):
        summarized(tmp_path / model, seeds)
        runs.append((model, "sums"))
        metrics_paths.append(tmp_path / model / "metrics.json")
        problem_paths.append(tmp_path / model / "problems.jsonl")
    text = write_comparison(
        runs=runs,
        metrics_paths=metrics_paths,
        problem_paths=problem_paths,
        base_model="base",
        teacher=None,
        summary_path=tmp_path / "summary.json",
        table_path=tmp_path / "summary.txt",
        flips_path=tmp_path / "flips.tsv",
    )
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["base"]["sums/tools"] == BLOCK
    assert summary["sft-round1"]["sums/tools"]["calls_per_sample"] == 1.0
    assert summary["sft-round1"]["sums/tools"]["accuracy_with_call"] == 100.0
    lines = text.split(TABLE_TITLE + "\n", 1)[1].splitlines()
    assert [line.split("|")[0].strip() for line in lines[2:4]] == ["base", "sft-round1"]
    assert [cell.strip() for cell in lines[3].split("|")][2:6] == ["1.00", "100.0%", "100.0%", "-"]
