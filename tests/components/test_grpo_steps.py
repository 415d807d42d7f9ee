"""GRPO's trainer, exactly as documented, in real steps of ``grpo.train`` on tiny Llamas (character tokenizer): a
checkpoint due between two samplings is saved at the next sampling and resumes to the uninterrupted run's weights;
the tool mask reaches the loss (a tool output's tokens weigh nothing, a model token does), and a TRL that handed it
to the reward functions instead stops the training; the job's log says once which forward runs and why; the
completions a fallback extraction credited are counted in the run's metrics.

The fixed rollouts (``FixedRollouts``, in ``BackendRollouts``' place) give every step the same completions, so each
test controls exactly what the loss and the judge see."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from conftest import save_tiny_llama, training_section

from snakeskills.errors import SnakeskillsError
from snakeskills.io import write_jsonl
from snakeskills.settings.tools import Tools
from snakeskills.training import grpo
from snakeskills.training import trainer as trainer_module
from snakeskills.training.rounds import RoundRun

PROMPT = "37*84="
SAMPLING = {"temperature": 1.0, "top_p": 1.0, "top_k": 0, "max_new_tokens": 48}
REASONING = {"parse_reasoning": False, "end_reasoning_string": "</think>"}
PROBLEM = {"id": "p0", "problem": "37*84", "expected_answer": "3108", "benchmark": "arithmetic"}


def judges(**judge) -> dict:
    from snakeskills.plan.config import default_config
    from snakeskills.plan.sections import benchmark_judge

    return {"arithmetic": {**benchmark_judge(default_config(), "arithmetic"), **judge}}


@pytest.fixture(scope="module")
def one_layer(tmp_path_factory) -> Path:
    """A tiny Llama with one decoder layer (gradient checkpointing has a layer to recompute), 64 positions."""
    return save_tiny_llama(tmp_path_factory.mktemp("one-layer"), num_layers=1, max_positions=64, silent_attention=True)


def tool_transcript(call: str, output: str, answer: str) -> str:
    """A tool-integrated answer: a call, the output block the loop appended, the model's answer."""
    return f"<calc>{call}</calc><out>{output}</out>\\boxed{{{answer}}}"


def output_span(text: str) -> list[int]:
    return [text.index("<out>"), text.index("</out>") + len("</out>")]


class FixedRollouts:
    """A ``rollout_func`` returning the completions ``texts`` (one token a character, then EOS) of its prompts; with
    ``tools``, as the tool loop returns them: ``env_mask`` 0 on each output block's tokens and the extras the rewards
    read."""

    def __init__(self, prompt_token_ids, texts: list[str], tools: bool):
        self.prompt_token_ids, self.texts, self.tools = prompt_token_ids, texts, tools

    def __call__(self, prompts: list[str], trainer) -> dict:
        tokenizer = trainer.processing_class
        texts = [self.texts[index % len(self.texts)] for index in range(len(prompts))]
        ids = [[*tokenizer.encode(text, add_special_tokens=False), tokenizer.eos_token_id] for text in texts]
        assert all(len(row) == len(text) + 1 for row, text in zip(ids, texts, strict=True)), "a token a character"
        output = {
            "prompt_ids": [list(self.prompt_token_ids[prompt]) for prompt in prompts],
            "completion_ids": ids,
            "logprobs": [[-1.0] * len(row) for row in ids],
        }
        if self.tools:
            spans = [output_span(text) for text in texts]
            output["env_mask"] = [
                [0 if start <= position < end else 1 for position in range(len(row))]
                for row, (start, end) in zip(ids, spans, strict=True)
            ]
            output["transcript"] = texts
            output["tool_output_spans"] = [[span] for span in spans]
            output["tool_calls"] = [1] * len(texts)
        return output


def fixed_run(folder: Path, checkpoint: Path, weights: str, group: int, **training) -> RoundRun:
    folder.mkdir()
    write_jsonl(folder / "problems.jsonl", [PROBLEM | {"prompt": [{"role": "user", "content": PROMPT}]}])
    return RoundRun(
        weights=weights,
        base_model_path=str(checkpoint),
        data_path=str(folder / "problems.jsonl"),
        output_dir=str(folder / "adapter"),
        lora={"r": 4, "alpha": 8, "dropout": 0.0, "target_modules": ["gate_proj", "up_proj", "down_proj"]},
        training=training_section(
            **{"num_epochs": 1, "learning_rate": 1e-2, "batch_size": group, "max_length": 64, **training}
        ),
        chat_template=False,
        chat_template_kwargs={},
        seed=0,
        threads=1,
        dtype="auto",
        trust_remote_code=False,
    )


def fixed_step(run: RoundRun, monkeypatch, texts: list[str], *, tools: bool, judge=None, rewards=None) -> dict:
    """One real step of ``grpo.train`` on ``run``'s one problem, its group of completions ``texts``; the trained
    weights moved at random first (the policy differs from its reference). Returns the metrics, the loss and the
    trained weights' gradients."""
    import torch
    from transformers import TrainerCallback

    seen: dict = {}

    class Gradients(TrainerCallback):
        def on_pre_optimizer_step(self, args, state, control, model=None, **kwargs):
            seen["gradients"] = {
                name: parameter.grad.clone() for name, parameter in model.named_parameters() if parameter.requires_grad
            }

    original_run_trainer, compute_loss = trainer_module.run_trainer, None

    def run_trainer(trainer, resume_from, num_examples):
        nonlocal compute_loss
        generator = torch.Generator().manual_seed(1)
        with torch.no_grad():
            for parameter in trainer.model.parameters():
                if parameter.requires_grad:
                    parameter.add_(0.1 * torch.randn(parameter.shape, generator=generator))
        trainer.add_callback(Gradients())
        compute_loss = type(trainer)._compute_loss

        def recording_loss(self, model, inputs):
            loss = compute_loss(self, model, inputs)
            seen["loss"] = loss.detach().clone()
            return loss

        with monkeypatch.context() as patch:
            patch.setattr(type(trainer), "_compute_loss", recording_loss)
            return original_run_trainer(trainer, resume_from, num_examples)

    def rollouts(prompt_token_ids, sampling, *, seed, batch_size, tools):
        return FixedRollouts(prompt_token_ids, texts, tools=tools is not None)

    with monkeypatch.context() as patch:
        patch.setattr(grpo, "BackendRollouts", rollouts)
        patch.setattr(trainer_module, "run_trainer", run_trainer)
        seen["metrics"] = grpo.train(
            run,
            num_generations=len(texts),
            beta=0.04,
            loss="dapo",
            sampling=SAMPLING,
            rewards=rewards or {"correct": 1.0},
            judges=judge or judges(),
            reasoning=REASONING,
            rollouts="hf",
            tools=Tools.filled({"tool": "calculator", "sandbox": "none"}, "tools").to_dict() if tools else None,
        )
    assert seen["metrics"]["global_step"] == 1
    return seen


@pytest.fixture()
def tool_use(monkeypatch):
    """``tools.loop.tool_use`` answering any tools section (the fixed rollouts never call a tool)."""
    from snakeskills.tools import loop

    monkeypatch.setattr(loop, "tool_use", lambda tools, chat_template_kwargs=None: object())


# ---------------------------------------------------------------- the tool mask reaches the loss


def same(first, second) -> bool:
    import torch

    return torch.equal(first["loss"], second["loss"]) and all(
        torch.equal(gradient, second["gradients"][name]) for name, gradient in first["gradients"].items()
    )


def test_a_tools_output_weighs_nothing_in_the_loss_and_a_model_token_does(
    bigram_checkpoint, tmp_path, monkeypatch, tool_use
):
    """Through TRL's own tool mask (``env_mask``): changing a tool output's tokens changes neither the loss nor any
    gradient; changing one token the model wrote changes both. A TRL that no longer took ``env_mask`` as its tool
    mask fails the first."""
    right, wrong = tool_transcript("37*84", "3108", "3108"), tool_transcript("37*8", "296", "296")
    other_output = [tool_transcript("37*84", "9999", "3108"), tool_transcript("37*8", "111", "296")]
    other_call = [tool_transcript("37*85", "3108", "3108"), wrong]

    def step(name, texts):
        return fixed_step(fixed_run(tmp_path / name, bigram_checkpoint, "full", 2), monkeypatch, texts, tools=True)

    real = step("real", [right, wrong])
    assert real["metrics"]["log_history"][0]["reward"] == 0.5, "one right answer of two: the advantages are not 0"
    assert same(real, step("other-output", other_output))
    assert not same(real, step("other-call", other_call))


def test_a_trl_that_hands_env_mask_to_the_rewards_stops_the_training(
    bigram_checkpoint, tmp_path, monkeypatch, tool_use
):
    """A TRL that does not take ``env_mask`` (as one that renamed the key would) leaves it among the extras it hands
    the reward functions, with no tool mask for the loss: the training stops with an error naming the key."""
    from trl import GRPOTrainer

    generate = GRPOTrainer._generate

    def not_taking_env_mask(self, prompts):
        generated = list(generate(self, prompts))  # TRL 1.16's: ..., tool_mask (2), ..., extra fields (5), ...
        assert generated[2] is not None, "this TRL takes env_mask"
        generated[5] = {**generated[5], "env_mask": generated[2]}
        generated[2] = None
        return tuple(generated)

    monkeypatch.setattr(GRPOTrainer, "_generate", not_taking_env_mask)
    texts = [tool_transcript("37*84", "3108", "3108"), tool_transcript("37*8", "296", "296")]
    with pytest.raises(SnakeskillsError, match=r"handed the tool rollouts' 'env_mask' to the reward functions"):
        fixed_step(fixed_run(tmp_path / "run", bigram_checkpoint, "full", 2), monkeypatch, texts, tools=True)


# ---------------------------------------------------------------- which forward runs, once a round


def forward_lines(caplog) -> list[str]:
    return [record.getMessage() for record in caplog.records if record.getMessage().startswith("GRPO forwards")]


SHARED = "each group's prompt computed once (group_forward.shared_prompt_logps)"


@pytest.mark.parametrize("checkpointing", [False, True], ids=["shared-prompt", "gradient-checkpointing"])
def test_the_log_says_once_which_forward_runs_and_why(one_layer, tmp_path, monkeypatch, caplog, checkpointing):
    """The forwards without gradients (the reference's) and with them (the policy's, its backward after): one line
    each a round, naming the shared-prompt forward, or TRL's own with its reason (gradient checkpointing, which TRL
    turns off for the forwards without gradients, would recompute the shared cache in the backward)."""
    texts = ["\\boxed{3108}", "\\boxed{31}"]
    run = fixed_run(tmp_path / "run", one_layer, "lora", 2, gradient_checkpointing=checkpointing)
    with caplog.at_level(logging.INFO, logger="snakeskills.training.grpo"):
        fixed_step(run, monkeypatch, texts, tools=False)
    with_gradients = (
        "TRL's own, over whole sequences, since gradient checkpointing is on (grpo.training.gradient_checkpointing): "
        "the backward would recompute the shared prompt's cache"
        if checkpointing
        else SHARED
    )
    assert forward_lines(caplog) == [
        f"GRPO forwards without gradients: {SHARED}",
        f"GRPO forwards with gradients: {with_gradients}",
    ]


# ---------------------------------------------------------------- rewards credited by a fallback extraction


def test_the_metrics_count_the_rewards_a_fallback_extraction_credited(bigram_checkpoint, tmp_path, monkeypatch, caplog):
    """judge.regex set, the correct term rewards a completion without \\boxed{} (the regex fallback): the step's
    log counts the completions it rewarded and the one the fallback credited, the run's counts are in its
    metrics' history, and the job's log says so."""
    from snakeskills.training.grpo_rewards import CREDITED, CREDITED_BY_FALLBACK, credited_counts_of

    texts = ["\\boxed{3108}", "so it is 3108", "so it is 31", "\\boxed{31}"]
    run = fixed_run(tmp_path / "run", bigram_checkpoint, "full", 4)
    with caplog.at_level(logging.INFO, logger="snakeskills.training.grpo"):
        seen = fixed_step(run, monkeypatch, texts, tools=False, judge=judges(regex=r"(-?\d+)\s*$"))
    (step,) = [entry for entry in seen["metrics"]["log_history"] if "loss" in entry]
    assert step[CREDITED] == 2 and step[CREDITED_BY_FALLBACK] == 1
    assert step[f"{CREDITED_BY_FALLBACK}/regex fallback"] == 1
    assert credited_counts_of(seen["metrics"]["log_history"]) == {
        "credited": 2,
        "fallback_credited": 1,
        "fallback_credited_by_route": {"regex fallback": 1},
    }
    assert (
        "1 of the 2 completions the correct term rewarded were credited by a fallback extraction (1 by regex "
        "fallback)" in caplog.text
    )


# ---------------------------------------------------------------- a save due between samplings


class Killed(Exception):
    """Raised right after a checkpoint is saved: the training stops as if killed."""


def sampled_run(tiny_checkpoint, folder: Path) -> RoundRun:
    """A LoRA round on 13 problems, 2 problems (8 completions) a step, a sampling every 2 steps (4 problems): 3
    samplings, 6 steps; a checkpoint every 3 steps."""
    folder.mkdir()
    problems = [
        {"id": f"p{i}", "problem": f"{i}+{i % 7}", "expected_answer": str(i + i % 7), "benchmark": "arithmetic"}
        | {"prompt": [{"role": "user", "content": f"{i}+{i % 7}="}]}
        for i in range(13)
    ]
    write_jsonl(folder / "problems.jsonl", problems)
    return RoundRun(
        weights="lora",
        base_model_path=str(tiny_checkpoint),
        data_path=str(folder / "problems.jsonl"),
        output_dir=str(folder / "adapter"),
        lora={"r": 4, "alpha": 8, "dropout": 0.0, "target_modules": "all-linear"},
        training=training_section(
            num_epochs=1, learning_rate=2e-2, batch_size=8, max_length=32, checkpoint_steps=3, checkpoint_minutes=0
        ),
        chat_template=False,
        chat_template_kwargs={},
        seed=0,
        threads=1,
        dtype="auto",
        trust_remote_code=False,
    )


def train_sampled(run: RoundRun, monkeypatch, *, kill_after=None) -> tuple[dict, list[int]]:
    """``grpo.train`` on ``run`` with the hf rollouts, every step logged; stopped by ``Killed`` right after
    checkpoint ``kill_after``. Returns the metrics and the steps whose checkpoints were saved."""
    from transformers import TrainerCallback

    saves: list[int] = []

    class EveryStep(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            control.should_log = True

        def on_save(self, args, state, control, **kwargs):
            saves.append(state.global_step)
            if state.global_step == kill_after:
                raise Killed(f"after checkpoint-{state.global_step}")

    original = trainer_module.run_trainer

    def run_trainer(trainer, resume_from, num_examples):
        trainer.add_callback(EveryStep())
        return original(trainer, resume_from, num_examples)

    with monkeypatch.context() as patch:
        patch.setattr(trainer_module, "run_trainer", run_trainer)
        metrics = grpo.train(
            run,
            num_generations=4,
            beta=0.04,
            loss="dapo",
            sampling={**SAMPLING, "max_new_tokens": 12},
            rewards={"correct": 1.0, "length": 1.0},
            judges=judges(),
            reasoning=REASONING,
            rollouts="hf",
            steps_per_generation=2,
        )
    return metrics, saves


def test_a_checkpoint_due_between_samplings_is_saved_at_the_next_and_resumes_exactly(
    tiny_checkpoint, tmp_path, monkeypatch
):
    """checkpoint_steps 3 with a sampling every 2 steps: the save due at step 3 is saved at step 4 (the next
    sampling's), the one due at 6 with the last step. A run killed right after checkpoint 4 resumes from it to the
    uninterrupted run's every logged step and its weights, bit for bit."""
    import torch
    from safetensors.torch import load_file

    whole, whole_saves = train_sampled(sampled_run(tiny_checkpoint, tmp_path / "whole"), monkeypatch)
    assert whole["global_step"] == 6
    assert whole_saves == [4, 6]

    run = sampled_run(tiny_checkpoint, tmp_path / "killed")
    with pytest.raises(Killed):
        train_sampled(run, monkeypatch, kill_after=4)
    resumed, resumed_saves = train_sampled(run, monkeypatch)
    assert resumed["resumed_from_checkpoint"].endswith("checkpoint-4") and resumed_saves == [6]

    def steps(metrics):
        return [
            {key: value for key, value in entry.items() if "time" not in key and key != "num_tokens"}
            for entry in metrics["log_history"]
            if "loss" in entry
        ]

    assert steps(resumed) == steps(whole)
    expected = load_file(str(tmp_path / "whole" / "adapter" / "adapter_model.safetensors"))
    weights = load_file(str(tmp_path / "killed" / "adapter" / "adapter_model.safetensors"))
    assert weights.keys() == expected.keys()
    assert not [name for name in weights if not torch.equal(weights[name], expected[name])]
