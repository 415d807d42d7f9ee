"""SFT in several processes: `accelerate launch` starts them (torch.distributed.run), each Trainer trains on
its share of every batch and they average gradients (DDP). On this CPU-only machine the processes run on the
CPU and talk over gloo, the same code path as one process per GPU; FSDP needs GPUs and is not run here.
"""

from __future__ import annotations

import json

import pytest
from conftest import hf_backend, resolved_prompt, run_snakemake, shrunk_default_config, training_section, write_config

from snakeskills.backends import SamplingParams, build_request
from snakeskills.io import write_jsonl
from snakeskills.training.rounds import RoundRun, train_round

RESULTS = "results/ddp"


def test_two_cpu_processes_fully_fine_tune_a_checkpoint_that_loads(tiny_checkpoint, tmp_path):
    records = [
        {"id": f"p{i}", "messages": [{"role": "user", "content": f"{i}+{i}="}, {"role": "assistant", "content": "7"}]}
        for i in range(64)
    ]
    write_jsonl(tmp_path / "data.jsonl", records)
    output = tmp_path / "sft-round1" / "checkpoint"
    arguments = {
        "weights": "full",
        "base_model_path": str(tiny_checkpoint),
        "data_path": str(tmp_path / "data.jsonl"),
        "output_dir": str(output),
        "lora": None,
        "training": training_section(num_epochs=8, learning_rate=1e-2, batch_size=16, max_length=16),
        "chat_template": False,
        "chat_template_kwargs": {},
        "seed": 0,
        "threads": 1,
        "dtype": "auto",
        "trust_remote_code": False,
    }
    log = tmp_path / "sft.log"
    metrics = train_round("sft", RoundRun(**arguments, processes=2), {}, log_path=log)
    # 64 examples in optimizer steps of 16 (8 per process): 4 steps an epoch
    assert metrics["processes"] == 2 and metrics["global_step"] == 32 and metrics["method"] == "full"
    assert sorted(path.name for path in output.parent.iterdir()) == ["checkpoint"], "no staging or trainer folder"
    assert log.read_text().count("fully fine-tuning") == 2, "both processes trained"
    backend = hf_backend(str(output), device="cpu", batch_size=4)
    prompt = resolved_prompt(user="{problem}=")
    requests = [build_request(backend, prompt, {"problem": f"{i}+{i}"}, 0) for i in range(4)]
    greedy = SamplingParams(temperature=0.0, top_p=1.0, top_k=0, max_new_tokens=2)
    assert [result.generation for result in backend.generate(requests, greedy)] == ["7"] * 4, "it learned the answer"


def test_a_failing_process_fails_the_job_with_its_log(tiny_checkpoint, tmp_path):
    from snakeskills.errors import SnakeskillsError

    arguments = {
        "weights": "lora",
        "base_model_path": str(tiny_checkpoint),
        "data_path": str(tmp_path / "missing.jsonl"),
        "output_dir": str(tmp_path / "adapter"),
        "lora": {"r": 4, "alpha": 8, "dropout": 0.0, "target_modules": "all-linear"},
        "training": training_section(num_epochs=1, learning_rate=1e-3, batch_size=4, max_length=16),
        "chat_template": False,
        "chat_template_kwargs": {},
        "seed": 0,
        "threads": 1,
        "dtype": "auto",
        "trust_remote_code": False,
    }
    failed = (
        r"sft round: the 2 training processes on one node failed \(exit 1\): rank 0 on .*, rank 1 on .*missing\.jsonl"
    )
    with pytest.raises(SnakeskillsError, match=failed):
        train_round("sft", RoundRun(**arguments, processes=2), {}, log_path=tmp_path / "sft.log")
    assert "missing.jsonl" in (tmp_path / "sft.log").read_text()
    assert not (tmp_path / "adapter").exists()


@pytest.mark.slow
def test_workflow_trains_a_round_in_two_processes_and_evaluates_it(tmp_path):
    config = shrunk_default_config({"bootstrap": 4800, "validation": 200, "train": 1000, "test": 200})
    config["experiment"] = "ddp"
    config["generation"]["device"] = "cpu"
    config.setdefault("training", {})["processes"] = 2
    configfile = write_config(tmp_path / "config.yaml", config)
    process = run_snakemake(tmp_path, "--cores", "2", configfile=configfile)
    assert process.returncode == 0, process.stdout[-5000:] + process.stderr[-5000:]
    results = tmp_path / RESULTS
    log = (results / "logs/sft/sft-round1.log").read_text()
    assert "launching 2 training processes" in log and "accelerate.commands.launch --num_processes 2" in log
    metrics = json.loads((results / "models/sft-round1/adapter/training_metrics.json").read_text())
    stats = json.loads((results / "sft/sft-round1/stats.json").read_text())
    # training.batch_size 32 stays the examples per optimizer step: 16 per process
    steps_per_epoch = -(-stats["kept"] // 32)
    epochs = config["sft"]["training"]["num_epochs"]
    assert metrics["processes"] == 2 and metrics["global_step"] == steps_per_epoch * epochs
    summary = json.loads((results / "eval/summary.json").read_text())
    accuracy = {model: summary[model]["arithmetic"]["pass@1[avg-of-2]"]["symbolic_correct"] for model in summary}
    assert accuracy["sft-round1"] >= accuracy["base"] + 10, accuracy


@pytest.mark.slow
def test_dpo_fully_fine_tunes_in_two_cpu_processes_and_grpo_in_one(tiny_checkpoint, tmp_path):
    """DPO and GRPO take the same paths as SFT: full fine-tuning (a frozen copy is DPO's reference), several
    processes under accelerate, a checkpoint every backend loads."""
    from snakeskills.plan.config import default_config
    from snakeskills.plan.sections import benchmark_judge
    from snakeskills.training.grpo import train as train_grpo

    prompt = [{"role": "user", "content": "3+4="}]
    pairs = [
        {"id": f"p{i}", "prompt": prompt, "chosen": [{"role": "assistant", "content": "7"}]}
        | {"rejected": [{"role": "assistant", "content": str(i % 7)}]}
        for i in range(32)
    ]
    write_jsonl(tmp_path / "pairs.jsonl", pairs)
    common = {
        "weights": "full",
        "base_model_path": str(tiny_checkpoint),
        "lora": None,
        "chat_template": False,
        "chat_template_kwargs": {},
        "seed": 0,
        "threads": 1,
        "dtype": "auto",
        "trust_remote_code": False,
    }
    dpo = {
        **common,
        "data_path": str(tmp_path / "pairs.jsonl"),
        "output_dir": str(tmp_path / "dpo-round1" / "checkpoint"),
        "training": training_section(num_epochs=4, learning_rate=1e-2, batch_size=8, max_length=16),
        "processes": 2,
    }
    log = tmp_path / "dpo.log"
    options = {"beta": 0.1, "loss": "sigmoid", "nll_weight": 1.0}
    metrics = train_round("dpo", RoundRun(**dpo), options, log_path=log)
    assert metrics["processes"] == 2 and metrics["global_step"] == 16 and metrics["training_method"] == "dpo"
    assert log.read_text().count("fully fine-tuning") == 2, "both processes trained"
    assert any("rewards/accuracies" in entry for entry in metrics["log_history"])
    backend = hf_backend(str(tmp_path / "dpo-round1" / "checkpoint"), device="cpu", batch_size=4)
    requests = [build_request(backend, resolved_prompt(user="{problem}="), {"problem": "3+4"}, 0)]
    greedy = SamplingParams(temperature=0.0, top_p=1.0, top_k=0, max_new_tokens=1)
    assert [result.generation for result in backend.generate(requests, greedy)] == ["7"], "it prefers the answer"

    write_jsonl(
        tmp_path / "problems.jsonl",
        [
            {"id": f"p{i}", "problem": f"{i}+1", "expected_answer": str(i + 1), "benchmark": "add", "prompt": prompt}
            for i in range(8)
        ],
    )
    run = RoundRun(
        **common,
        data_path=str(tmp_path / "problems.jsonl"),
        output_dir=str(tmp_path / "grpo-round1" / "checkpoint"),
        training={"num_epochs": 1, "max_steps": 2, "learning_rate": 1e-3, "batch_size": 8, "weight_decay": 0.0}
        | {"warmup_steps": 0.0, "checkpoint_steps": 0, "checkpoint_minutes": 0, "gradient_accumulation_steps": 1}
        | {"gradient_checkpointing": False, "bf16": "auto"},
    )
    grpo = train_grpo(
        run,
        num_generations=4,
        beta=0.04,
        loss="dapo",
        sampling={"temperature": 1.0, "top_p": 1.0, "top_k": 0, "max_new_tokens": 4},
        rewards={"correct": 1.0, "answer_format": 0.5, "length": -0.1},
        judges={"add": {**benchmark_judge(default_config(), "arithmetic"), "regex": "(\\d+)"}},
        reasoning={"parse_reasoning": False, "end_reasoning_string": "</think>"},
        vllm_mode=None,
    )
    assert grpo["global_step"] == 2 and grpo["completions_sampled"] == 16
    rewards = [entry for entry in grpo["log_history"] if "reward" in entry]
    assert len(rewards) == 2 and all("rewards/answer_format/mean" in entry for entry in rewards)
    assert (tmp_path / "grpo-round1" / "checkpoint" / "config.json").exists()
