"""GRPO's rollouts: the project's decoding loop (grpo.rollouts hf) against TRL's own generate (grpo.rollouts trl).

Usage: python bench/grpo.py [--steps 6] [--repeats 2] [--problems 64] [--max-new-tokens 48]
       [--variants hf trl trl-stock] [--device cpu|cuda] [--output bench/results/grpo-<device>.json]

The same GRPO run both ways, through the product's own path (``snakeskills.training.rounds.train_round``, as the
grpo rule calls it): SmolLM2-135M-Instruct (the packaged real model, converted once per machine), a LoRA r 16 /
alpha 32 on all linear layers, chat-template prompts of 2-digit additions (the generic-math prompt), 4 completions
of up to ``--max-new-tokens`` tokens per problem, 16 completions a step, temperature 1, the arithmetic judge's
reward; only grpo.rollouts differs between ``hf`` and ``trl``; ``trl-stock`` is ``trl`` with TRL's own forwards
(GRPO as TRL runs it). ``hf-steps2`` is ``hf`` with grpo.steps_per_generation 2 (one sampling of 32 completions
serves two steps), ``hf-iterations2`` with grpo.num_iterations 2 (each sampled batch trains two steps): what reusing
a sampling saves (``--variants hf hf-steps2 hf-iterations2``). Each run is its own process and the variants
alternate (hf, trl, trl-stock, hf, ...), so load on the machine hits all alike. Reported per run: seconds per step
and completions per second of the trainer (its train_runtime: sampling, reference and policy forwards, backward,
judge; not the model load), and the mean reward of each step; per variant the median; the ratios of hf over the
others."""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from chat_prompt import generic_math_chat_prompt

REPO = Path(__file__).resolve().parent.parent
# grpo.rollouts, and trl-stock: TRL's generate and TRL's own forwards (each prompt of a group computed again, every
# position projected onto the vocabulary on a CPU), GRPO as TRL runs it
VARIANTS = ("hf", "trl", "trl-stock")
# grpo.rollouts hf with a sampling reused: its grpo options
REUSE = {"hf-steps2": {"steps_per_generation": 2}, "hf-iterations2": {"num_iterations": 2}}
# SmolLM2 seldom writes \boxed{}: its reward reads a number as the shipped SmolLM2 examples' judge.regex does
EXAMPLES_REGEX = r"(-?\d+)"
LORA = {"r": 16, "alpha": 32, "dropout": 0.0, "target_modules": "all-linear"}
GROUP, BATCH = 4, 16


def device_name(device: str) -> str:
    if device == "cuda":
        import torch

        return torch.cuda.get_device_name(0)
    return f"cpu ({len(os.sched_getaffinity(0))} cores)"


def write_problems(path: Path, count: int) -> None:
    from snakeskills.io import write_jsonl
    from snakeskills.prompts import build_messages

    prompt = generic_math_chat_prompt()
    rng = random.Random(0)
    records = []
    for index in range(count):
        a, b = rng.randint(10, 99), rng.randint(10, 99)
        record = {"id": f"p{index}", "problem": f"{a}+{b}", "expected_answer": str(a + b), "benchmark": "arithmetic"}
        records.append({**record, "prompt": build_messages(prompt, record)})
    write_jsonl(path, records)


def stock_trainer() -> None:
    """GRPO's trainer with TRL's own forwards, in this process: what it ran before the project computed a group's
    prompt once and projected only the completions' positions."""
    from trl import GRPOTrainer

    from snakeskills.training import grpo

    project_class = grpo.grpo_trainer_class

    def stock_class():
        class StockForwards(project_class()):
            def _get_per_token_logps_and_entropies(self, *arguments, **keywords):
                return GRPOTrainer._get_per_token_logps_and_entropies(self, *arguments, **keywords)

        return StockForwards

    grpo.grpo_trainer_class = stock_class


def timed_phases() -> dict[str, float]:
    """Seconds spent, summed over the run, in each part of a GRPO step, timed around TRL's methods in this process:
    ``sampling`` (the rollouts: the project's loop or TRL's generate), ``reference`` and ``policy`` (the
    log-probabilities' forwards without and with gradients: the reference's, the policy's; an old policy's would
    count as ``reference``), ``backward``."""
    import functools
    import time

    import torch
    from accelerate import Accelerator
    from trl import GRPOTrainer

    from snakeskills.training import grpo, rollouts

    phases = dict.fromkeys(("sampling", "reference", "policy", "backward"), 0.0)

    def timer(method, phase):
        @functools.wraps(method)
        def timed(*arguments, **keywords):
            start = time.perf_counter()
            try:
                return method(*arguments, **keywords)
            finally:
                name = phase or ("policy" if torch.is_grad_enabled() else "reference")
                phases[name] += time.perf_counter() - start

        return timed

    rollouts.BackendRollouts.__call__ = timer(rollouts.BackendRollouts.__call__, "sampling")
    GRPOTrainer._generate_single_turn = timer(GRPOTrainer._generate_single_turn, "sampling")
    Accelerator.backward = timer(Accelerator.backward, "backward")
    trainer_class = grpo.grpo_trainer_class

    def timed_class():
        chosen = trainer_class()

        class Timed(chosen):
            _get_per_token_logps_and_entropies = timer(chosen._get_per_token_logps_and_entropies, None)

        return Timed

    grpo.grpo_trainer_class = timed_class
    return phases


def train_one(variant: str, data: str, steps: int, max_new_tokens: int) -> dict:
    """One GRPO run in this process; returns its figures."""
    from snakeskills.models.pretrained import packaged_model_folder
    from snakeskills.plan.config import default_config
    from snakeskills.plan.sections import benchmark_judge
    from snakeskills.training.rounds import RoundRun, train_round

    config = default_config()
    training = {
        **config["sft"]["training"],
        **{"num_epochs": 1, "max_steps": steps, "learning_rate": 5e-4, "batch_size": BATCH, "max_length": 512},
    }
    options = {
        "num_generations": GROUP,
        "beta": 0.04,
        "loss": "dapo",
        "sampling": {"temperature": 1.0, "top_p": 1.0, "top_k": 0, "max_new_tokens": max_new_tokens},
        "rewards": {"correct": 1.0, "answer_format": 0.0, "length": 0.0},
        "judges": {"arithmetic": {**benchmark_judge(config, "arithmetic"), "regex": EXAMPLES_REGEX}},
        "reasoning": {"parse_reasoning": False, "end_reasoning_string": "</think>"},
        "rollouts": "hf" if variant in REUSE else variant.removesuffix("-stock"),
        "steps_per_generation": None,
        "num_iterations": 1,
        "vllm_mode": None,
        **REUSE.get(variant, {}),
    }
    if variant == "trl-stock":
        stock_trainer()
    phases = timed_phases()
    with tempfile.TemporaryDirectory(prefix="snakeskills-bench-grpo-") as scratch:
        run = RoundRun(
            weights="lora",
            base_model_path=str(packaged_model_folder("smollm2-135m-instruct")),
            data_path=data,
            output_dir=str(Path(scratch) / "adapter"),
            lora=LORA,
            training=training,
            chat_template=True,
            chat_template_kwargs={},
            seed=0,
            threads=len(os.sched_getaffinity(0)),
            dtype="auto",
            trust_remote_code=False,
        )
        start = time.perf_counter()
        metrics = train_round("grpo", run, options, log_path=Path(scratch) / "train.log")
        wall = time.perf_counter() - start
    steps_done = metrics["global_step"]
    rewards = [round(entry["reward"], 4) for entry in metrics["log_history"] if "reward" in entry]
    lengths = [
        entry["completions/mean_length"] for entry in metrics["log_history"] if "completions/mean_length" in entry
    ]
    return {
        "wall_seconds": round(wall, 1),
        "train_seconds": round(metrics["train_runtime"], 1),
        "steps": steps_done,
        "seconds_per_step": round(metrics["train_runtime"] / steps_done, 2),
        "completions_per_second": round(steps_done * BATCH / metrics["train_runtime"], 3),
        "rewards": rewards,
        "mean_reward": round(statistics.fmean(rewards), 4),
        "mean_completion_tokens": round(statistics.fmean(lengths), 1),
        "phase_seconds_per_step": {phase: round(seconds / steps_done, 2) for phase, seconds in phases.items()},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--problems", type=int, default=64)
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--variants", nargs="+", choices=[*VARIANTS, *REUSE], default=list(VARIANTS))
    parser.add_argument("--output", type=Path)
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu", help="cuda: train and sample on the GPU")
    parser.add_argument("--one", choices=[*VARIANTS, *REUSE], help=argparse.SUPPRESS)  # the child run
    parser.add_argument("--data", help=argparse.SUPPRESS)
    arguments = parser.parse_args()
    if arguments.one:
        print(json.dumps(train_one(arguments.one, arguments.data, arguments.steps, arguments.max_new_tokens)))
        return

    output = arguments.output or REPO / "bench" / "results" / f"grpo-{arguments.device}.json"
    variants = arguments.variants
    runs: dict[str, list[dict]] = {variant: [] for variant in variants}
    with tempfile.TemporaryDirectory(prefix="snakeskills-bench-grpo-data-") as scratch:
        data = Path(scratch) / "problems.jsonl"
        write_problems(data, arguments.problems)
        for _ in range(arguments.repeats):
            for variant in variants:
                command = [sys.executable, __file__, "--one", variant, "--data", str(data)]
                command += ["--steps", str(arguments.steps), "--max-new-tokens", str(arguments.max_new_tokens)]
                environment = {**os.environ, "TRL_EXPERIMENTAL_SILENCE": "1"}
                if arguments.device == "cpu":  # the trainer and the rollouts take a GPU wherever one is visible
                    environment["CUDA_VISIBLE_DEVICES"] = ""
                process = subprocess.run(command, capture_output=True, text=True, env=environment)
                if process.returncode != 0:
                    sys.exit(f"{variant} run failed:\n{process.stderr[-3000:]}")
                runs[variant].append(json.loads(process.stdout.strip().splitlines()[-1]))
                print(variant, runs[variant][-1], flush=True)
    medians = {
        variant: {
            key: statistics.median(run[key] for run in runs[variant])
            for key in ("seconds_per_step", "completions_per_second", "mean_reward")
        }
        for variant in variants
    }
    result = {
        "device": device_name(arguments.device),
        "model": "SmolLM2-135M-Instruct",
        "steps": arguments.steps,
        "completions_per_step": BATCH,
        "max_new_tokens": arguments.max_new_tokens,
        "lora": LORA,
        "runs": runs,
        "medians": medians,
        # the first variant's completions/s over each other's
        "completions_per_second_over": {
            other: round(medians[variants[0]]["completions_per_second"] / medians[other]["completions_per_second"], 2)
            for other in variants[1:]
        },
    }
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({"medians": medians, f"over_{variants[0]}": result["completions_per_second_over"]}))


if __name__ == "__main__":
    main()
