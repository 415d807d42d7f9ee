"""DPO throughput: the reference model scored in every step against scored once before training.

Usage: python bench/dpo.py [--pairs 32] [--epochs 2] [--batch-size 16] [--repeats 2] [--variants ...]
       [--device auto] [--output bench/results/dpo-<device>.json]

Variants, each through the product's own path (``snakeskills.training.dpo.train``, as the dpo rule calls it) on
SmolLM2-135M-Instruct (the packaged real model, converted once per machine) with a LoRA r 16 / alpha 32 on all
linear layers, ``nll_weight`` 1, max_length 256, on the same pairs:
- ``precomputed`` (``dpo.precompute_reference: true``, the default): one reference forward per pair before the
  first step (TRL's ``precompute_ref_log_probs``), none in the steps;
- ``per-step`` (``dpo.precompute_reference: false``): the reference's forward (the policy with its adapter off)
  in every step of every epoch;
- ``per-step-all-positions``: ``per-step`` with TRL's own fused LM head, which on a CPU projects every position
  (prompt and padding too) onto the 49,152-token vocabulary, not only the answers' tokens
  (``trainer.completion_positions_only`` switched off in dpo): what a DPO step cost before.

The pairs: chat-template prompts (generic-math) of 2-digit products, the chosen answer a one-line worked answer,
the rejected one a wrong repeated-addition answer of 1 to 8 terms (answers of 20 to 80 tokens, as a real round's
48-token samples and longer). Each run is its own process; the variants run interleaved (A B C A B C ...), so load
from other work on the machine hits all of them alike. Reported per run: ``pairs_per_second`` = pairs x epochs /
(the precompute's seconds + the Trainer's train_runtime), the Trainer's own samples/s (steps only), the
precompute's seconds, seconds per step, the whole train call's wall time (model load and save included) and the
final training loss; per variant the median, and the ratios of the medians against ``per-step`` and against
``per-step-all-positions``.
"""

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
VARIANTS = ("precomputed", "per-step", "per-step-all-positions")
LORA = {"r": 16, "alpha": 32, "dropout": 0.0, "target_modules": "all-linear"}


def write_pairs(path: Path, count: int) -> None:
    from snakeskills.io import write_jsonl
    from snakeskills.prompts import build_messages

    prompt = generic_math_chat_prompt()
    rng = random.Random(0)
    records = []
    for index in range(count):
        a, b = rng.randint(10, 99), rng.randint(10, 99)
        chosen = f"{a} * {b} = {a * b}. The answer is \\boxed{{{a * b}}}."
        terms = " + ".join([str(a)] * rng.randint(1, 8))
        wrong = a * b + rng.randint(1, 50)
        rejected = f"To multiply {a} by {b}, I add {a} {b} times: {terms} = {wrong}. The answer is \\boxed{{{wrong}}}."
        records.append(
            {
                "id": f"p{index}",
                "prompt": build_messages(prompt, {"problem": f"{a}*{b}"}),
                "chosen": [{"role": "assistant", "content": chosen}],
                "rejected": [{"role": "assistant", "content": rejected}],
            }
        )
    write_jsonl(path, records)


def train_one(variant: str, data: str, epochs: float, batch_size: int) -> dict:
    """One training run in this process; returns its figures."""
    import contextlib

    from trl import DPOTrainer

    from snakeskills.models.pretrained import packaged_model_folder
    from snakeskills.plan.config import default_config
    from snakeskills.training import dpo
    from snakeskills.training.rounds import RoundRun

    if variant == "per-step-all-positions":
        dpo.completion_positions_only = contextlib.nullcontext
    precompute_seconds = []
    precompute = DPOTrainer._precompute_ref_logps

    def timed_precompute(self, *args, **kwargs):
        start = time.perf_counter()
        try:
            return precompute(self, *args, **kwargs)
        finally:
            precompute_seconds.append(time.perf_counter() - start)

    DPOTrainer._precompute_ref_logps = timed_precompute
    model = str(packaged_model_folder("smollm2-135m-instruct"))
    training = {
        **default_config()["sft"]["training"],
        **{"num_epochs": epochs, "learning_rate": 5e-4, "batch_size": batch_size, "max_length": 256},
        "checkpoint_minutes": 0,
    }
    with tempfile.TemporaryDirectory(prefix="snakeskills-bench-dpo-") as scratch:
        start = time.perf_counter()
        metrics = dpo.train(
            RoundRun(
                weights="lora",
                base_model_path=model,
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
            ),
            beta=0.1,
            loss="sigmoid",
            nll_weight=1.0,
            precompute_reference=variant == "precomputed",
        )
        wall = time.perf_counter() - start
    pairs_trained = metrics["num_examples"] * epochs
    seconds = sum(precompute_seconds) + metrics["train_runtime"]
    return {
        "pairs_per_second": round(pairs_trained / seconds, 4),
        "trainer_samples_per_second": metrics["train_samples_per_second"],
        "precompute_seconds": round(sum(precompute_seconds), 2),
        "train_seconds": round(metrics["train_runtime"], 2),
        "seconds_per_step": round(metrics["train_runtime"] / metrics["global_step"], 2),
        "wall_seconds": round(wall, 2),
        "global_step": metrics["global_step"],
        "train_loss": round(metrics["train_loss"], 6),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", type=int, default=32)
    parser.add_argument("--epochs", type=float, default=2.0)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=2, help="runs of each variant, interleaved")
    parser.add_argument("--variants", nargs="+", choices=VARIANTS, default=list(VARIANTS))
    parser.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    parser.add_argument("--output", type=Path)
    parser.add_argument("--one", choices=VARIANTS, help=argparse.SUPPRESS)  # the child run
    parser.add_argument("--data", help=argparse.SUPPRESS)
    arguments = parser.parse_args()
    if arguments.one:
        print(json.dumps(train_one(arguments.one, arguments.data, arguments.epochs, arguments.batch_size)))
        return

    import torch

    device = "cuda" if arguments.device == "auto" and torch.cuda.is_available() else arguments.device
    device = "cpu" if device == "auto" else device
    output = arguments.output or REPO / "bench" / "results" / f"dpo-{device}.json"
    runs: dict[str, list[dict]] = {variant: [] for variant in arguments.variants}
    header = f"{'variant':<24} {'pairs/s':>8} {'trainer/s':>9} {'precompute s':>12} {'s/step':>7} {'wall s':>7}"
    print(f"{header} {'loss':>9}")
    with tempfile.TemporaryDirectory(prefix="snakeskills-bench-dpo-data-") as scratch:
        data = Path(scratch) / "pairs.jsonl"
        write_pairs(data, arguments.pairs)
        for _repeat in range(arguments.repeats):
            for variant in arguments.variants:
                command = [sys.executable, __file__, "--one", variant, "--data", str(data)]
                command += ["--epochs", str(arguments.epochs), "--batch-size", str(arguments.batch_size)]
                # on CPU the child sees no GPU: the Trainer picks CUDA whenever it sees one
                environment = {**os.environ, **({"CUDA_VISIBLE_DEVICES": ""} if device == "cpu" else {})}
                process = subprocess.run(command, capture_output=True, text=True, env=environment)
                if process.returncode != 0:
                    sys.exit(f"{variant} run failed:\n{process.stderr[-3000:]}")
                run = json.loads(process.stdout.strip().splitlines()[-1])
                runs[variant].append(run)
                print(
                    f"{variant:<24} {run['pairs_per_second']:>8.4f} {run['trainer_samples_per_second']:>9.4f} "
                    f"{run['precompute_seconds']:>12.1f} {run['seconds_per_step']:>7.1f} {run['wall_seconds']:>7.1f} "
                    f"{run['train_loss']:>9.5f}",
                    flush=True,
                )
    median = {variant: statistics.median(run["pairs_per_second"] for run in runs[variant]) for variant in runs}
    ratios = {
        f"{variant}_over_{base}": round(median[variant] / median[base], 2)
        for base in ("per-step", "per-step-all-positions")
        if base in median
        for variant in median
        if variant != base
    }
    result = {
        "device": torch.cuda.get_device_name() if device == "cuda" else f"cpu ({len(os.sched_getaffinity(0))} cores)",
        "model": "SmolLM2-135M-Instruct",
        "pairs": arguments.pairs,
        "epochs": arguments.epochs,
        "batch_size": arguments.batch_size,
        "lora": LORA,
        "command": " ".join(["python", "bench/dpo.py", *sys.argv[1:]]),
        "load_average_after": os.getloadavg()[0],
        "runs": runs,
        "median_pairs_per_second": {variant: round(value, 4) for variant, value in median.items()},
        "ratios": ratios,
    }
    output.write_text(json.dumps(result, indent=2) + "\n")
    print("median pairs/s:", json.dumps(result["median_pairs_per_second"]))
    print("ratios:", json.dumps(ratios))


if __name__ == "__main__":
    main()
