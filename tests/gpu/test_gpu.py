"""The GPU paths, on a GPU: the hf decoding loop against plain ``generate``, the compiled step, reproducibility
across batch sizes, bf16 training with and without gradient checkpointing, GPU claims with the real nvidia-smi,
and DDP/FSDP when two or more GPUs are present. Models have random weights and offline tokenizers (no network):
a Llama of Qwen2.5's vocabulary (151,936 tokens, word-level tokenizer) and the char-level tiny Llama for
training. Each test records its figures (conftest ``record``); assertions bound what must hold on any GPU."""

from __future__ import annotations

import copy
import math
import os
import shutil
import subprocess
import sys
import time

import pytest
import torch

from snakeskills.backends import GenerationRequest, SamplingParams, build_backend, local_backend_options
from snakeskills.io import write_jsonl
from snakeskills.models.tiny_model import build_char_tokenizer, build_tiny_llama, save_random_llama
from snakeskills.plan.config import default_config, prepare_config
from snakeskills.settings.generation import Generation

VOCABULARY = 151_936
SHAPE = {"hidden_size": 512, "intermediate_size": 1536, "num_hidden_layers": 8, "num_attention_heads": 8}
PROMPTS, PROMPT_TOKENS, NEW_TOKENS = 64, 64, 128
# random weights almost never draw the one EOS token: these 1,000 ids end a row (about 1 % of draws at T 0.7),
# so rows end at their own lengths as in a real run
ENDING = list(range(1, 1001))
SAMPLED = SamplingParams(temperature=0.7, top_p=0.95, top_k=0, max_new_tokens=NEW_TOKENS)
GREEDY = SamplingParams(temperature=0.0, top_p=1.0, top_k=0, max_new_tokens=NEW_TOKENS)


def hf(path, device: str, adapter=None, **generation):
    """An hf backend built as a generate job builds it, from the validated default ``generation`` section."""
    model = {"dtype": generation.pop("dtype", "auto"), "trust_remote_code": False}
    config = copy.deepcopy(default_config())
    config["generation"].update(backend="hf", device=device, **generation)
    prepare_config(config)
    generation = Generation.from_dict(config["generation"], "generation")
    options = local_backend_options(generation, model, str(path), str(adapter) if adapter else None, 4)
    return build_backend("hf", **options)


def random_hf(path, device: str, **generation):
    """``hf`` on the random-weights Llama, whose rows end at any of the ENDING tokens."""
    backend = hf(path, device, **generation)
    backend.eos_token_ids = set(ENDING)
    return backend


@pytest.fixture(scope="module")
def random_llama(tmp_path_factory):
    folder = tmp_path_factory.mktemp("random-llama")
    save_random_llama(folder, SHAPE, kv_heads=2, dtype="float32", vocabulary=VOCABULARY)
    return folder


@pytest.fixture(scope="module")
def requests():
    ids = torch.randint(1001, VOCABULARY, (PROMPTS, PROMPT_TOKENS), generator=torch.Generator().manual_seed(0))
    return [GenerationRequest(seed=row, prompt_token_ids=tuple(ids[row].tolist())) for row in range(PROMPTS)]


def timed(function, *arguments):
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    start = time.perf_counter()
    result = function(*arguments)
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return result, time.perf_counter() - start


def warm_up(generate, requests) -> None:
    """A short sampled run of the whole batch, so that the timed runs find the CUDA caching allocator's blocks
    (a (rows, vocabulary) float32 tensor is 39 MB at 64 rows) and kernels loaded: on an H200 the first sampled
    run of a 256-row batch took 2.4 times a later one (bench/generation.py), which would land on whichever method
    ran first."""
    generate(requests, SamplingParams(0.7, 0.95, 0, 16))


def plain_generate(backend, requests, sampling: SamplingParams) -> list[list[int]]:
    """Plain transformers ``generate`` on the backend's model and batches: each row's tokens up to its first
    end token."""
    rows = []
    for first in range(0, len(requests), backend.batch_size):
        batch = requests[first : first + backend.batch_size]
        encoded = backend.left_padded([request.prompt_token_ids for request in batch])
        settings = {"do_sample": False} if sampling.temperature == 0 else {"do_sample": True, "top_k": 0}
        if sampling.temperature:
            settings.update(temperature=sampling.temperature, top_p=sampling.top_p)
        with torch.inference_mode():
            output = backend.model.generate(
                **encoded, max_new_tokens=sampling.max_new_tokens, eos_token_id=ENDING, pad_token_id=0, **settings
            )
        for row in output[:, encoded["input_ids"].shape[1] :].tolist():
            end = next((index + 1 for index, token in enumerate(row) if token in set(ENDING)), len(row))
            rows.append(row[:end])
    return rows


def texts(backend, rows: list[list[int]]) -> list[str]:
    return [backend.tokenizer.decode(row, skip_special_tokens=True) for row in rows]


def identical_share(first, second) -> float:
    return sum(a == b for a, b in zip(first, second, strict=True)) / len(first)


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_backend_against_plain_generate(random_llama, requests, device, record, dtype):
    """Greedy rows equal plain ``generate``'s; sampled, the backend (rows leave the batch as they end, per-row
    seeds) is faster than ``generate(do_sample=True)`` on the same batches. Goal: 2x sampled in bf16."""
    backend = random_hf(random_llama, device, dtype=dtype, batch_size=PROMPTS)
    warm_up(backend.generate, requests)
    warm_up(lambda rows, sampling: plain_generate(backend, rows, sampling), requests)
    greedy, _ = timed(backend.generate, requests, GREEDY)
    plain_greedy, _ = timed(plain_generate, backend, requests, GREEDY)
    sampled, backend_seconds = timed(backend.generate, requests, SAMPLED)
    plain_sampled, plain_seconds = timed(plain_generate, backend, requests, SAMPLED)
    backend_tokens = sum(result.num_generated_tokens for result in sampled)
    plain_tokens = sum(len(row) for row in plain_sampled)
    ratio = (backend_tokens / backend_seconds) / (plain_tokens / plain_seconds)
    greedy_same = identical_share([result.generation for result in greedy], texts(backend, plain_greedy))
    record(
        f"backend_against_plain_generate_{dtype}",
        {
            "rows": PROMPTS,
            "vocabulary": VOCABULARY,
            "sampled_tokens_per_second": round(backend_tokens / backend_seconds, 1),
            "plain_sampled_tokens_per_second": round(plain_tokens / plain_seconds, 1),
            "sampled_ratio_to_plain": round(ratio, 3),
            "mean_tokens_per_row": round(backend_tokens / PROMPTS, 1),
            "greedy_rows_identical_to_plain": greedy_same,
        },
    )
    assert 0 < backend_tokens < PROMPTS * NEW_TOKENS, "rows end at their own lengths"
    assert greedy_same >= (1.0 if dtype == "float32" else 0.9), greedy_same
    assert ratio > 1.0, ratio


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_compiled_step_against_eager(random_llama, requests, device, record, dtype):
    """generation.compile (CUDA graphs): the same rows as the eager loop, each shape compiled once, faster."""
    from torch._dynamo.utils import counters

    eager = random_hf(random_llama, device, dtype=dtype, batch_size=PROMPTS)
    compiled = random_hf(random_llama, device, dtype=dtype, batch_size=PROMPTS, compile=True)
    graphs = counters["stats"]["unique_graphs"]
    _, first_seconds = timed(compiled.generate, requests, SAMPLED)
    compiled_results, compiled_seconds = timed(compiled.generate, requests, SAMPLED)
    eager.generate(requests[:8], SamplingParams(0.7, 0.95, 0, 4))
    eager_results, eager_seconds = timed(eager.generate, requests, SAMPLED)
    same = identical_share(compiled_results, eager_results)
    record(
        f"compiled_against_eager_{dtype}",
        {
            "first_run_seconds": round(first_seconds, 1),
            "compiled_over_eager_speed": round(eager_seconds / compiled_seconds, 3),
            "rows_identical": same,
            "graphs_compiled": counters["stats"]["unique_graphs"] - graphs,
        },
    )
    assert same >= (0.9 if dtype == "float32" else 0.5), same
    assert compiled_seconds < eager_seconds


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_rows_across_batch_sizes(random_llama, requests, device, record, dtype):
    """A sampled row should not depend on the batch it is in. In bf16 on CUDA a row's logits can depend on the
    batch's size and padding; the shares of identical rows are what the README reports."""
    results = {}
    for batch_size in (1, 8, PROMPTS):
        backend = random_hf(random_llama, device, dtype=dtype, batch_size=batch_size)
        results[batch_size] = backend.generate(requests[:16] if batch_size == 1 else requests, SAMPLED)
    shares = {
        "batch_8_and_64": identical_share(results[8], results[PROMPTS]),
        "batch_1_and_64": identical_share(results[1], results[PROMPTS][:16]),
    }
    record(f"identical_rows_across_batch_sizes_{dtype}", shares)
    if dtype == "float32":
        assert min(shares.values()) >= 0.9, shares


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_shared_prefix_against_left_padding(random_llama, requests, device, record, dtype):
    """generation.share_prefix: prompts that open with the same 48 tokens (a system prompt's worth) and end with
    16 of their own; the opening goes through the model once per batch. The shares of rows identical to the
    left-padded batch's (other attention shapes, so other kernels on CUDA), and the time each takes."""
    opening = list(requests[0].prompt_token_ids[:48])
    shared_requests = [
        GenerationRequest(seed=request.seed, prompt_token_ids=tuple(opening + list(request.prompt_token_ids[48:])))
        for request in requests
    ]
    shared = random_hf(random_llama, device, dtype=dtype, batch_size=PROMPTS)
    unshared = random_hf(random_llama, device, dtype=dtype, batch_size=PROMPTS, share_prefix=False)
    assert shared.batch_layout([request.prompt_token_ids for request in shared_requests])[2] == 48
    warm_up(shared.generate, shared_requests)
    warm_up(unshared.generate, shared_requests)
    figures = {}
    for name, sampling in (("sampled", SAMPLED), ("greedy", GREEDY)):
        with_prefix, shared_seconds = timed(shared.generate, shared_requests, sampling)
        without, unshared_seconds = timed(unshared.generate, shared_requests, sampling)
        figures[f"{name}_rows_identical"] = identical_share(with_prefix, without)
        figures[f"{name}_seconds_shared_and_not"] = [round(shared_seconds, 3), round(unshared_seconds, 3)]
    record(f"shared_prefix_against_left_padding_{dtype}", figures)
    if dtype == "float32":
        assert figures["greedy_rows_identical"] >= 0.9, figures


@pytest.fixture(scope="module")
def tiny_folder(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tiny")
    tokenizer = build_char_tokenizer()
    build_tiny_llama(tokenizer, hidden_size=64, num_layers=2, num_heads=4, seed=0, max_positions=64).save_pretrained(
        folder
    )
    tokenizer.save_pretrained(folder)
    return folder


def sft_arguments(tiny_folder, tmp_path, method: str, **training) -> dict:
    records = [
        {"id": f"p{i}", "messages": [{"role": "user", "content": f"{i}+{i}="}, {"role": "assistant", "content": "7"}]}
        for i in range(64)
    ]
    write_jsonl(tmp_path / "data.jsonl", records)
    rate = 1e-2 if method == "full" else 5e-2  # a LoRA of the tiny model learns slower
    settings = {**default_config()["sft"]["training"], "num_epochs": 8, "learning_rate": rate, "batch_size": 16}
    return {
        "weights": method,
        "base_model_path": str(tiny_folder),
        "data_path": str(tmp_path / "data.jsonl"),
        "output_dir": str(tmp_path / method),
        "lora": default_config()["sft"]["lora"] if method == "lora" else None,
        "training": {**settings, "max_length": 16, **training},
        "chat_template": False,
        "chat_template_kwargs": {},
        "seed": 0,
        "threads": 4,
        "dtype": "auto",
        "trust_remote_code": False,
    }


def answers(path, device: str, adapter=None) -> list[str]:
    backend = hf(path, device, adapter, batch_size=4)
    requests = [
        GenerationRequest(seed=0, prompt_token_ids=tuple(backend.tokenizer(f"{i}+{i}=")["input_ids"])) for i in range(4)
    ]
    return [result.generation for result in backend.generate(requests, SamplingParams(0.0, 1.0, 0, 2))]


@pytest.mark.parametrize("checkpointing", [False, True], ids=["plain", "gradient-checkpointing"])
@pytest.mark.parametrize("method", ["lora", "full"])
def test_bf16_training(tiny_folder, tmp_path, device, record, method, checkpointing):
    """LoRA and full SFT in bf16 (training.bf16 auto on a GPU that has it), with and without gradient
    checkpointing: the model learns the answer; steps/s and peak memory are recorded."""
    from snakeskills.training.rounds import RoundRun
    from snakeskills.training.sft import train as train_sft

    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()
    arguments = sft_arguments(tiny_folder, tmp_path, method, gradient_checkpointing=checkpointing)
    metrics = train_sft(RoundRun(**arguments))
    record(
        f"sft_{method}_{'checkpointing' if checkpointing else 'plain'}",
        {
            "steps_per_second": metrics["train_steps_per_second"],
            "train_loss": round(metrics["train_loss"], 4),
            "peak_memory_megabytes": round(torch.cuda.max_memory_allocated() / 2**20, 1)
            if torch.cuda.is_available()
            else None,
            "bf16": torch.cuda.is_available() and torch.cuda.is_bf16_supported(),
        },
    )
    assert metrics["train_loss"] < math.log(len(build_char_tokenizer())), "below a uniform guess"
    tuned = answers(tmp_path / "full", device) if method == "full" else answers(tiny_folder, device, tmp_path / "lora")
    assert all(answer.startswith("7") for answer in tuned), tuned


@pytest.mark.skipif(shutil.which("nvidia-smi") is None, reason="no nvidia-smi on PATH")
def test_gpu_claims_with_the_real_nvidia_smi(tmp_path, monkeypatch, record):
    """node_gpus reads the real ``nvidia-smi -L`` (MIG instances by UUID); a claim makes the job see only its
    GPUs, and a second job waits while every GPU is claimed."""
    from snakeskills.backends import gpus

    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    devices = gpus.node_gpus()
    record("nvidia_smi", {"devices": devices})
    assert len(devices) >= 1 and (len(devices) == torch.cuda.device_count() or devices[0].startswith("MIG-"))
    claimed = gpus.claim_gpus(len(devices), tmp_path)
    assert os.environ["CUDA_VISIBLE_DEVICES"] == ",".join(claimed) and sorted(claimed) == sorted(devices)
    waiting = [
        sys.executable,
        "-c",
        f"from snakeskills.backends import gpus; print(gpus.claim_gpus(1, {str(tmp_path)!r}))",
    ]
    environment = {key: value for key, value in os.environ.items() if key != "CUDA_VISIBLE_DEVICES"}
    with pytest.raises(subprocess.TimeoutExpired):
        subprocess.run(waiting, env=environment, timeout=5, capture_output=True)
    for lock in gpus._held:
        lock.close()
    gpus._held.clear()
    second = subprocess.run(waiting, env=environment, timeout=60, capture_output=True, text=True, check=True)
    assert second.stdout.strip() == str([devices[0]])


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="DDP and FSDP need 2 or more GPUs")
@pytest.mark.parametrize("distributed", ["ddp", "fsdp"])
def test_training_across_gpus(tiny_folder, tmp_path, device, record, distributed):
    from snakeskills.training.rounds import RoundRun, train_round

    arguments = {**sft_arguments(tiny_folder, tmp_path, "full"), "distributed": distributed}
    metrics = train_round("sft", RoundRun(**arguments, processes=2), {}, log_path=tmp_path / "sft.log")
    record(f"sft_full_{distributed}_2_gpus", {"steps_per_second": metrics["train_steps_per_second"]})
    assert metrics["processes"] == 2
    assert answers(tmp_path / "full", device) == ["7"] * 4


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_tool_loop_ids_are_the_transcript(device, record, dtype):
    """The tool loop over the hf backend on the GPU, as GRPO's rollouts run it (``HFBackend.around``): a 0-layer
    Llama on the character tokenizer that mostly writes a calculator call and an answer, with random logits beside
    (temperature 1), so rows stray into every way of closing, leaving and ending a call. Every row's ids decode to
    its text and what ended it (``ids_match_text``), no model token lies in a tool output, and the calls run."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from snakeskills.backends.hf import HFBackend
    from snakeskills.settings.tools import Tags, Tools
    from snakeskills.tools.loop import ToolLoop, ToolUse, ids_match_text

    tokenizer = build_char_tokenizer()
    size = len(tokenizer)
    path = [tokenizer.convert_tokens_to_ids(c) for c in ["[", "1", "2", "*", "3", "]", "\n", "o", "k"]]
    chain = {**dict(zip(path, path[1:], strict=False)), path[-1]: tokenizer.eos_token_id}
    config = LlamaConfig(
        vocab_size=size,
        hidden_size=size + size % 2,
        intermediate_size=4,
        num_hidden_layers=0,
        num_attention_heads=1,
        num_key_value_heads=1,
        max_position_embeddings=512,
        tie_word_embeddings=False,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(0)
    model = LlamaForCausalLM(config)
    with torch.no_grad():
        model.model.embed_tokens.weight.copy_(torch.eye(size, config.hidden_size))
        model.lm_head.weight.normal_(0.0, 0.05)  # strays now and then
        for token, following in {**chain, tokenizer.convert_tokens_to_ids("q"): path[0]}.items():
            model.lm_head.weight[following, token] = 0.8  # about 96 % of draws follow the chain
    model = model.to(device=device, dtype=getattr(torch, dtype)).eval()
    tags = Tags("[", "]\n", "{", "}\n")
    use = ToolUse(Tools.filled({"tool": "calculator", "sandbox": "none"}, "tools"), tags, max_calls=3, workers=4)
    loop = ToolLoop(HFBackend.around(model, tokenizer, batch_size=64), use)
    prompt = tuple(tokenizer.encode("q", add_special_tokens=True))
    sampling = SamplingParams(temperature=1.0, top_p=1.0, top_k=0, max_new_tokens=48, stop=("ok\n",))
    started = time.perf_counter()
    results = loop.generate([GenerationRequest(seed=row, prompt_token_ids=prompt) for row in range(256)], sampling)
    seconds = time.perf_counter() - started
    mismatches = [r for r in results if not ids_match_text(tokenizer, r, ("ok\n", "]\n"), loop.eos_token_ids)]
    model_in_output = 0
    for result in results:
        ids = list(result.token_ids)
        offsets = [len(tokenizer.decode(ids[:index], skip_special_tokens=False)) for index in range(len(ids) + 1)]
        for index, mine in enumerate(result.model_token_mask):
            inside = any(a < offsets[index + 1] and offsets[index] < b for a, b in result.tools["tool_output_spans"])
            model_in_output += bool(mine and inside)
    calls = sum(result.tools["code_rounds_executed"] for result in results)
    record(
        f"test_tool_loop_ids_are_the_transcript[{dtype}]",
        {"rows": len(results), "calls": calls, "mismatches": len(mismatches), "seconds": round(seconds, 2)},
    )
    assert not mismatches, [(r.generation, tokenizer.decode(r.token_ids)) for r in mismatches[:3]]
    assert model_in_output == 0
    assert calls >= 64, calls
