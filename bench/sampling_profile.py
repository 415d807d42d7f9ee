"""Where a sampled hf-backend run spends its time, per dtype: torch.profiler's top operators (device and host
time) of one sampled run on the GPU suite's random Llama (Qwen2.5's vocabulary), after a warm-up.

Usage: python bench/sampling_profile.py [--device cuda] [--rows 64] [--new-tokens 64]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from snakeskills.backends import GenerationRequest, SamplingParams  # noqa: E402
from snakeskills.models.tiny_model import save_random_llama  # noqa: E402
from tests.gpu.test_gpu import ENDING, SHAPE, VOCABULARY, random_hf  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--rows", type=int, default=64)
    parser.add_argument("--new-tokens", type=int, default=64)
    arguments = parser.parse_args()
    ids = torch.randint(1001, VOCABULARY, (arguments.rows, 64), generator=torch.Generator().manual_seed(0))
    requests = [GenerationRequest(seed=row, prompt_token_ids=tuple(ids[row].tolist())) for row in range(len(ids))]
    sampled = SamplingParams(0.7, 0.95, 0, arguments.new_tokens)
    activities = [torch.profiler.ProfilerActivity.CPU]
    if arguments.device == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    with tempfile.TemporaryDirectory() as folder:
        save_random_llama(folder, SHAPE, kv_heads=2, dtype="float32", vocabulary=VOCABULARY)
        for dtype in ("bfloat16", "float32"):
            backend = random_hf(folder, arguments.device, dtype=dtype, batch_size=arguments.rows)
            backend.eos_token_ids = set(ENDING)
            for sampling in (sampled, SamplingParams(0.0, 1.0, 0, arguments.new_tokens)):
                backend.generate(requests, sampling)  # warm-up
                start = time.perf_counter()
                with torch.profiler.profile(activities=activities) as profile:
                    results = backend.generate(requests, sampling)
                seconds = time.perf_counter() - start
                tokens = sum(result.num_generated_tokens for result in results)
                print(f"== {dtype} temperature {sampling.temperature}: {tokens} tokens in {seconds:.2f} s", flush=True)
                key = "self_cuda_time_total" if arguments.device == "cuda" else "self_cpu_time_total"
                print(profile.key_averages().table(sort_by=key, row_limit=14, max_name_column_width=60), flush=True)
                print(profile.key_averages().table(sort_by="self_cpu_time_total", row_limit=8), flush=True)


if __name__ == "__main__":
    main()
