"""GRPO's completions come from the configured sampler (real TRL GRPOTrainer, peft, tiny model): with rollouts hf, the
hf backend's decoding loop with a seed per completion and grpo.sampling's settings (TRL's own generate is never
called, and the completions equal the backend's for the same seeds and weights); with rollouts trl, TRL's generate;
the folded LoRA copy gives the policy's own next-token distribution."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import training_section

from snakeskills.io import write_jsonl
from snakeskills.training.rounds import RoundRun, train_round

LORA = {"r": 4, "alpha": 8, "dropout": 0.0, "target_modules": "all-linear"}
SAMPLING = {"temperature": 1.0, "top_p": 0.9, "top_k": 20, "max_new_tokens": 12}


def grpo_options(rollouts: str, **settings) -> dict:
    from snakeskills.plan.config import default_config
    from snakeskills.plan.sections import benchmark_judge

    return {
        "num_generations": 4,
        "beta": 0.04,
        "loss": "dapo",
        "sampling": SAMPLING,
        "rewards": {"correct": 1.0, "answer_format": 0.0, "length": 1.0},
        "judges": {"arithmetic": benchmark_judge(default_config(), "arithmetic")},
        "reasoning": {"parse_reasoning": False, "end_reasoning_string": "</think>"},
        "rollouts": rollouts,
        "vllm_mode": None,
        **settings,
    }


def grpo_round(tiny_checkpoint, tmp_path: Path, name: str) -> RoundRun:
    data = tmp_path / "problems.jsonl"
    write_jsonl(
        data,
        [
            {"id": f"p{i}", "problem": f"{i}+{i % 7}", "expected_answer": str(i + i % 7), "benchmark": "arithmetic"}
            | {"prompt": [{"role": "user", "content": f"{i}+{i % 7}="}]}
            for i in range(8)
        ],
    )
    training = training_section(num_epochs=1, learning_rate=2e-2, batch_size=8, max_length=32)
    return RoundRun(
        weights="lora",
        base_model_path=str(tiny_checkpoint),
        data_path=str(data),
        output_dir=str(tmp_path / name / "adapter"),
        lora=LORA,
        training=training,
        chat_template=False,
        chat_template_kwargs={},
        seed=3,
        threads=1,
        dtype="auto",
        trust_remote_code=False,
    )


@pytest.fixture()
def recorded(monkeypatch):
    """What each sampling returned (rollouts hf) and how often TRL's own generate ran."""
    from trl import GRPOTrainer

    from snakeskills.training import rollouts

    record = {"rollouts": [], "trl_generate": 0}
    call, single_turn = rollouts.BackendRollouts.__call__, GRPOTrainer._generate_single_turn

    def recording_call(self, prompts, trainer):
        output = call(self, prompts, trainer)
        record["rollouts"].append({"step": trainer.state.global_step, "prompts": list(prompts), **output})
        return output

    def counting_single_turn(self, *arguments, **keywords):
        record["trl_generate"] += 1
        return single_turn(self, *arguments, **keywords)

    monkeypatch.setattr(rollouts.BackendRollouts, "__call__", recording_call)
    monkeypatch.setattr(GRPOTrainer, "_generate_single_turn", counting_single_turn)
    return record


def test_hf_rollouts_are_the_backends_samples_and_trl_generate_never_runs(tiny_checkpoint, tmp_path, recorded):
    from snakeskills.backends.hf import HFBackend, load_model_and_tokenizer
    from snakeskills.backends.types import GenerationRequest, SamplingParams
    from snakeskills.training.rollouts import rollout_seed

    run = grpo_round(tiny_checkpoint, tmp_path, "hf")
    metrics = train_round("grpo", run, grpo_options("hf"), log_path=tmp_path / "train.log")

    assert recorded["trl_generate"] == 0, "TRL's own generate sampled GRPO's completions"
    assert [rollout["step"] for rollout in recorded["rollouts"]] == list(range(metrics["global_step"]))
    first = recorded["rollouts"][0]
    assert len(first["completion_ids"]) == 8 and len(set(map(tuple, first["prompt_ids"]))) == 2  # 2 groups of 4
    # step 0's weights are the base model's (a new LoRA adapter's update is 0): the backend over them, with the
    # same seeds and sampling, draws the same completions
    model, tokenizer = load_model_and_tokenizer(
        str(tiny_checkpoint), adapter_path=None, device="cpu", dtype="auto", trust_remote_code=False
    )
    backend = HFBackend.around(model, tokenizer, batch_size=8)
    sampling = SamplingParams(**SAMPLING)
    requests = [
        GenerationRequest(seed=rollout_seed(run.seed, 0, index), prompt_token_ids=tuple(ids))
        for index, ids in enumerate(first["prompt_ids"])
    ]
    results = backend.generate(requests, sampling)
    assert [list(result.token_ids) for result in results] == first["completion_ids"]
    assert all(len(ids) <= SAMPLING["max_new_tokens"] for ids in first["completion_ids"])
    for result, logprobs in zip(results, first["logprobs"], strict=True):
        assert list(result.logprobs) == pytest.approx(logprobs, abs=1e-5)
        assert all(value <= 0 for value in logprobs)
    # a group's completions differ (a seed each), and a later step's seeds are not step 0's
    assert len({tuple(ids) for ids in first["completion_ids"][:4]}) > 1
    other = [
        list(result.token_ids)
        for result in backend.generate(
            [
                GenerationRequest(seed=rollout_seed(run.seed, 1, index), prompt_token_ids=request.prompt_token_ids)
                for index, request in enumerate(requests)
            ],
            sampling,
        )
    ]
    assert other != first["completion_ids"]


def test_trl_rollouts_sample_with_trls_generate(tiny_checkpoint, tmp_path, recorded):
    run = grpo_round(tiny_checkpoint, tmp_path, "trl")
    metrics = train_round("grpo", run, grpo_options("trl"), log_path=tmp_path / "train.log")
    assert recorded["rollouts"] == [] and recorded["trl_generate"] == metrics["global_step"] > 0


def test_steps_per_generation_samples_once_for_several_steps(tiny_checkpoint, tmp_path, recorded):
    run = grpo_round(tiny_checkpoint, tmp_path, "spg")
    run.training = {**run.training, "batch_size": 4}
    metrics = train_round("grpo", run, grpo_options("hf", steps_per_generation=2), log_path=tmp_path / "train.log")
    assert metrics["global_step"] == 8  # 8 problems x 4 completions in batches of 4 (1 problem x 4)
    # one sampling of 2 batches serves 2 steps: at steps 0, 2, 4, 6
    assert [rollout["step"] for rollout in recorded["rollouts"]] == [0, 2, 4, 6]
    assert all(len(rollout["completion_ids"]) == 8 for rollout in recorded["rollouts"])


def test_the_folded_copy_gives_the_policys_next_token_distribution(tiny_checkpoint):
    """... with its own weights: the source model (TRL's fused LM head set on it first, as GRPO's trainer does) is
    never run by the copy's forward."""
    import torch
    from peft import LoraConfig, get_peft_model
    from trl.trainer.utils import add_fused_lm_head

    from snakeskills.backends.hf import load_model_and_tokenizer
    from snakeskills.training.rollouts import FoldedPolicy, foldable

    model, _ = load_model_and_tokenizer(
        str(tiny_checkpoint), adapter_path=None, device="cpu", dtype="float32", trust_remote_code=False
    )
    add_fused_lm_head(model)
    policy = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules="all-linear"))
    assert foldable(policy)
    folded = FoldedPolicy(policy)
    source_runs = []
    model.model.register_forward_hook(lambda *_: source_runs.append(1))
    frozen = {name: value.clone() for name, value in policy.named_parameters() if "lora_" not in name}
    inputs = torch.tensor([[5, 9, 12, 7, 3]])
    generator = torch.Generator().manual_seed(0)
    for _ in range(2):  # the adapter trains between two samplings: each refresh follows it
        with torch.no_grad():
            for name, parameter in policy.named_parameters():
                if "lora_" in name:
                    parameter.add_(0.3 * torch.randn(parameter.shape, generator=generator))
            policy.eval()
            expected = policy(input_ids=inputs).logits
            source_runs.clear()
            actual = folded.refresh()(input_ids=inputs).logits
            assert source_runs == [], "the folded copy ran the source model"
        torch.testing.assert_close(actual, expected, rtol=1e-4, atol=1e-4)
        assert not torch.allclose(expected, folded.model.__class__.from_pretrained(tiny_checkpoint)(inputs).logits)
    # the policy's own frozen weights are untouched (no merge in place)
    assert all(torch.equal(value, frozen[name]) for name, value in policy.named_parameters() if "lora_" not in name)


def test_with_steps_per_generation_checkpoints_fall_on_samplings_and_resume_exactly(
    tiny_checkpoint, tmp_path, monkeypatch
):
    """A sampling serves 2 steps: a checkpoint due every step is saved at the steps that start a sampling (a
    checkpoint between two would lack the completions sampled for the next step), and a run killed after one ends
    with the uninterrupted run's weights."""
    import torch
    from safetensors.torch import load_file
    from transformers import TrainerCallback

    from snakeskills.training import trainer as trainer_module

    class Killed(Exception):
        pass

    saves: list[int] = []

    class KillAfter(TrainerCallback):
        def __init__(self, step):
            self.step = step

        def on_save(self, args, state, control, **kwargs):
            saves.append(state.global_step)
            if state.global_step == self.step:
                raise Killed

    def train(name, kill_after=None):
        run = grpo_round(tiny_checkpoint, tmp_path, name)
        run.training = {**run.training, "batch_size": 4, "checkpoint_steps": 1}
        original = trainer_module.run_trainer

        def run_trainer(trainer, resume_from, num_examples):
            if kill_after is not None:
                trainer.add_callback(KillAfter(kill_after))
            return original(trainer, resume_from, num_examples)

        with monkeypatch.context() as patch:
            patch.setattr(trainer_module, "run_trainer", run_trainer)
            options = grpo_options("hf", steps_per_generation=2)
            return train_round("grpo", run, options, log_path=tmp_path / f"{name}.log"), Path(run.output_dir)

    whole, whole_dir = train("whole")
    with pytest.raises(Killed):
        train("killed", kill_after=4)
    assert saves == [2, 4]
    resumed, resumed_dir = train("killed")
    assert resumed["resumed_from_checkpoint"].endswith("checkpoint-4") and resumed["global_step"] == 8
    expected = load_file(str(whole_dir / "adapter_model.safetensors"))
    actual = load_file(str(resumed_dir / "adapter_model.safetensors"))
    assert expected.keys() == actual.keys()
    assert all(torch.equal(actual[name], expected[name]) for name in expected)


@pytest.mark.parametrize("reuse", [{"num_iterations": 2}, {"steps_per_generation": 2}, {}])
def test_the_old_policys_log_probabilities_are_the_samplings_own(tiny_checkpoint, tmp_path, monkeypatch, caplog, reuse):
    """Where a sampling serves several steps, TRL's forward for the old policy's log-probabilities is not run: the
    sampling's own stand in, equal to what that forward computes (checked here against it, at every scored
    position), and the reference's forward (the adapter off, or its ``ref`` copy on) still runs and is never
    answered so; with a sampling per step, nothing stands in for any forward."""
    import torch

    from snakeskills.training import grpo

    made, compared, reference_forwards = grpo.grpo_trainer_class, [], []

    def checking_class():
        trainer_class = made()

        class Checking(trainer_class):
            def sampled_logps(self, model, input_ids, attention_mask, logits_to_keep, compute_entropy):
                values = super().sampled_logps(model, input_ids, attention_mask, logits_to_keep, compute_entropy)
                if not grpo.runs_adapter(self.accelerator.unwrap_model(model), "default"):
                    reference_forwards.append(1)
                    assert values is None
                if values is not None:  # the forward they stand in for, run here to compare
                    forward, _, _ = self._get_per_token_logps_and_entropies(
                        model, input_ids, attention_mask, logits_to_keep
                    )
                    mask = attention_mask[:, -logits_to_keep:].bool()
                    torch.testing.assert_close(values[mask], forward[mask], rtol=1e-4, atol=1e-4)
                    compared.append(int(mask.sum()))
                return values

        return Checking

    monkeypatch.setattr(grpo, "grpo_trainer_class", checking_class)
    caplog.set_level("INFO", logger="snakeskills.training.grpo")
    run = grpo_round(tiny_checkpoint, tmp_path, "reuse")
    run.training = {**run.training, "batch_size": 4}
    metrics = train_round("grpo", run, grpo_options("hf", **reuse), log_path=tmp_path / "train.log")
    samplings = metrics["global_step"] // 2 if reuse else metrics["global_step"]
    assert len(reference_forwards) == samplings  # beta 0.04: the reference's forward, once per sampled batch
    if not reuse:  # a sampling per step: TRL runs no old policy's forward, and nothing stands in for one
        assert compared == [] and "the sampling's own" not in caplog.text
        return
    assert len(compared) == samplings and all(count > 0 for count in compared)
    assert "the old policy's log-probabilities are the sampling's own" in caplog.text
