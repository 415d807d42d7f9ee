"""Why sampled decoding in bf16 is slower than plain ``generate`` on a GPU: the GPU suite's comparison
(tests/gpu/test_gpu.py, ``test_backend_against_plain_generate``: 64 random prompts, Qwen2.5's vocabulary, up to 128
tokens, temperature 0.7, top-p 0.95) taken apart, each variant timed after a warm-up of the same length.

Usage: python bench/bf16_sampling.py [--device cuda] [--rows 64] [--new-tokens 128]
       [--output bench/results/bf16-sampling-cuda.json]

Per dtype (bfloat16, float32), tokens/s of:
- ``backend``: the hf backend as the test runs it;
- ``backend_top_p_1``: the same without top-p (no sort, no cumsum: the Gumbel draw over the whole vocabulary);
- ``backend_no_cudnn_attention``: the same with PyTorch's cuDNN attention kernel off (bf16 picks it on Hopper);
- ``backend_greedy``: temperature 0 (no draw at all);
- ``plain_generate``: transformers' ``generate(do_sample=True)`` on the same batches (the test's baseline);
and, for ``backend`` in each dtype, torch.profiler's top operators by host time and by device time (the text goes
next to the JSON, ``.txt``). The variant whose ratio moves tells the cause: the draw (top-p's sort), the attention
kernel, or the loop's host work per step."""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from snakeskills.backends import GenerationRequest, SamplingParams  # noqa: E402
from snakeskills.models.tiny_model import save_random_llama  # noqa: E402
from tests.gpu.test_gpu import SHAPE, VOCABULARY, plain_generate, random_hf  # noqa: E402


def synchronize(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def timed(device: str, function) -> tuple[int, float]:
    """(tokens generated, seconds) of one call, after the same call once untimed."""
    function()
    synchronize(device)
    start = time.perf_counter()
    tokens = function()
    synchronize(device)
    return tokens, time.perf_counter() - start


def backend_tokens(backend, requests, sampling) -> int:
    return sum(result.num_generated_tokens for result in backend.generate(requests, sampling))


def plain_tokens(backend, requests, sampling) -> int:
    return sum(map(len, plain_generate(backend, requests, sampling)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--rows", type=int, default=64)
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--output", type=Path, default=Path("bench/results/bf16-sampling-cuda.json"))
    arguments = parser.parse_args()
    device = arguments.device
    ids = torch.randint(1001, VOCABULARY, (arguments.rows, 64), generator=torch.Generator().manual_seed(0))
    requests = [GenerationRequest(seed=row, prompt_token_ids=tuple(ids[row].tolist())) for row in range(len(ids))]
    sampled = SamplingParams(0.7, 0.95, 0, arguments.new_tokens)
    variants = {
        "backend": sampled,
        "backend_top_p_1": SamplingParams(0.7, 1.0, 0, arguments.new_tokens),
        "backend_no_cudnn_attention": sampled,
        "backend_greedy": SamplingParams(0.0, 1.0, 0, arguments.new_tokens),
    }
    report = {"rows": arguments.rows, "new_tokens": arguments.new_tokens, "vocabulary": VOCABULARY, "dtypes": {}}
    if device.startswith("cuda"):
        report["device"] = torch.cuda.get_device_name(0)
    report["torch"] = torch.__version__
    profiles = []
    activities = [torch.profiler.ProfilerActivity.CPU]
    if device.startswith("cuda"):
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    with tempfile.TemporaryDirectory() as folder:
        save_random_llama(folder, SHAPE, kv_heads=2, dtype="float32", vocabulary=VOCABULARY)
        for dtype in ("bfloat16", "float32"):
            backend = random_hf(folder, device, dtype=dtype, batch_size=arguments.rows)
            figures = {}
            for name, sampling in variants.items():
                cudnn = name == "backend_no_cudnn_attention" and device.startswith("cuda")
                if cudnn:
                    torch.backends.cuda.enable_cudnn_sdp(False)
                try:
                    tokens, seconds = timed(device, partial(backend_tokens, backend, requests, sampling))
                finally:
                    if cudnn:
                        torch.backends.cuda.enable_cudnn_sdp(True)
                figures[name] = {
                    "tokens": tokens,
                    "seconds": round(seconds, 3),
                    "tokens_per_s": round(tokens / seconds, 1),
                }
                print(dtype, name, figures[name], flush=True)
            tokens, seconds = timed(device, partial(plain_tokens, backend, requests, sampled))
            figures["plain_generate"] = {
                "tokens": tokens,
                "seconds": round(seconds, 3),
                "tokens_per_s": round(tokens / seconds, 1),
            }
            print(dtype, "plain_generate", figures["plain_generate"], flush=True)
            plain = figures["plain_generate"]["tokens_per_s"]
            for name in variants:
                figures[name]["ratio_to_plain"] = round(figures[name]["tokens_per_s"] / plain, 3)
            with torch.profiler.profile(activities=activities) as profile:
                backend.generate(requests, sampled)
                synchronize(device)
            for key in ("self_cpu_time_total", "self_cuda_time_total" if device.startswith("cuda") else None):
                if key is not None:
                    table = profile.key_averages().table(sort_by=key, row_limit=15, max_name_column_width=60)
                    profiles.append(f"== {dtype} backend, sorted by {key}\n{table}")
            report["dtypes"][dtype] = figures
            del backend
            if device.startswith("cuda"):
                torch.cuda.empty_cache()
    arguments.output.parent.mkdir(parents=True, exist_ok=True)
    arguments.output.write_text(json.dumps(report, indent=2) + "\n")
    arguments.output.with_suffix(".txt").write_text("\n".join(profiles))
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
