"""KTO's trainer on the tiny model: unpaired desirable and undesirable answers to one prompt, on TRL's KTOTrainer
through the round skeleton every method shares; the model learns to give the desirable answer, the reward margin it
logs rises, and a round of it resumes and saves as the others do."""

from __future__ import annotations

import pytest
from conftest import training_section

from snakeskills.io import write_jsonl
from snakeskills.training.kto import tokenize_samples
from snakeskills.training.rounds import RoundRun, train_round

PROMPT = [{"role": "user", "content": "3+4="}]


def kto_samples(count: int) -> list[dict]:
    """One correct answer in four (as the tiny model's own samples are), the wrong ones of every other digit."""
    rows = []
    for index in range(count):
        answer = "7" if index % 4 == 0 else str(index % 7)
        rows.append(
            {"id": f"p{index}", "prompt": PROMPT, "completion": [{"role": "assistant", "content": answer}]}
            | {"label": answer == "7"}
        )
    return rows


def round_run(tiny_checkpoint, tmp_path, weights: str, **training) -> RoundRun:
    """A KTO round of the tiny model on ``tmp_path``/samples.jsonl."""
    return RoundRun(
        weights=weights,
        base_model_path=str(tiny_checkpoint),
        data_path=str(tmp_path / "samples.jsonl"),
        output_dir=str(tmp_path / "kto-round1" / ("adapter" if weights == "lora" else "checkpoint")),
        lora={"r": 8, "alpha": 16, "dropout": 0.0, "target_modules": "all-linear"} if weights == "lora" else None,
        training=training_section(**training),
        chat_template=False,
        chat_template_kwargs={},
        seed=0,
        threads=2,
        dtype="auto",
        trust_remote_code=False,
    )


def test_samples_are_encoded_as_generation_encodes_them(tiny_checkpoint, tmp_path):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_checkpoint)
    (row,) = tokenize_samples(kto_samples(1), tokenizer, round_run(tiny_checkpoint, tmp_path, "lora"))
    assert tokenizer.decode(row["prompt_ids"], skip_special_tokens=True) == "3+4="
    assert row["completion_ids"][-1] == tokenizer.eos_token_id and row["label"] is True
    assert tokenizer.decode(row["completion_ids"][:-1]) == "7"


@pytest.mark.parametrize("weights", ["lora", "full"])
def test_kto_learns_the_desirable_answer(tiny_checkpoint, tmp_path, weights):
    write_jsonl(tmp_path / "samples.jsonl", kto_samples(64))
    rate = 2e-2 if weights == "lora" else 5e-3
    run = round_run(tiny_checkpoint, tmp_path, weights, num_epochs=6, learning_rate=rate, batch_size=16, max_length=16)
    output = run.output_dir
    options = {"beta": 0.1, "loss": "kto", "desirable_weight": None, "undesirable_weight": None}
    metrics = train_round("kto", run, options, log_path=tmp_path / "kto.log")
    assert metrics["training_method"] == "kto" and metrics["method"] == weights
    assert metrics["global_step"] == 24 and metrics["num_examples"] == 64
    margins = [entry["rewards/margins"] for entry in metrics["log_history"] if "rewards/margins" in entry]
    assert margins and margins[-1] > 0, margins
    digits = first_digit_log_probs(tiny_checkpoint, output if weights == "lora" else None, output)
    assert max(digits, key=digits.get) == "7", digits


def first_digit_log_probs(base, adapter, checkpoint) -> dict[str, float]:
    """The tuned model's log-probability of each digit as the first token of its answer to the prompt: KTO raised
    the desirable answer's likelihood and lowered the undesirable ones', so "7" leads the digits (whether a digit
    or the end of the answer comes first is not what the samples teach: every answer is one digit, then EOS)."""
    import torch
    from transformers import AutoTokenizer

    from snakeskills.models.loading import INFERENCE, load_model

    path = str(base if adapter else checkpoint)
    model = load_model(path, dtype="auto", policy=INFERENCE, trust_remote_code=False, adapter_path=adapter)
    tokenizer = AutoTokenizer.from_pretrained(path)
    ids = tokenizer("3+4=", return_tensors="pt")["input_ids"]
    with torch.no_grad():
        log_probs = model(ids).logits[0, -1].log_softmax(-1)
    return {digit: float(log_probs[tokenizer.convert_tokens_to_ids(digit)]) for digit in "0123456789"}
