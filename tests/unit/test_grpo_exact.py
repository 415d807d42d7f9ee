"""GRPO's trainer, exactly as documented (snakeskills.training.grpo, group_forward, trl_names, dpo): a checkpoint due
between two samplings is saved at the next one, the private TRL names the trainers override or read are checked
when their classes are built, the rollouts' tool mask never reaches the reward functions, the shared-prompt forward
says why it gives way to TRL's, the completions a fallback extraction credited are counted, and the docs say that
a wall-time reward does not repeat."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from snakeskills.errors import SnakeskillsError

DOCS = Path(__file__).resolve().parents[2] / "docs"


def saved_steps(callbacks, *, max_steps: int, save_steps: int, tmp_path, clock=None) -> list[int]:
    """The steps at which a Trainer with ``callbacks`` (after transformers' DefaultFlowCallback, as the Trainer
    orders them) saves a checkpoint, its step's save decided at each step's end as the Trainer decides it;
    ``save_steps`` as ``trainer.section_trainer_arguments`` sets it from checkpoint_steps (0: none by steps)."""
    from transformers import TrainerControl, TrainerState, TrainingArguments
    from transformers.trainer_callback import CallbackHandler, DefaultFlowCallback

    strategy = {"save_strategy": "steps", "save_steps": save_steps} if save_steps else {"save_strategy": "no"}
    args = TrainingArguments(output_dir=str(tmp_path), logging_steps=1, report_to=[], **strategy)
    handler = CallbackHandler([DefaultFlowCallback, *callbacks], None, None, None, None)
    state, control = TrainerState(max_steps=max_steps, save_steps=save_steps), TrainerControl()
    control = handler.on_train_begin(args, state, control)
    saves = []
    for step in range(1, max_steps + 1):
        if clock is not None:
            clock.now += clock.step_seconds
        state.global_step = step
        control = handler.on_step_end(args, state, control)
        if control.should_save:
            saves.append(step)
            control = handler.on_save(args, state, control)
        control.should_log = False
    return saves


class StepClock:
    def __init__(self, minutes_per_step: float):
        self.now, self.step_seconds = 0.0, 60 * minutes_per_step

    def __call__(self) -> float:
        return self.now


def test_a_save_due_between_samplings_is_saved_at_the_next_sampling(tmp_path):
    """checkpoint_steps 3 with a sampling every 2 steps: the saves due at 3, 9 and 15 are saved at 4, 10 and 16
    (the next step that starts a sampling), those at 6, 12 and 18 at once, and the last step's with the model."""
    from snakeskills.training.grpo import saving_at_samplings

    saves = saved_steps([saving_at_samplings(2)], max_steps=20, save_steps=3, tmp_path=tmp_path)
    assert saves == [4, 6, 10, 12, 16, 18, 20]
    # one sampling a step: every save as it falls due
    assert saved_steps([saving_at_samplings(1)], max_steps=7, save_steps=3, tmp_path=tmp_path) == [3, 6, 7]
    # a sampling every 4 steps: the saves due at 3 and 6 are both saved at 4 and 8
    assert saved_steps([saving_at_samplings(4)], max_steps=10, save_steps=3, tmp_path=tmp_path) == [4, 8, 10]


def test_a_save_due_by_time_between_samplings_is_saved_at_the_next_sampling(tmp_path):
    """checkpoint_minutes 10 with steps of 4 minutes and a sampling every 2 steps: due at 3 (12 minutes), saved at 4;
    due again at 7 (12 minutes after 4), saved at 8."""
    from snakeskills.training.checkpoints import checkpoint_timer
    from snakeskills.training.grpo import saving_at_samplings

    clock = StepClock(4)
    timer = checkpoint_timer(10, clock=clock)
    saves = saved_steps([timer, saving_at_samplings(2)], max_steps=10, save_steps=0, tmp_path=tmp_path, clock=clock)
    assert saves == [4, 8]


# ---------------------------------------------------------------- private TRL names


def test_the_private_trl_names_grpo_overrides_are_checked_when_its_class_is_built(monkeypatch):
    """A TRL without a method the project overrides, or whose method takes other parameters, or whose RepeatSampler
    lacks an attribute the project reads, stops the build naming TRL's version and the name."""
    import trl
    from trl import GRPOTrainer
    from trl.trainer.utils import RepeatSampler

    from snakeskills.training.grpo import grpo_trainer_class

    grpo_trainer_class()  # the installed TRL has every name

    version = f"TRL {trl.__version__}"
    with monkeypatch.context() as patch:
        patch.delattr(GRPOTrainer, "_tokenize_prompts")
        with pytest.raises(SnakeskillsError, match=rf"{re.escape(version)} .*GRPOTrainer\._tokenize_prompts"):
            grpo_trainer_class()

    with monkeypatch.context() as patch:

        def reordered(self, model, input_ids, attention_mask, batch_size, logits_to_keep, **inputs):
            raise AssertionError("never called")

        patch.setattr(GRPOTrainer, "_get_per_token_logps_and_entropies", reordered)
        with pytest.raises(SnakeskillsError, match=r"_get_per_token_logps_and_entropies takes \(model, input_ids"):
            grpo_trainer_class()

    with monkeypatch.context() as patch:
        original = RepeatSampler.__init__

        def renamed_generator(self, *arguments, **keywords):
            original(self, *arguments, **keywords)
            self.rng = self.__dict__.pop("generator", None)

        patch.setattr(RepeatSampler, "__init__", renamed_generator)
        with pytest.raises(SnakeskillsError, match=rf"{re.escape(version)} .*RepeatSampler\.generator"):
            grpo_trainer_class()


@pytest.mark.parametrize("name", ["_compute_loss", "compute_ref_log_probs", "_prepare_dataset"])
def test_the_private_trl_names_dpo_overrides_are_checked_when_its_class_is_built(monkeypatch, name):
    import trl
    from trl import DPOTrainer

    from snakeskills.training.dpo import dpo_trainer_class

    dpo_trainer_class()
    monkeypatch.delattr(DPOTrainer, name)
    with pytest.raises(SnakeskillsError, match=rf"TRL {re.escape(trl.__version__)} .*DPOTrainer\.{name}"):
        dpo_trainer_class()


def test_the_key_trl_takes_as_its_tool_mask_is_checked_in_its_source():
    """The installed TRL's GRPOTrainer reads the key the tool rollouts give their mask under; a key it does not read
    stops the build."""
    from trl import GRPOTrainer

    from snakeskills.training import trl_names
    from snakeskills.training.grpo_rewards import TRL_TOOL_MASK

    trl_names.require_key(GRPOTrainer, TRL_TOOL_MASK, "gives as the mask of the tools' tokens")
    renamed = "_".join(("env", "mask", "of", "another", "trl"))
    with pytest.raises(SnakeskillsError, match=f"GRPOTrainer reads no key '{renamed}'"):
        trl_names.require_key(GRPOTrainer, renamed, "gives as the mask of the tools' tokens")


def judges(**judge) -> dict:
    from snakeskills.plan.config import default_config
    from snakeskills.plan.sections import benchmark_judge

    return {"arithmetic": {**benchmark_judge(default_config(), "arithmetic"), **judge}}


REASONING = {"parse_reasoning": False, "end_reasoning_string": "</think>"}
ROW = json.dumps({"id": "p0", "problem": "37*84", "expected_answer": "3108", "benchmark": "arithmetic"})


def test_a_reward_function_handed_the_tool_mask_stops_the_training():
    """TRL hands the reward functions what it did not take: the rollouts' tool mask there means it did not reach
    the loss, and every reward term refuses it."""
    from snakeskills.training.grpo_rewards import TRL_TOOL_MASK, JudgeRewards

    functions = JudgeRewards(judges(), REASONING, max_new_tokens=8, num_workers=1).functions()
    assert [function.__name__ for function in functions][:3] == ["correct", "answer_format", "length"]
    arguments = {"prompts": ["p"], "completions": ["\\boxed{3108}"], "completion_ids": [[1, 2]], "row": [ROW]}
    assert functions[0](**arguments) == [1.0]
    for function in functions:
        with pytest.raises(SnakeskillsError, match=f"'{TRL_TOOL_MASK}' to the reward functions"):
            function(**arguments, **{TRL_TOOL_MASK: [[1, 1]]})


# ---------------------------------------------------------------- the shared-prompt forward's reasons


def test_trl_forward_reason_names_each_case_the_shared_prompt_does_not_cover():
    import torch

    from snakeskills.training.group_forward import trl_forward_reason

    class Model:
        is_gradient_checkpointing = False

    # two completions of one prompt (3 tokens), and two of two prompts
    shared = torch.tensor([[5, 6, 7, 1, 2], [5, 6, 7, 3, 4]])
    distinct = torch.tensor([[5, 6, 7, 1, 2], [5, 6, 8, 3, 4]])
    mask = torch.ones_like(shared)

    def reason(model=None, ids=shared, processes=1, aux=False, **inputs):
        model = model or Model()
        return trl_forward_reason(model, ids, mask, 2, processes=processes, compute_aux_loss=aux, inputs=inputs)

    assert reason() is None
    assert reason(pixel_values=None) is None
    assert "auxiliary loss" in reason(aux=True)
    assert "(pixel_values)" in reason(pixel_values=torch.zeros(1))
    checkpointed = Model()
    checkpointed.is_gradient_checkpointing = True
    assert "gradient checkpointing is on (grpo.training.gradient_checkpointing)" in reason(model=checkpointed)
    assert reason(processes=2).startswith("2 training processes (training.processes)")
    assert reason(ids=distinct) == "no two rows of the batch share a prompt"


# ---------------------------------------------------------------- rewards credited by a fallback extraction


def test_the_correct_term_counts_the_completions_a_fallback_credited():
    """With judge.regex set, a completion without \\boxed{} is read by the regex fallback: the correct term rewards
    it and records its route; the counts of a run are its logged steps' sums."""
    from snakeskills.training.grpo_rewards import CREDITED, CREDITED_BY_FALLBACK, JudgeRewards, credited_counts_of

    rewards = JudgeRewards(judges(regex=r"(-?\d+)\s*$"), REASONING, max_new_tokens=8, num_workers=1)
    correct = rewards.functions()[0]
    completions = ["\\boxed{3108}", "so it is 3108", "so it is 3100", "\\boxed{3100}"]
    scores = correct(prompts=["p"] * 4, completions=completions, completion_ids=[[1]] * 4, row=[ROW] * 4)
    assert scores == [1.0, 1.0, 0.0, 0.0]
    assert rewards.take_credited() == ["boxed", "regex fallback"]
    assert rewards.take_credited() == []

    history = [
        {"loss": 0.1, CREDITED: 2, CREDITED_BY_FALLBACK: 1, f"{CREDITED_BY_FALLBACK}/regex fallback": 1},
        {"loss": 0.2, CREDITED: 3, CREDITED_BY_FALLBACK: 0},
        {"train_runtime": 1.0},
    ]
    assert credited_counts_of(history) == {
        "credited": 5,
        "fallback_credited": 1,
        "fallback_credited_by_route": {"regex fallback": 1},
    }
    assert credited_counts_of([{"loss": 0.1}]) == {}


# ---------------------------------------------------------------- docs


def test_the_docs_say_a_wall_time_reward_does_not_repeat_on_resume():
    """docs/training.md, where grpo.rewards.tool_seconds is documented: it is wall time, so a resumed run (or a
    rerun) differs, and the counted terms repeat."""
    text = (DOCS / "training.md").read_text()
    paragraph = next(part for part in text.split("\n\n") if "`grpo.rewards.tool_seconds`" in part)
    flat = " ".join(paragraph.split())
    assert "wall time" in flat
    assert "resumed" in flat and "differ" in flat
    assert "`tool_calls`" in flat and "`tool_cost`" in flat
