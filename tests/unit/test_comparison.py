"""The eval comparison's table (snakeskills.results.comparison)."""

from __future__ import annotations

import pytest


def test_comparison_table_shows_the_llm_judge_beside_the_symbolic_verdict():
    from snakeskills.results.comparison import format_comparison

    def metrics(symbolic, llm=None):
        mode = {"num_entries": 10, "symbolic_correct": symbolic}
        if llm is not None:
            mode["judge_correct"] = llm
        return {name: dict(mode) for name in ("pass@1[avg-of-2]", "majority@2", "pass@2")}

    plain = format_comparison({"base": {"sums": metrics(10.0)}, "sft-round1": {"sums": metrics(40.0)}}, "base")
    assert "judge" not in plain.splitlines()[1]
    table = format_comparison(
        {"base": {"sums": metrics(10.0, 20.0)}, "sft-round1": {"sums": metrics(40.0, 55.0)}}, "base"
    ).splitlines()
    assert [cell.strip() for cell in table[1].split("|")] == [
        "model",
        "benchmark",
        "num_entries",
        "pass@1[avg-of-2]",
        "majority@2",
        "pass@2",
        "pass@1[avg-of-2] judge",
    ]
    assert [cell.strip() for cell in table[4].split("|")] == [
        "sft-round1",
        "sums",
        "10",
        "40.00%",
        "40.00%",
        "40.00%",
        "55.00%",
    ]
    assert (
        "LLM judge" in table[0]
        and "sft-round1 vs base on sums: pass@1[avg-of-2] symbolic_correct +30.00 points" in table
    )


# ---------------------------------------------------------------- the training cost table


def tuned_round(tmp_path, model: str, stats: dict, metrics: dict):
    """A tuned round's folder with the trainer's training_metrics.json, and its data rule's stats.json."""
    from snakeskills.io import write_json

    folder = tmp_path / "models" / model
    write_json(folder / "training_metrics.json", {"train_runtime": 12.34, "log_history": [], **metrics})
    write_json(tmp_path / model / "stats.json", stats)
    return folder, tmp_path / model / "stats.json"


def issue_53_costs(tmp_path) -> dict:
    """The rounds of issue 53: DPO's pairs cover 74 of the 150 train problems its pass-rate filter kept (all of
    them); GRPO trained on the 106 problems in grpo.pass_rate, stopped after 2 steps (16 completions) by the
    user's grpo.training.max_steps 2; SFT on 300 examples of 120 problems, its token count logged."""
    from snakeskills.results.method_comparison import training_cost

    pass_rate = {"pass_rate": {"min": 0.0, "max": 1.0}, "problems": 150}
    rounds = {
        "sft-round1": ("sft", {"kept": 300, "problems_covered": 120, "judged": 600}, {"global_step": 38}),
        "dpo-round1": (
            "dpo",
            {**pass_rate, "problems_in_pass_rate": 150, "problems_paired": 74, "pairs": 212},
            {"global_step": 27, "num_examples": 212},
        ),
        "grpo-round1": (
            "grpo",
            {**pass_rate, "pass_rate": {"min": 0.1, "max": 0.9}, "problems_in_pass_rate": 106},
            {"global_step": 2, "num_examples": 106, "completions_sampled": 16},
        ),
    }
    costs = {}
    for model, (method, stats, metrics) in rounds.items():
        if method == "sft":
            metrics = {
                **metrics,
                "log_history": [{"num_tokens": 5000.0, "step": 20}, {"num_tokens": 9120.0, "step": 38}],
            }
        folder, stats_path = tuned_round(tmp_path, model, stats, metrics)
        costs[model] = training_cost(method, 1, folder, stats_path)
    return costs


def test_the_cost_columns_say_their_unit_mean_the_same_in_every_row_and_are_explained_once(tmp_path):
    """Issue 53: GRPO's row said 106 examples beside 16 completions; in_pass_rate read 150/150 while the pairs
    covered 74 problems."""
    from snakeskills.results.method_comparison import format_costs

    costs = issue_53_costs(tmp_path)
    lines = format_costs(costs).splitlines()
    assert lines[1].startswith("training cost by model (a blank cell: the column does not apply")
    table = [[cell.strip() for cell in line.split("|")] for line in lines[2:7] if not line.startswith("-")]
    header, rows = table[0], {row[0]: dict(zip(table[0], row, strict=True)) for row in table[1:]}
    assert header == [
        "model",
        "method",
        "round",
        "problems_kept_by_pass_rate",
        "train_problems",
        "sft_examples",
        "dpo_pairs",
        "completions_sampled",
        "train_tokens",
        "optimizer_steps",
        "wall_seconds",
    ]
    units = ("problems", "examples", "pairs", "samples", "completions", "tokens", "steps", "seconds")
    assert all(any(unit in column for unit in units) for column in header[3:]), "each column names its unit"
    dpo, grpo, sft = rows["dpo-round1"], rows["grpo-round1"], rows["sft-round1"]
    assert (dpo["problems_kept_by_pass_rate"], dpo["train_problems"], dpo["dpo_pairs"]) == ("150/150", "74", "212")
    assert (grpo["problems_kept_by_pass_rate"], grpo["train_problems"]) == ("106/150", "106")
    assert (grpo["completions_sampled"], grpo["optimizer_steps"], grpo["wall_seconds"]) == ("16", "2", "12.3")
    assert (sft["train_problems"], sft["sft_examples"], sft["train_tokens"]) == ("120", "300", "9120")
    # a column that does not apply to a method, or that its trainer did not record, is blank, not 0
    assert grpo["sft_examples"] == grpo["dpo_pairs"] == sft["dpo_pairs"] == sft["problems_kept_by_pass_rate"] == ""
    assert dpo["completions_sampled"] == sft["completions_sampled"] == "" and grpo["train_tokens"] == ""
    notes = lines[7:]
    for column in header[3:]:
        assert sum(note.startswith(f"  {column}: ") for note in notes) == 1, column
    assert len(notes) == len(header) - 3
    assert "kept/all" in next(note for note in notes if note.startswith("  problems_kept_by_pass_rate: "))


def test_the_summary_keeps_the_costs_under_the_columns_names_and_warns_on_the_key_that_capped_the_steps(tmp_path):
    from snakeskills.io import read_json, write_json, write_jsonl
    from snakeskills.plan.config import default_config
    from snakeskills.results.comparison import write_comparison

    costs = issue_53_costs(tmp_path)
    mode = {"num_entries": 20, "symbolic_correct": 10.0}
    runs, metrics_paths, problem_paths = [], [], []
    for model in ("base", *costs):
        runs.append((model, "add"))
        metrics_paths.append(tmp_path / f"{model}.json")
        write_json(metrics_paths[-1], {"add": {"pass@1[avg-of-2]": mode, "majority@2": mode, "pass@2": mode}})
        problem_paths.append(tmp_path / f"{model}-problems.jsonl")
        write_jsonl(problem_paths[-1], [{"id": str(i), "samples": 2, "symbolic_correct": i % 2} for i in range(20)])
    training = {"num_epochs": 1, "batch_size": 8}
    sections = {
        "sft": {"training": training},
        "dpo": {"training": training},
        "grpo": {"num_generations": 4, "training": {**training, "max_steps": 2}},
    }
    table = write_comparison(
        runs=runs,
        metrics_paths=metrics_paths,
        problem_paths=problem_paths,
        base_model="base",
        teacher=None,
        summary_path=tmp_path / "summary.json",
        table_path=tmp_path / "summary.txt",
        flips_path=tmp_path / "flips.tsv",
        sections=sections,
        thresholds=default_config()["warnings"],
        training_costs=costs,
    )
    summary = read_json(tmp_path / "summary.json")
    assert summary["grpo-round1"]["training/cost"] == {
        "method": "grpo",
        "round": 1,
        "problems_kept_by_pass_rate": "106/150",
        "train_problems": 106,
        "completions_sampled": 16,
        "train_tokens": None,
        "optimizer_steps": 2,
        "wall_seconds": 12.3,
    }
    assert summary["dpo-round1"]["training/cost"]["dpo_pairs"] == 212
    assert summary["dpo-round1"]["training/cost"]["train_problems"] == 74
    warnings = table.split("\nwarnings (", 1)[1]
    assert (
        "grpo-round1 trains on 106 problems in 2 optimizer steps: too few optimizer steps "
        "(warnings.min_optimizer_steps 10): grpo.training.max_steps 2 ended the training (num_epochs 1 over the 106 "
        "problems would make 53): raise it to 10, or set it to null" in warnings
    )
    assert "dpo-round1 trains on 212 DPO pairs of 74 problems in 27 optimizer steps" not in warnings, "enough"


def test_a_resumed_runs_tokens_are_blank_not_the_count_since_the_resume():
    from snakeskills.results.method_comparison import trained_tokens

    history = {"log_history": [{"num_tokens": 100.0}, {"loss": 1.0}, {"num_tokens": 250.0}]}
    assert trained_tokens(history) == 250
    assert trained_tokens({**history, "resumed_from_checkpoint": "checkpoint-20"}) is None
    assert trained_tokens({"log_history": [{"loss": 1.0}]}) is None
    # TRL's GRPO keeps its count in the trainer state: a resumed run's count is the whole run's
    assert trained_tokens({**history, "training_method": "grpo", "resumed_from_checkpoint": "checkpoint-20"}) == 250


# a round in two segments of 2 steps (the second resumed the first's state at step 2), as each segment's trainer logs
# them: SFT's count starts again at the resume, GRPO's goes on from the state
SEGMENTS = {
    "sft": [
        {"log_history": [{"step": 1, "num_tokens": 10}, {"step": 2, "num_tokens": 30}]},
        {
            "resumed_from_checkpoint": "models/sft-round1-step2/trainer-state",
            "segment": {"resumed_state": "models/sft-round1-step2/trainer-state"},
            "log_history": [
                *[{"step": 1, "num_tokens": 10}, {"step": 2, "num_tokens": 30}],
                *[{"step": 3, "num_tokens": 15}, {"step": 4, "num_tokens": 40}],
            ],
        },
    ],
    "grpo": [
        {"log_history": [{"step": 1, "num_tokens": 10}, {"step": 2, "num_tokens": 30}]},
        {
            "resumed_from_checkpoint": "models/grpo-round1-step2/trainer-state",
            "segment": {"resumed_state": "models/grpo-round1-step2/trainer-state"},
            "log_history": [
                *[{"step": 1, "num_tokens": 10}, {"step": 2, "num_tokens": 30}],
                *[{"step": 3, "num_tokens": 45}, {"step": 4, "num_tokens": 70}],
            ],
        },
    ],
}


@pytest.mark.parametrize("method", ["sft", "grpo"])
def test_a_segments_tokens_are_its_own_whichever_way_its_trainer_counts(method):
    from snakeskills.results.method_comparison import segment_tokens

    first, second = ({**segment, "training_method": method} for segment in SEGMENTS[method])
    assert [segment_tokens(first, 0), segment_tokens(second, 2)] == [30, 40]
    killed = {**second, "resumed_from_checkpoint": "checkpoints/checkpoint-3"}  # a rerun after a kill inside it
    assert segment_tokens(killed, 2) == (40 if method == "grpo" else None)
