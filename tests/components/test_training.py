"""The SFT trainer's options (TRL's SFTTrainer under sft_trainer): packing keeps examples apart, gradient
accumulation keeps training.batch_size the examples per optimizer step, bf16 follows the device. On the tiny
model (char tokenizer, Llama architecture, sdpa attention)."""

from __future__ import annotations

import re

import pytest
import torch
from conftest import resolved_prompt, sft_training_rows

from snakeskills.models.tiny_model import build_char_tokenizer


@pytest.fixture(scope="module")
def examples():
    tokenizer = build_char_tokenizer()
    return [
        {"prompt_ids": tokenizer(f"{i}+{3 * i}=")["input_ids"], "completion": f"\\boxed{{{4 * i}}}"} for i in range(8)
    ]


def test_packed_rows_give_each_example_the_loss_it_has_alone(tiny_checkpoint, examples, tmp_path):
    rows, plain = sft_training_rows(tiny_checkpoint, examples, tmp_path / "plain", max_length=64, batch_size=8)
    packed_rows, packed = sft_training_rows(
        tiny_checkpoint, examples, tmp_path / "packed", max_length=64, batch_size=8, packing=True
    )
    assert len(rows) == 8 and len(packed_rows) < 8, "several examples share a packed row"
    model = plain.model.eval()
    batch = packed.data_collator(packed_rows)
    with torch.no_grad():
        alone = model(**plain.data_collator(rows)).loss
        together = model(input_ids=batch["input_ids"], labels=batch["labels"], position_ids=batch["position_ids"]).loss
        # without the position ids that restart at each example, later examples would attend to earlier ones
        leaking = model(input_ids=batch["input_ids"], labels=batch["labels"]).loss
    torch.testing.assert_close(together, alone, rtol=1e-5, atol=1e-6)
    assert abs(leaking.item() - alone.item()) > 1e-3


def test_accumulation_keeps_batch_size_the_examples_per_optimizer_step(tiny_checkpoint, examples, tmp_path):
    _, trainer = sft_training_rows(
        tiny_checkpoint, examples, tmp_path, max_length=32, batch_size=8, gradient_accumulation_steps=4
    )
    assert trainer.args.per_device_train_batch_size == 2 and trainer.args.gradient_accumulation_steps == 4
    assert not trainer.args.bf16, "bf16 auto is off on a CPU"
    with pytest.raises(ValueError, match="batch_size 8 is not a multiple of 1 process"):
        sft_training_rows(
            tiny_checkpoint, examples, tmp_path, max_length=32, batch_size=8, gradient_accumulation_steps=3
        )


def test_training_log_has_steps_loss_rate_and_total_time(tiny_checkpoint, examples, tmp_path, caplog):
    """The job's log (logging, where script_logging sends it), not the console, gets TRL's loss lines."""
    _, trainer = sft_training_rows(tiny_checkpoint, examples, tmp_path, max_length=32, batch_size=1)
    trainer.args.logging_steps = 4
    with caplog.at_level("INFO", logger="snakeskills.training.trainer"):
        trainer.train()
    lines = [record.getMessage() for record in caplog.records if record.name == "snakeskills.training.trainer"]
    steps = [line for line in lines if line.startswith("step ")]
    # the first step's line gives an ETA early (a long run's step can take minutes), then every logging step
    assert [line.split(",")[0] for line in steps] == ["step 1/8", "step 4/8", "step 8/8"], lines
    pattern = r"^step 1/8, loss \d+\.\d{4}, learning rate [\d.e-]+, [\d.]+ examples/s, elapsed \d+s, ETA \d+s$"
    assert re.match(pattern, steps[0]), steps[0]
    assert lines[-1].startswith("training done: 8 steps in "), lines


def test_a_bootstrap_below_its_target_says_so_in_its_log_and_the_comparison(tmp_path, caplog):
    """A real bootstrap far too short to reach its target (2 steps, 100 % asked): one warning line in the job's log
    names what it reached, what tiny_model.stop_at_accuracy asked and what to change, and the eval comparison ends
    with the same line; a bootstrap that reached its target adds nothing."""
    from conftest import default_section

    from snakeskills.data.synthetic import arithmetic_splits
    from snakeskills.io import read_json, write_json, write_jsonl
    from snakeskills.results.comparison import write_comparison
    from snakeskills.training.tiny_bootstrap import BOOTSTRAP_METRICS_FILE, build_and_bootstrap

    splits = arithmetic_splits(
        operations=["+"], max_operand=99, split_sizes={"bootstrap": 64, "validation": 20}, seed=0
    )
    tiny = default_section("tiny_model")
    with caplog.at_level("INFO", logger="snakeskills.training.tiny_bootstrap"):
        metrics = build_and_bootstrap(
            bootstrap_records=splits["bootstrap"],
            validation_records=splits["validation"],
            prompt_config=resolved_prompt(user="{problem}="),
            completion_template=tiny["completion"],
            output_dir=tmp_path / "base",
            architecture={**tiny["architecture"], "hidden_size": 32},
            training={**tiny["training"], "num_epochs": 1, "warmup_steps": 0},
            stop_at_accuracy=1.0,
            check_every_steps=1,
            seed=0,
            threads=1,
        )
    assert not metrics["reached_target"] and metrics["global_step"] == 2
    warnings = [record.getMessage() for record in caplog.records if record.levelname == "WARNING"]
    assert len(warnings) == 1 and re.fullmatch(
        r"warning: the tiny model's bootstrap missed its target: greedy validation accuracy 0\.\d{3} after all 2 "
        r"steps \(64 bootstrap problems\), tiny_model\.stop_at_accuracy asks 1; .* lower tiny_model\.stop_at_accuracy",
        warnings[0],
    ), warnings
    assert read_json(tmp_path / "base" / BOOTSTRAP_METRICS_FILE)["reached_target"] is False

    mode = {"num_entries": 20, "symbolic_correct": 10.0}
    metrics_paths, problem_paths = [], []
    for model in ("base", "sft-round1"):
        metrics_paths.append(tmp_path / f"{model}.json")
        write_json(metrics_paths[-1], {"add": {"pass@1[avg-of-2]": mode, "majority@2": mode, "pass@2": mode}})
        problem_paths.append(tmp_path / f"{model}-problems.jsonl")
        write_jsonl(problem_paths[-1], [{"id": str(i), "samples": 2, "symbolic_correct": i % 2} for i in range(20)])
    comparison = {
        "runs": [("base", "add"), ("sft-round1", "add")],
        "metrics_paths": metrics_paths,
        "problem_paths": problem_paths,
        "flips_path": tmp_path / "flips.tsv",
        "base_model": "base",
        "teacher": None,
        "summary_path": tmp_path / "summary.json",
        "table_path": tmp_path / "summary.txt",
    }
    table = write_comparison(**comparison, built_models=[tmp_path / "base"])
    assert table.rstrip().splitlines()[-2:] == [
        "warnings (1):",
        f"  {warnings[0].removeprefix('warning: ')} ({tmp_path / 'base'})",
    ]
    reached = tmp_path / "reached"
    reached.mkdir()
    write_json(reached / BOOTSTRAP_METRICS_FILE, {**metrics, "reached_target": True})
    assert "missed" not in write_comparison(**comparison, built_models=[reached])
