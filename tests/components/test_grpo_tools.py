"""GRPO with tools: the tokens a tool appended to a rollout never reach GRPO's loss, and the rollouts of the hf
backend's tool loop hand TRL an ``env_mask`` that marks exactly those tokens.

The masking test runs one real step of the project's GRPO trainer (``grpo.train``: ``TokenizedGRPOTrainer``, its
shared-prompt forward ``group_forward.shared_prompt_logps``, TRL 1.16's loss) with fixed rollouts, on tiny Llamas
whose every position's prediction reads its own token only (without decoder layers, or, for a LoRA, whose one
layer's attention adds exactly 0): two rollouts that differ only inside a tool output block then differ only in
what the loss is taken on there. With ``env_mask`` 0 on the block, the loss, every gradient and the weights after
the step are the same bit for bit; with ``env_mask`` all ones they differ.

The rollout test teaches the character-level tiny model two tool-integrated transcripts by heart (a quick SFT), so
that its completions really call the calculator, and reads what ``BackendRollouts`` returns: model tokens and tool
tokens interleaved, ``env_mask`` 0 on exactly the tool output blocks, and the extras the rewards read."""

from __future__ import annotations

import json

import pytest
from conftest import TOOL_CALLER_TOOLS as TOOLS
from conftest import save_tiny_llama, training_section

from snakeskills.io import write_jsonl
from snakeskills.training import grpo
from snakeskills.training import trainer as trainer_module
from snakeskills.training.rounds import RoundRun

PROMPT = "37*84="
SAMPLING = {"temperature": 1.0, "top_p": 1.0, "top_k": 0, "max_new_tokens": 48}
REWARDS = {"correct": 1.0, "answer_format": 0.0, "length": 0.0, "tool_calls": 0.0, "tool_seconds": 0.0}


def transcript(call: str, output: str, answer: str) -> str:
    """A tool-integrated answer: a call, the output block the loop appended, the model's answer."""
    return f"<calc>{call}</calc><out>{output}</out>\\boxed{{{answer}}}"


def output_span(text: str) -> list[int]:
    """The output block of ``transcript`` (its tags included), as the loop records it."""
    return [text.index("<out>"), text.index("</out>") + len("</out>")]


def judges() -> dict:
    from snakeskills.plan.config import default_config
    from snakeskills.plan.sections import benchmark_judge

    return {"arithmetic": benchmark_judge(default_config(), "arithmetic")}


REASONING = {"parse_reasoning": False, "end_reasoning_string": "</think>"}


@pytest.fixture(scope="module")
def local_checkpoints(bigram_checkpoint, tmp_path_factory) -> dict:
    """Two tiny Llamas (character tokenizer) whose every position's prediction reads its own token only, saved as
    checkpoint folders: ``full``, without decoder layers (a bigram model); ``lora``, one decoder layer whose
    attention's output projection is zero (frozen under LoRA), so its attention adds exactly 0 and only its MLP,
    position by position, which the LoRA adapts, counts (the shared-prompt forward's cache has a real layer)."""
    lora = save_tiny_llama(tmp_path_factory.mktemp("local-lora"), num_layers=1, max_positions=64, silent_attention=True)
    return {"full": bigram_checkpoint, "lora": lora}


class FixedRollouts:
    """A ``rollout_func`` (in ``BackendRollouts``' place) that returns fixed tool-integrated completions of its
    prompt, as the tool loop returns them: ``env_mask`` 0 on each output block's tokens (``masked``), else all
    ones; the extras the rewards read; the sampling log-probabilities 0.0 on the tools' tokens."""

    def __init__(self, prompt_token_ids, texts: list[str], masked: bool):
        self.prompt_token_ids, self.texts, self.masked = prompt_token_ids, texts, masked
        self.outputs: list[dict] = []

    def __call__(self, prompts: list[str], trainer) -> dict:
        tokenizer = trainer.processing_class
        texts = [self.texts[index % len(self.texts)] for index in range(len(prompts))]
        completion_ids, env_mask, logprobs = [], [], []
        for text in texts:
            start, end = output_span(text)
            ids = [*tokenizer.encode(text, add_special_tokens=False), tokenizer.eos_token_id]
            assert len(ids) == len(text) + 1, "one token a character"
            mask = [0 if self.masked and start <= position < end else 1 for position in range(len(ids))]
            completion_ids.append(ids)
            env_mask.append(mask)
            logprobs.append([-1.0 if bit else 0.0 for bit in mask])
        output = {
            "prompt_ids": [list(self.prompt_token_ids[prompt]) for prompt in prompts],
            "completion_ids": completion_ids,
            "logprobs": logprobs,
            "env_mask": env_mask,
            "transcript": texts,
            "tool_output_spans": [[output_span(text)] for text in texts],
            "tool_calls": [1] * len(prompts),
            "tool_seconds": [0.001] * len(prompts),
            "model_tokens": [sum(mask) for mask in env_mask],
        }
        self.outputs.append(output)
        return output


def grpo_step(checkpoints, weights, tmp_path, monkeypatch, name: str, texts: list[str], masked: bool) -> dict:
    """One real GRPO step (``grpo.train``; ``weights`` lora: a fresh LoRA on the MLP, full: every weight) on one
    problem, its group of completions ``texts``. The trained weights are moved at random first, so that the policy
    differs from its reference (the adapter off, or the reference copy of the starting model) and the KL term
    counts. Returns the loss, the trained weights' gradients, the weights after the step, the batch as TRL built
    it (``inputs``), the logged mean reward, and how often the project's shared-prompt forward and TRL's own ran."""
    import torch
    from safetensors.torch import load_file
    from transformers import TrainerCallback
    from trl import GRPOTrainer

    folder = tmp_path / name
    folder.mkdir()
    problem = {"id": "p0", "problem": "37*84", "expected_answer": "3108", "benchmark": "arithmetic"}
    write_jsonl(folder / "problems.jsonl", [problem | {"prompt": [{"role": "user", "content": PROMPT}]}])
    run = RoundRun(
        weights=weights,
        base_model_path=str(checkpoints[weights]),
        data_path=str(folder / "problems.jsonl"),
        output_dir=str(folder / "adapter"),
        lora={"r": 4, "alpha": 8, "dropout": 0.0, "target_modules": ["gate_proj", "up_proj", "down_proj"]},
        training=training_section(num_epochs=1, learning_rate=1e-2, batch_size=len(texts), max_length=64),
        chat_template=False,
        chat_template_kwargs={},
        seed=0,
        threads=1,
        dtype="auto",
        trust_remote_code=False,
    )
    seen = {"losses": [], "inputs": [], "shared": 0, "trl_forward": 0}
    rollouts: list[FixedRollouts] = []

    def fixed_rollouts(prompt_token_ids, sampling, *, seed, batch_size, tools):
        rollouts.append(FixedRollouts(prompt_token_ids, texts, masked))
        return rollouts[-1]

    class Gradients(TrainerCallback):
        def on_pre_optimizer_step(self, args, state, control, model=None, **kwargs):
            seen["gradients"] = {
                name: parameter.grad.clone() for name, parameter in model.named_parameters() if parameter.requires_grad
            }

    original_run_trainer, shared = trainer_module.run_trainer, grpo.shared_prompt_logps
    trl_forward, compute_loss = GRPOTrainer._get_per_token_logps_and_entropies, GRPOTrainer._compute_loss

    def run_trainer(trainer, resume_from, num_examples):
        generator = torch.Generator().manual_seed(1)
        with torch.no_grad():
            for parameter in trainer.model.parameters():
                if parameter.requires_grad:
                    parameter.add_(0.1 * torch.randn(parameter.shape, generator=generator))
        trainer.add_callback(Gradients())
        return original_run_trainer(trainer, resume_from, num_examples)

    def counting_shared(*arguments, **keywords):
        seen["shared"] += 1
        return shared(*arguments, **keywords)

    def counting_trl_forward(*arguments, **keywords):
        seen["trl_forward"] += 1
        return trl_forward(*arguments, **keywords)

    def recording_loss(self, model, inputs):
        loss = compute_loss(self, model, inputs)
        seen["losses"].append(loss.detach().clone())
        seen["inputs"].append(inputs)
        return loss

    with monkeypatch.context() as patch:
        patch.setattr(grpo, "BackendRollouts", fixed_rollouts)
        patch.setattr(grpo, "shared_prompt_logps", counting_shared)
        patch.setattr(trainer_module, "run_trainer", run_trainer)
        patch.setattr(GRPOTrainer, "_get_per_token_logps_and_entropies", counting_trl_forward)
        patch.setattr(GRPOTrainer, "_compute_loss", recording_loss)
        metrics = grpo.train(
            run,
            num_generations=len(texts),
            beta=0.04,
            loss="dapo",
            sampling=SAMPLING,
            rewards=REWARDS,
            judges=judges(),
            reasoning=REASONING,
            rollouts="hf",
        )
    assert metrics["global_step"] == 1 and len(seen["losses"]) == 1 and len(rollouts[0].outputs) == 1
    saved = "adapter_model.safetensors" if weights == "lora" else "model.safetensors"
    seen["weights"] = load_file(str(folder / "adapter" / saved))
    seen["rewards"] = [
        entry["rewards/correct/mean"] for entry in metrics["log_history"] if "rewards/correct/mean" in entry
    ]
    return seen


def assert_same(first: dict, second: dict) -> None:
    import torch

    assert torch.equal(first["losses"][0], second["losses"][0]), (first["losses"], second["losses"])
    assert first["gradients"].keys() == second["gradients"].keys()
    for name, gradient in first["gradients"].items():
        assert torch.equal(gradient, second["gradients"][name]), name
    assert first["weights"].keys() == second["weights"].keys()
    for name, weight in first["weights"].items():
        assert torch.equal(weight, second["weights"][name]), name


def differ(first: dict, second: dict) -> bool:
    import torch

    return (
        not torch.equal(first["losses"][0], second["losses"][0])
        and any(not torch.equal(gradient, second["gradients"][name]) for name, gradient in first["gradients"].items())
        and any(not torch.equal(weight, second["weights"][name]) for name, weight in first["weights"].items())
    )


@pytest.mark.parametrize("weights", ["lora", "full"])
def test_grpo_trains_on_none_of_a_tools_output(local_checkpoints, tmp_path, monkeypatch, weights):
    """A group of two rollouts, one right (reward 1) and one wrong (0): the same loss, gradients and weights after
    the step whatever the tools wrote, through the project's shared-prompt forward; without the mask, not."""
    import torch

    real = [transcript("37*84", "3108", "3108"), transcript("37*8", "296", "296")]
    other = [transcript("37*84", "9999", "3108"), transcript("37*8", "111", "296")]

    def step(name, texts, masked):
        return grpo_step(local_checkpoints, weights, tmp_path, monkeypatch, name, texts, masked)

    masked = step("real", real, masked=True)
    assert masked["rewards"] == [0.5], "one right answer of two: the advantages are not 0"
    # the policy's and the reference's log-probabilities came from the project's shared-prompt forward, never TRL's
    assert masked["shared"] >= 2 and masked["trl_forward"] == 0
    gradients = masked["gradients"]
    assert gradients and all(("lora_" in name) == (weights == "lora") for name in gradients)
    assert any(gradient.abs().sum() > 0 for gradient in gradients.values())
    assert_same(masked, step("other", other, masked=True))

    plain, plain_other = step("real-unmasked", real, masked=False), step("other-unmasked", other, masked=False)
    assert differ(plain, plain_other)

    # TRL took env_mask as its tool mask: the loss mask leaves out exactly each output block's tokens
    inputs, plain_inputs = masked["inputs"][0], plain["inputs"][0]
    loss_mask = inputs["completion_mask"] * inputs["tool_mask"]
    assert torch.equal(plain_inputs["completion_mask"] * plain_inputs["tool_mask"], plain_inputs["completion_mask"])
    for row in range(len(real)):
        ids = inputs["completion_ids"][row][inputs["completion_mask"][row] == 1].tolist()
        text = next(text for text in real if len(text) + 1 == len(ids))
        start, end = output_span(text)
        removed = (inputs["completion_mask"][row] - loss_mask[row]).nonzero().flatten().tolist()
        assert removed == list(range(start, end))


def recording_rollouts(monkeypatch) -> dict[str, list]:
    """What a GRPO run's hf rollouts return (``rollouts``), the samplers that returned them, and the batches TRL's
    loss took (``inputs``), recorded as the run goes."""
    from trl import GRPOTrainer

    from snakeskills.training import rollouts

    recorded: dict[str, list] = {"rollouts": [], "inputs": [], "samplers": []}
    call, compute_loss = rollouts.BackendRollouts.__call__, GRPOTrainer._compute_loss

    def recording_call(self, prompts, trainer):
        output = call(self, prompts, trainer)
        recorded["rollouts"].append(output)
        recorded["samplers"].append(self)
        return output

    def recording_loss(self, model, inputs):
        recorded["inputs"].append(inputs)
        return compute_loss(self, model, inputs)

    monkeypatch.setattr(rollouts.BackendRollouts, "__call__", recording_call)
    monkeypatch.setattr(GRPOTrainer, "_compute_loss", recording_loss)
    return recorded


def tool_round(tmp_path, model, after_problem: str, *, max_length: int, **formatting) -> RoundRun:
    """A LoRA GRPO round from ``model`` on two arithmetic problems (each asked as itself and ``after_problem``) whose
    answers take one and two calls; ``formatting``: how its prompts render (``RoundRun``'s chat fields)."""
    problems = [
        {"id": "p0", "problem": "12*3", "expected_answer": "36", "benchmark": "arithmetic"},
        {"id": "p1", "problem": "7*8+1", "expected_answer": "57", "benchmark": "arithmetic"},
    ]
    asked = [
        problem | {"prompt": [{"role": "user", "content": problem["problem"] + after_problem}]} for problem in problems
    ]
    write_jsonl(tmp_path / "problems.jsonl", asked)
    return RoundRun(
        weights="lora",
        base_model_path=str(model),
        data_path=str(tmp_path / "problems.jsonl"),
        output_dir=str(tmp_path / "adapter"),
        lora={"r": 4, "alpha": 8, "dropout": 0.0, "target_modules": "all-linear"},
        training=training_section(num_epochs=1, learning_rate=1e-3, batch_size=8, max_length=max_length),
        chat_template_kwargs={},
        seed=0,
        threads=1,
        dtype="auto",
        trust_remote_code=False,
        **formatting,
    )


def assert_trl_took_the_tool_mask(recorded: dict, output: dict) -> None:
    """TRL's loss took each completion's ``env_mask`` as its tool mask (rows shuffled, padded with 1 after the
    completion)."""
    (inputs,) = recorded["inputs"]
    masks = {tuple(ids): mask for ids, mask in zip(output["completion_ids"], output["env_mask"], strict=True)}
    for ids, completion_mask, tool_mask in zip(
        inputs["completion_ids"], inputs["completion_mask"], inputs["tool_mask"], strict=True
    ):
        length = int(completion_mask.sum())
        assert tool_mask[:length].tolist() == masks[tuple(ids[:length].tolist())]


def runs(mask: list[int]) -> list[tuple[int, int]]:
    """The ``[start, end)`` runs of 0 in ``mask``."""
    found, start = [], None
    for position, bit in enumerate([*mask, 1]):
        if bit == 0 and start is None:
            start = position
        elif bit == 1 and start is not None:
            found.append((start, position))
            start = None
    return found


def test_tool_rollouts_mask_exactly_the_tools_tokens(tool_caller, tmp_path, monkeypatch):
    """A real GRPO step whose hf rollouts call the calculator (``grpo.train`` with ``tools``): each completion is
    the model's tokens and the calculator's output blocks interleaved, ``env_mask`` 0 on exactly the blocks (the
    transcript's ``tool_output_spans``), the blocks hold what the calculator returns for the model's calls, the
    sampling log-probabilities are 0.0 there, and TRL's batch and rewards take all of it."""
    from transformers import AutoTokenizer

    from snakeskills.settings.tools import Tools
    from snakeskills.tools.registry import new_session

    tokenizer = AutoTokenizer.from_pretrained(tool_caller)
    run = tool_round(tmp_path, tool_caller, "=", max_length=96, chat_template=False)
    recorded = recording_rollouts(monkeypatch)
    rewards = {**REWARDS, "tool_calls": 0.1, "tool_seconds": -0.1}
    sampling = {**SAMPLING, "temperature": 0.5}
    metrics = grpo.train(
        run,
        num_generations=4,
        beta=0.04,
        loss="dapo",
        sampling=sampling,
        rewards=rewards,
        judges=judges(),
        reasoning=REASONING,
        rollouts="hf",
        tools=Tools.filled(TOOLS, "tools").to_dict(),
    )
    assert metrics["global_step"] == 1 and len(recorded["rollouts"]) == 1
    output = recorded["rollouts"][0]
    # every completion's ids decode to the transcript the reward judged (and the EOS that ended it), counted
    assert (recorded["samplers"][0].completions, recorded["samplers"][0].mismatches) == (8, 0)
    for ids, text in zip(output["completion_ids"], output["transcript"], strict=True):
        assert tokenizer.decode(ids, skip_special_tokens=False) in (text, text + tokenizer.eos_token)
    calculator = new_session(Tools.filled({"tool": "calculator"}, "tools"))
    rows = len(output["completion_ids"])
    assert rows == 8
    for key in ("prompt_ids", "logprobs", "env_mask", "transcript", "tool_output_spans", "tool_calls"):
        assert len(output[key]) == rows, key
    for row in range(rows):
        ids, mask, logprobs = output["completion_ids"][row], output["env_mask"][row], output["logprobs"][row]
        text, spans = output["transcript"][row], output["tool_output_spans"][row]
        assert len(mask) == len(logprobs) == len(ids) and set(mask) <= {0, 1}
        assert tokenizer.decode(ids, skip_special_tokens=True) == text, "the transcript is the completion's text"
        assert output["tool_calls"][row] == len(spans) == len(runs(mask)) == text.count("<out>")
        assert output["model_tokens"][row] == sum(mask) <= sampling["max_new_tokens"]
        assert output["tool_seconds"][row] >= 0
        assert all(value == 0.0 for value, bit in zip(logprobs, mask, strict=True) if not bit)
        assert all(value <= 0.0 for value in logprobs)
        model_end = 0
        for (start, end), (span_start, span_end) in zip(runs(mask), spans, strict=True):
            block = text[span_start:span_end]
            # the zeros are exactly the block's tokens: the loop's output tags and what the calculator printed
            assert tokenizer.decode(ids[start:end]) == block
            assert block.startswith("<out>") and block.endswith("</out>")
            # the model's tokens before it end with its call, whose output it is
            written = tokenizer.decode(ids[model_end:start])
            assert written.endswith("</calc>") and "<calc>" in written
            expression = written[written.rindex("<calc>") + len("<calc>") : -len("</calc>")]
            assert block == f"<out>{calculator.call(expression).output}</out>"
            model_end = end
        assert ids[-1] != tokenizer.eos_token_id or mask[-1] == 1, "the model's own EOS is in the loss"
    # the model really called the calculator, once or twice as it learned
    calls = output["tool_calls"]
    assert sum(calls) >= rows and max(calls) >= 2, calls
    assert any("\\boxed{57}" in text for text in output["transcript"])

    assert_trl_took_the_tool_mask(recorded, output)
    # the rewards read the rollouts' extras: the calls and the tool's time as they were
    (logged,) = [entry for entry in metrics["log_history"] if "rewards/tool_calls/mean" in entry]
    assert logged["rewards/tool_calls/mean"] == pytest.approx(sum(calls) / rows)
    assert logged["rewards/tool_seconds/mean"] == pytest.approx(sum(output["tool_seconds"]) / rows, abs=1e-6)


def test_rewards_read_the_rollouts_tool_extras():
    """``JudgeRewards``' terms as TRL calls them with the tool rollouts' extras (one list per key, every term the
    same lists): ``correct`` and ``answer_format`` judge the transcript after its last tool output (a tool output
    that holds the right answer earns nothing), ``length`` counts the model's tokens, ``tool_calls`` and
    ``tool_seconds`` are the rollouts' own, ``tool_cost`` their price and ``tool_preference`` the preference's reward
    per call of each tool; without the extras, the whole completion is judged."""
    from snakeskills.training.grpo import JudgeRewards

    right = transcript("37*84", "3108", "3108")
    printed = "<calc>print('\\boxed{3108}')</calc><out>\\boxed{3108}</out>so it is 31"  # the tool's answer only
    after_wrong = transcript("37*84", "3108", "3100")
    texts = [right, printed, after_wrong]
    extras = {
        "transcript": texts,
        "tool_output_spans": [[output_span(text)] for text in texts],
        "tool_calls": [1, 2, 3],
        "tool_seconds": [0.25, 0.0, 1.5],
        "model_tokens": [24, 12, 6],
        "tool_cost": [0.01, 0.02, 0.03],
        "tool_call_log": [[{"tool": "calculator", "cost": 0.01}], [{"tool": "calculator", "cost": 0.01}] * 2, []],
    }
    row = [json.dumps({"id": "p0", "problem": "37*84", "expected_answer": "3108", "benchmark": "arithmetic"})] * 3
    completion_ids = [[0] * 40] * 3  # the tools' tokens too: length must not count them
    rewards = JudgeRewards(judges(), REASONING, max_new_tokens=48, num_workers=1, tool_preference={"calculator": 0.5})
    correct, answer_format, length, tool_calls, tool_seconds, tool_cost, tool_preference = rewards.functions()

    def score(function, completions, **keywords):
        return function(
            prompts=[PROMPT] * 3, completions=completions, completion_ids=completion_ids, row=row, **keywords
        )

    assert score(correct, texts, **extras) == [1.0, 0.0, 0.0]
    assert score(answer_format, texts, **extras) == [1.0, 0.0, 1.0]
    assert score(length, texts, **extras) == [0.5, 0.25, 0.125]
    assert score(tool_calls, texts, **extras) == [1.0, 2.0, 3.0]
    assert score(tool_seconds, texts, **extras) == [0.25, 0.0, 1.5]
    assert score(tool_cost, texts, **extras) == [0.01, 0.02, 0.03]
    assert score(tool_preference, texts, **extras) == [0.5, 1.0, 0.0]
    # the same texts without the extras (no tools): judged whole, the tool's printed answer counts
    plain = JudgeRewards(judges(), REASONING, max_new_tokens=48, num_workers=1).functions()
    assert score(plain[0], list(texts)) == [1.0, 1.0, 0.0]
    assert score(plain[2], list(texts)) == [40 / 48] * 3
    assert all(score(term, list(texts)) == [0.0] * 3 for term in plain[3:])
