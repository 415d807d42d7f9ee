"""SFT throughput: a LoRA against a full fine-tune of the same model on the same examples.

Usage: python bench/sft.py [--examples 128] [--epochs 1] [--batch-size 16] [--device auto]
       [--output bench/results/sft-<device>.json]

Three runs: ``lora`` (``model.dtype: auto``: the frozen base in float32 on a CPU, bfloat16 on a GPU that has it,
as ``snakeskills.models.loading``' FROZEN_BASE policy says), ``lora-bf16`` (``model.dtype: bfloat16``: the base in
bfloat16, which is what a LoRA got on every device before that policy) and ``full``.

Both runs go through the product's own path (``snakeskills.training.sft.train``, as the sft rule calls it) on
SmolLM2-135M-Instruct (the packaged real model, converted once per machine): chat-template prompts of
2-digit additions with a one-line worked answer, ``sft.lora`` r 16 / alpha 32 on all linear layers against
``sft.method: full`` (float32 weights, saved in bfloat16). Each method runs in its own process, so the peak
resident memory (CPU) or peak allocated GPU memory is that method's alone. Reported: wall time of the
training call (model load, tokenization, training and save), the Trainer's samples/s and steps/s,
trained tokens/s, trainable parameters, the saved size, the peak memory and the final training loss.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from chat_prompt import generic_math_chat_prompt

REPO = Path(__file__).resolve().parent.parent
# variant: (sft.method, model.dtype)
VARIANTS = {"lora": ("lora", "auto"), "lora-bf16": ("lora", "bfloat16"), "full": ("full", "auto")}
LORA = {"r": 16, "alpha": 32, "dropout": 0.0, "target_modules": "all-linear"}


def write_examples(path: Path, count: int) -> None:
    from snakeskills.io import write_jsonl
    from snakeskills.prompts import build_messages

    prompt = generic_math_chat_prompt()
    rng = random.Random(0)
    records = []
    for index in range(count):
        a, b = rng.randint(10, 99), rng.randint(10, 99)
        record = {"problem": f"{a}+{b}"}
        answer = f"{a} + {b} = {a + b}. The answer is \\boxed{{{a + b}}}."
        messages = [*build_messages(prompt, record), {"role": "assistant", "content": answer}]
        records.append({"id": f"p{index}", "messages": messages})
    write_jsonl(path, records)


def train_one(variant: str, data: str, epochs: float, batch_size: int, device: str) -> dict:
    """One training run in this process; returns its figures."""
    import torch

    from snakeskills.models.pretrained import packaged_model_folder
    from snakeskills.plan.config import default_config
    from snakeskills.training.rounds import RoundRun
    from snakeskills.training.sft import tokenize_prompt_completion
    from snakeskills.training.sft import train as train_sft

    method, dtype = VARIANTS[variant]
    model = str(packaged_model_folder("smollm2-135m-instruct"))
    with tempfile.TemporaryDirectory(prefix="snakeskills-bench-sft-") as scratch:
        output = Path(scratch) / "tuned"
        start = time.perf_counter()
        metrics = train_sft(
            RoundRun(
                weights=method,
                base_model_path=model,
                data_path=data,
                output_dir=output,
                lora=LORA if method == "lora" else None,
                training={
                    **default_config()["sft"]["training"],
                    **{"num_epochs": epochs, "learning_rate": 1e-4, "batch_size": batch_size, "max_length": 256},
                },
                chat_template=True,
                chat_template_kwargs={},
                seed=0,
                threads=len(os.sched_getaffinity(0)),
                dtype=dtype,
                trust_remote_code=False,
            )
        )
        wall = time.perf_counter() - start
        saved_bytes = sum(path.stat().st_size for path in output.iterdir() if path.suffix == ".safetensors")
    from transformers import AutoTokenizer

    from snakeskills.io import iter_jsonl
    from snakeskills.training.sft import to_prompt_completion

    tokenizer = AutoTokenizer.from_pretrained(model)
    examples = [
        to_prompt_completion(record, chat_template=True, chat_template_kwargs={}, tokenizer=tokenizer)
        for record in iter_jsonl(data)
    ]
    tokens = sum(len(row["input_ids"]) for row in tokenize_prompt_completion(tokenizer, examples, 256))
    on_gpu = torch.cuda.is_available()
    return {
        "method": method,
        "model_dtype": dtype,
        "wall_seconds": round(wall, 2),
        "train_seconds": metrics["train_runtime"],
        "samples_per_second": metrics["train_samples_per_second"],
        "steps_per_second": metrics["train_steps_per_second"],
        "tokens_per_second": round(tokens * epochs / metrics["train_runtime"], 1),
        "train_loss": round(metrics["train_loss"], 4),
        "global_step": metrics["global_step"],
        "saved_megabytes": round(saved_bytes / 2**20, 1),
        "peak_memory_megabytes": round(
            torch.cuda.max_memory_allocated() / 2**20
            if on_gpu
            else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            1,
        ),
        "peak_memory_kind": "cuda max_memory_allocated" if on_gpu else "process max RSS",
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--examples", type=int, default=128)
    parser.add_argument("--epochs", type=float, default=1.0)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    parser.add_argument("--output", type=Path)
    parser.add_argument("--one", choices=list(VARIANTS), help=argparse.SUPPRESS)  # the child run
    parser.add_argument("--data", help=argparse.SUPPRESS)
    arguments = parser.parse_args()
    if arguments.one:
        print(
            json.dumps(
                train_one(arguments.one, arguments.data, arguments.epochs, arguments.batch_size, arguments.device)
            )
        )
        return

    import torch

    device = "cuda" if arguments.device == "auto" and torch.cuda.is_available() else arguments.device
    device = "cpu" if device == "auto" else device
    output = arguments.output or REPO / "bench" / "results" / f"sft-{device}.json"
    runs = {}
    with tempfile.TemporaryDirectory(prefix="snakeskills-bench-sft-data-") as scratch:
        data = Path(scratch) / "data.jsonl"
        write_examples(data, arguments.examples)
        for method in VARIANTS:
            command = [sys.executable, __file__, "--one", method, "--data", str(data), "--device", device]
            command += ["--epochs", str(arguments.epochs), "--batch-size", str(arguments.batch_size)]
            # on CPU the child sees no GPU: the Trainer picks CUDA whenever it sees one
            environment = {**os.environ, **({"CUDA_VISIBLE_DEVICES": ""} if device == "cpu" else {})}
            process = subprocess.run(command, capture_output=True, text=True, env=environment)
            if process.returncode != 0:
                sys.exit(f"{method} run failed:\n{process.stderr[-3000:]}")
            runs[method] = json.loads(process.stdout.strip().splitlines()[-1])
            print(method, runs[method], flush=True)
    result = {
        "device": torch.cuda.get_device_name() if device == "cuda" else f"cpu ({len(os.sched_getaffinity(0))} cores)",
        "model": "SmolLM2-135M-Instruct",
        "examples": arguments.examples,
        "epochs": arguments.epochs,
        "batch_size": arguments.batch_size,
        "lora": LORA,
        "runs": runs,
        "full_over_lora": {
            "samples_per_second": round(runs["full"]["samples_per_second"] / runs["lora"]["samples_per_second"], 2),
            "peak_memory": round(runs["full"]["peak_memory_megabytes"] / runs["lora"]["peak_memory_megabytes"], 2),
        },
        "lora_auto_over_lora_bf16": {
            "samples_per_second": round(
                runs["lora"]["samples_per_second"] / runs["lora-bf16"]["samples_per_second"], 2
            ),
        },
    }
    output.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({key: result[key] for key in ("full_over_lora", "lora_auto_over_lora_bf16")}))


if __name__ == "__main__":
    main()
