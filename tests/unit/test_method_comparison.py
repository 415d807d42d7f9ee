"""Training methods side by side (snakeskills.results.method_comparison): the cost table's records columns count
what the trainer drew, not what the round's data held (issue 65, item 16)."""

from __future__ import annotations

from snakeskills.io import write_json
from snakeskills.results.method_comparison import format_costs, records_trained, training_cost


def tuned_round(tmp_path, model: str, stats: dict, log_history: list[dict]):
    folder = tmp_path / "models" / model
    write_json(folder / "training_metrics.json", {"global_step": 11, "train_runtime": 1.0, "log_history": log_history})
    write_json(tmp_path / model / "stats.json", stats)
    return folder, tmp_path / model / "stats.json"


def test_a_fraction_of_an_epoch_counts_the_examples_it_drew(tmp_path):
    """The round of the issue: 266 SFT examples, num_epochs 0.3 in batches of 8: TRL took 11 steps, 88 examples,
    and logged epoch 11/34; the table said sft_examples 266."""
    history = [{"loss": 2.1, "epoch": 0.09, "step": 3}, {"train_runtime": 1.0, "epoch": 11 / 34, "step": 11}]
    stats = {"kept": 266, "problems_covered": 120, "judged": 600}
    cost = training_cost("sft", 1, *tuned_round(tmp_path, "sft-round1", stats, history))
    assert cost["sft_examples"] == 86  # 88 drawn: to within a batch (a pass's last batch held 2)
    assert cost["train_problems"] == 120  # the data's, as before
    table = format_costs({"sft-round1": cost})
    assert (
        "sft_examples: judged-correct answers SFT trained on, each with its prompt; the distinct ones the trainer "
        in (table)
    )
    assert "(num_epochs below 1, or max_steps ending it first) that fraction of them" in table


def test_whole_passes_count_every_record_once_and_every_method_counts_so():
    assert records_trained({"log_history": [{"epoch": 2.5}]}, 266) == 266
    assert records_trained({"log_history": [{"epoch": 1.0}]}, 266) == 266
    assert records_trained({"log_history": [{"epoch": 0.5}, {"loss": 1.0}]}, 212) == 106
    assert records_trained({"log_history": []}, 212) == 212  # a trainer that logged no epoch: its data


def test_dpo_and_kto_rounds_count_the_pairs_and_samples_they_drew(tmp_path):
    history = [{"epoch": 0.25, "step": 7}]
    pairs = {"pass_rate": {"min": 0.0, "max": 1.0}, "problems": 150, "problems_in_pass_rate": 150}
    dpo = training_cost(
        "dpo", 1, *tuned_round(tmp_path, "dpo-round1", {**pairs, "problems_paired": 74, "pairs": 212}, history)
    )
    kto = training_cost(
        "kto", 1, *tuned_round(tmp_path, "kto-round1", {**pairs, "problems_kept": 90, "samples": 400}, history)
    )
    assert (dpo["dpo_pairs"], kto["kto_samples"]) == (53, 100)
