"""DPO's reference (``dpo.precompute_reference``): precomputed, every pair is scored under the reference once before
the first step, whatever the epochs, and no step runs the reference; per step, every step of every epoch runs it
again. Both train to the same weights and losses (real peft + TRL trainers, tiny model), for a LoRA (the reference is
the model with its adapter off) and a full fine-tune (the reference is the starting model: precomputed, no frozen
copy is kept)."""

from __future__ import annotations

import pytest
from conftest import training_section

from snakeskills.io import write_jsonl
from snakeskills.training import dpo
from snakeskills.training import trainer as trainer_module
from snakeskills.training.rounds import RoundRun

PAIRS, EPOCHS = 10, 3  # 3 steps of 4, 4 and 2 pairs an epoch
LORA = {"r": 4, "alpha": 8, "dropout": 0.0, "target_modules": "all-linear"}


def pairs() -> list[dict]:
    """Answers of different lengths, so a pair is padded to other lengths in a step's batch than in the
    precompute's."""

    def assistant(text):
        return [{"role": "assistant", "content": text}]

    return [
        {
            "id": f"p{i}",
            "prompt": [{"role": "user", "content": f"{i}+{i % 7}="}],
            "chosen": assistant(str(i + i % 7) * (1 + i % 3)),
            "rejected": assistant(str(i)),
        }
        for i in range(PAIRS)
    ]


def backbone(model):
    """The decoder under a causal LM, under its LoRA if it has one: what the fused LM head's forward calls."""
    return (model.get_base_model() if hasattr(model, "get_base_model") else model).model


def train(tiny_checkpoint, tmp_path, monkeypatch, weights: str, precompute: bool) -> dict:
    """A DPO round; returns its metrics, its final weights, its trainer, and the sequences the reference scored
    before the first step (``before_training``) and in all (``reference_rows``)."""
    import contextlib

    from safetensors.torch import load_file
    from trl.trainer import dpo_trainer

    data = tmp_path / "pairs.jsonl"
    write_jsonl(data, pairs())
    output = tmp_path / f"{weights}-{'precomputed' if precompute else 'per-step'}" / "model"
    run = RoundRun(
        weights=weights,
        base_model_path=str(tiny_checkpoint),
        data_path=str(data),
        output_dir=str(output),
        lora=LORA if weights == "lora" else None,
        training=training_section(num_epochs=EPOCHS, learning_rate=2e-2, batch_size=4, max_length=32),
        chat_template=False,
        chat_template_kwargs={},
        seed=0,
        threads=1,
        dtype="auto",
        trust_remote_code=False,
    )
    seen = {"reference_rows": 0, "adapter_off": False}
    precompute_call, adapter_call = dpo_trainer.DPOTrainer.compute_ref_log_probs, dpo_trainer.use_adapter

    def counted_precompute(self, model, inputs):  # TRL's precompute, one batch
        seen["reference_rows"] += inputs["input_ids"].shape[0]
        return precompute_call(self, model, inputs)

    @contextlib.contextmanager
    def adapter_off(model, adapter_name):  # a LoRA's reference: its adapter off
        seen["adapter_off"] = True
        try:
            with adapter_call(model, adapter_name):
                yield
        finally:
            seen["adapter_off"] = False

    def count(reference_only: bool):
        def hook(module, args, kwargs):
            if seen["adapter_off"] or not reference_only:
                seen["reference_rows"] += kwargs["input_ids"].shape[0]

        return hook

    captured = {}
    original_run_trainer = trainer_module.run_trainer

    def run_trainer(trainer, resume_from, num_examples):  # the steps' reference forwards from here on
        captured["trainer"], captured["before_training"] = trainer, seen["reference_rows"]
        backbone(trainer.model).register_forward_pre_hook(count(reference_only=True), with_kwargs=True)
        if trainer.ref_model is not None:  # full, per step: TRL's frozen copy of the starting model
            backbone(trainer.ref_model).register_forward_pre_hook(count(reference_only=False), with_kwargs=True)
        return original_run_trainer(trainer, resume_from, num_examples)

    monkeypatch.setattr(dpo_trainer.DPOTrainer, "compute_ref_log_probs", counted_precompute)
    monkeypatch.setattr(dpo_trainer, "use_adapter", adapter_off)
    monkeypatch.setattr(trainer_module, "run_trainer", run_trainer)
    metrics = dpo.train(run, beta=0.1, loss="sigmoid", nll_weight=1.0, precompute_reference=precompute)
    (weights_file,) = output.glob("*.safetensors")
    return {
        "metrics": metrics,
        "weights": load_file(str(weights_file)),
        "trainer": captured["trainer"],
        "before_training": captured["before_training"],
        "reference_rows": seen["reference_rows"],
    }


@pytest.mark.parametrize("weights", ["lora", "full"])
def test_a_precomputed_reference_scores_each_pair_once_and_trains_as_the_per_step_one(
    tiny_checkpoint, tmp_path, monkeypatch, weights
):
    import torch

    precomputed = train(tiny_checkpoint, tmp_path, monkeypatch, weights, precompute=True)
    per_step = train(tiny_checkpoint, tmp_path, monkeypatch, weights, precompute=False)

    # precomputed: both answers of every pair once, before the first step; TRL's columns carry them to the steps
    assert precomputed["before_training"] == precomputed["reference_rows"] == 2 * PAIRS
    assert {"ref_chosen_logps", "ref_rejected_logps"} <= set(precomputed["trainer"].train_dataset.column_names)
    assert precomputed["trainer"].ref_model is None, "no reference model is kept beside the policy"
    # per step: both answers of every pair in every epoch, none before
    assert per_step["before_training"] == 0 and per_step["reference_rows"] == 2 * PAIRS * EPOCHS
    assert (per_step["trainer"].ref_model is None) == (weights == "lora"), "full: TRL's frozen copy"
    assert precomputed["metrics"]["global_step"] == per_step["metrics"]["global_step"] == 3 * EPOCHS

    # the same reference, scored in other batches (other padding): equal up to rounding (bit for bit on a CPU here,
    # but a kernel may round a row differently in a batch of another shape, so the test allows that much)
    def logged(run):
        return [entry for entry in run["metrics"]["log_history"] if "loss" in entry]

    for mine, theirs in zip(logged(precomputed), logged(per_step), strict=True):
        for key in ("loss", "rewards/margins", "rewards/chosen", "rewards/rejected", "logps/chosen"):
            assert mine[key] == pytest.approx(theirs[key], rel=1e-5, abs=1e-6), key
    assert precomputed["weights"].keys() == per_step["weights"].keys()
    for name, tensor in precomputed["weights"].items():
        torch.testing.assert_close(tensor, per_step["weights"][name], rtol=1e-5, atol=1e-6, msg=name)


def test_on_a_cpu_the_fused_lm_head_projects_only_the_answers_positions(tiny_checkpoint, monkeypatch):
    """``completion_positions_only``: TRL's fused head scores only the positions whose next token is an answer's
    (as it does on a GPU), with the same log-probabilities as when it projects every position."""
    import torch
    from transformers import AutoModelForCausalLM
    from trl.kernels import chunked_logprob
    from trl.trainer.utils import add_fused_lm_head

    model = AutoModelForCausalLM.from_pretrained(tiny_checkpoint)
    add_fused_lm_head(model)
    input_ids = torch.tensor([[5, 6, 7, 8, 9, 10, 0, 0], [5, 6, 7, 11, 12, 13, 14, 15]])
    answers = torch.tensor([[0, 0, 0, 1, 1, 1, 0, 0], [0, 0, 0, 0, 0, 1, 1, 1]])
    labels = input_ids.masked_fill(answers == 0, -100)
    attention_mask = (torch.arange(8) < torch.tensor([[6], [8]])).long()
    projected = []
    original = chunked_logprob.ChunkedLogProbFunction.apply

    def counted(hidden, *args):
        projected.append(hidden.shape[0])
        return original(hidden, *args)

    monkeypatch.setattr(chunked_logprob.ChunkedLogProbFunction, "apply", counted)
    every_position = model(input_ids, attention_mask=attention_mask, labels=labels, fused_lm_head=True).log_probs
    with dpo.completion_positions_only():
        answers_only = model(input_ids, attention_mask=attention_mask, labels=labels, fused_lm_head=True).log_probs
    assert projected == [2 * 7, 6], "every shifted position, then the 6 answer tokens"
    torch.testing.assert_close(answers_only, every_position)
    assert (answers_only != 0).sum() == 6
