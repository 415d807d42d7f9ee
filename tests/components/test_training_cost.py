"""A round's training cost from a real trainer's metrics (snakeskills.results.method_comparison): TRL's SFTTrainer
logs the epoch the records column reads (issue 65, item 16)."""

from __future__ import annotations

from conftest import training_section

from snakeskills.results.method_comparison import records_trained


def test_a_real_trainers_epoch_gives_the_examples_it_drew_to_within_a_batch(tmp_path):
    """26 examples, num_epochs 0.3 in batches of 4: 3 steps of 4, 12 examples drawn, of 26 in the data."""
    from snakeskills.models.tiny_model import build_char_tokenizer, build_tiny_llama
    from snakeskills.training.sft import train_on_examples

    tokenizer = build_char_tokenizer()
    model = build_tiny_llama(tokenizer, hidden_size=16, num_layers=0, num_heads=2, seed=0, max_positions=32)
    examples = [{"prompt_ids": tokenizer(f"{i}+1=")["input_ids"], "completion": str(i + 1)} for i in range(26)]
    metrics, _ = train_on_examples(
        model,
        tokenizer,
        examples,
        output_dir=tmp_path / "trainer",
        run_identity={},
        seed=0,
        threads=1,
        processes=1,
        distributed="ddp",
        training=training_section(num_epochs=0.3, learning_rate=1e-3, batch_size=4, max_length=32),
    )
    drawn = metrics["global_step"] * 4
    assert drawn == 12
    assert abs(records_trained(metrics, len(examples)) - drawn) < 4
