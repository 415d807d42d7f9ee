"""The SFT trainer's options (TRL's SFTTrainer under sft_trainer): packing keeps examples apart, gradient
accumulation keeps training.batch_size the examples per optimizer step, bf16 follows the device. On the tiny
model (char tokenizer, Llama architecture, sdpa attention)."""

from __future__ import annotations

import pytest
import torch
from conftest import sft_training_rows

from snakeskills.tiny_model import build_char_tokenizer


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
    import re

    _, trainer = sft_training_rows(tiny_checkpoint, examples, tmp_path, max_length=32, batch_size=1)
    trainer.args.logging_steps = 4
    with caplog.at_level("INFO", logger="snakeskills.training"):
        trainer.train()
    lines = [record.getMessage() for record in caplog.records if record.name == "snakeskills.training"]
    steps = [line for line in lines if line.startswith("step ")]
    assert [line.split(",")[0] for line in steps] == ["step 4/8", "step 8/8"], lines
    pattern = r"^step 4/8, loss \d+\.\d{4}, learning rate [\d.e-]+, [\d.]+ examples/s, elapsed \d+s, ETA \d+s$"
    assert re.match(pattern, steps[0]), steps[0]
    assert lines[-1].startswith("training done: 8 steps in "), lines
