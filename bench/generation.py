"""HF backend: batched generation against one-by-one ``generate``, tokens/s of each and the ratio.

Usage: python bench/generation.py [--prompts 256] [--batch-size 256] [--device auto]
       [--output bench/results/generation-<device>.json]

Builds the embedded default's tiny Llama architecture (hidden 128, 2 layers, char tokenizer) with
random weights and samples ``--prompts`` arithmetic prompts with per-row seeds, once in batches of
``--batch-size`` (left-padded) and once one prompt at a time. Both runs use the same backend code,
so they produce the same samples; only the batching differs. Runs on CUDA when one is available.
"""

from __future__ import annotations

import argparse
import json
import platform
import tempfile
import time
from pathlib import Path

from snakeskills.backends import SamplingParams, build_request
from snakeskills.backends.hf import HFBackend
from snakeskills.data.synthetic import arithmetic_splits
from snakeskills.generate import row_seed

PROMPT = {"system": None, "user": "{problem}=", "examples": "", "chat_template": False, "stop": []}

REPO = Path(__file__).resolve().parent.parent


def timed(backend: HFBackend, requests, sampling) -> tuple[float, int, list]:
    start = time.perf_counter()
    results = backend.generate(requests, sampling)
    if backend.device.startswith("cuda"):
        import torch

        torch.cuda.synchronize()
    return time.perf_counter() - start, sum(result.num_generated_tokens for result in results), results


def main() -> None:
    import torch

    from snakeskills.tiny_model import build_char_tokenizer, build_tiny_llama

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--prompts", type=int, default=256)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--max-new-tokens", type=int, default=12)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--output", type=Path, default=None)
    arguments = parser.parse_args()

    records = arithmetic_splits(operations=["+"], max_operand=99, split_sizes={"test": arguments.prompts}, seed=0)[
        "test"
    ]
    sampling = SamplingParams(temperature=1.0, top_p=1.0, top_k=0, max_new_tokens=arguments.max_new_tokens)
    with tempfile.TemporaryDirectory() as folder:
        tokenizer = build_char_tokenizer()
        model = build_tiny_llama(tokenizer, hidden_size=128, num_layers=2, num_heads=4, seed=0, max_positions=64)
        model.save_pretrained(folder)
        tokenizer.save_pretrained(folder)
        batched = HFBackend(
            model_path=folder, device=arguments.device, batch_size=arguments.batch_size, threads=arguments.threads
        )
        single = HFBackend(model_path=folder, device=arguments.device, batch_size=1, threads=arguments.threads)
        requests = [build_request(batched, PROMPT, record, row_seed(0, record["id"])) for record in records]
        timed(batched, requests[:8], sampling)  # warm-up
        timed(single, requests[:2], sampling)
        batched_seconds, batched_tokens, batched_results = timed(batched, requests, sampling)
        single_seconds, single_tokens, single_results = timed(single, requests, sampling)
    same = sum(a.generation == b.generation for a, b in zip(batched_results, single_results, strict=True))
    device = batched.device
    figures = {
        "machine": f"{platform.machine()}, torch {torch.__version__}, {arguments.threads} threads",
        "device": torch.cuda.get_device_name(0) if device.startswith("cuda") else "cpu",
        "prompts": arguments.prompts,
        "batch_size": arguments.batch_size,
        "max_new_tokens": arguments.max_new_tokens,
        "batched_seconds": round(batched_seconds, 3),
        "batched_tokens_per_second": round(batched_tokens / batched_seconds, 1),
        "one_by_one_seconds": round(single_seconds, 3),
        "one_by_one_tokens_per_second": round(single_tokens / single_seconds, 1),
        "speedup": round((batched_tokens / batched_seconds) / (single_tokens / single_seconds), 1),
        "identical_samples": f"{same}/{len(requests)}",
    }
    output = (
        arguments.output or REPO / f"bench/results/generation-{'cuda' if device.startswith('cuda') else 'cpu'}.json"
    )
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(figures, indent=2) + "\n")
    for key, value in figures.items():
        print(f"{key:32s} {value}")


if __name__ == "__main__":
    main()
