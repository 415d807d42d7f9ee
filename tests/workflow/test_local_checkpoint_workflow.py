"""The workflow on a local Hugging Face checkpoint (the path real models take) with the LLM judge on.

The checkpoint is an untrained tiny Llama saved with ``save_pretrained``; generation uses its chat
template and the LLM judge runs through the same hf backend. Also: the shipped real-model example
plans with ``snakemake -n`` against local folders, and missing model folders name their config key.
"""

from __future__ import annotations

import json
import os

import pytest
import yaml
from conftest import REPO, dry_run_counts, folders_as_the_plan_sees_them, run_snakemake

EXAMPLE = REPO / "config" / "examples" / "qwen2.5-1.5b-instruct-gsm8k-math500.yaml"


def local_checkpoint_config(tmp_path, checkpoint, **overrides) -> tuple[dict, object]:
    config = {
        "experiment": "local",
        "model": {"name": "tiny-chat", "build_tiny": False, "path": str(checkpoint)},
        "benchmarks": {
            "arithmetic": {
                "source": "synthetic",
                "synthetic": {
                    "operations": ["+"],
                    "max_operand": 9,
                    "seed": 0,
                    "split_sizes": {"train": 12, "test": 10},
                },
            }
        },
        "train_benchmarks": ["arithmetic"],
        # shell syntax in config values is data, never run (tests/unit/test_envs.py checks the shell: commands)
        "prompt": {"system": "Add. $(touch PWNED) `touch PWNED2`;", "user": "{problem}=", "chat_template": True},
        "num_seeds": 2,
        "num_chunks": 2,
        "train_num_seeds": 1,
        "generation": {
            "backend": "hf",
            "batch_size": 8,
            "sampling": {"temperature": 1.0, "max_new_tokens": 6},
            # generate jobs share one model load per node (tested below by counting loads in the logs)
            "share_model": {"enabled": True, "idle_seconds": 5, "directory": str(tmp_path / "model-servers")},
        },
        # an untrained model never writes \boxed{}; the digit regex gives it answers to judge
        "judge": {
            "regex": r"(\d+)",
            "llm": {
                "model": {"path": str(checkpoint)},
                "prompt": {"user": "{expected_answer}?{predicted_answer}:"},
                "generation": {"backend": "hf", "batch_size": 8, "sampling": {"temperature": 1.0, "max_new_tokens": 5}},
            },
        },
        "sft": {
            "lora": {"r": 4, "alpha": 8},
            "training": {"num_epochs": 1, "learning_rate": 1e-3, "batch_size": 4, "max_length": 32},
        },
    }
    config.update(overrides)
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    return config, path


def path_with_a_python3_without_snakeskills(tmp_path) -> dict:
    """The environment of `venv/bin/python -m snakemake` run from a venv that is not activated: the `python3`
    on PATH is another one, which cannot import snakeskills (here: one that only says so)."""
    folder = tmp_path / "other-python"
    folder.mkdir()
    other = folder / "python3"
    other.write_text("#!/bin/sh\necho \"No module named 'snakeskills' (the python3 on PATH)\" >&2\nexit 97\n")
    other.chmod(0o755)
    return {**os.environ, "PATH": f"{folder}:{os.environ['PATH']}"}


@pytest.mark.slow
def test_local_checkpoint_with_chat_template_and_llm_judge(tmp_path, tiny_checkpoint):
    _, configfile = local_checkpoint_config(tmp_path, tiny_checkpoint)
    metrics = "results/local/metrics/tiny-chat/arithmetic/test/metrics.json"
    # every job runs with the Python that runs Snakemake, not the python3 on PATH
    env = path_with_a_python3_without_snakeskills(tmp_path)
    process = run_snakemake(tmp_path, "--cores", "2", metrics, configfile=configfile, env=env)
    assert process.returncode == 0, process.stdout[-4000:] + process.stderr[-4000:]
    assert "No module named" not in process.stdout + process.stderr

    results = tmp_path / "results/local"
    assert not list(tmp_path.rglob("PWNED*"))
    values = json.loads((tmp_path / metrics).read_text())["arithmetic"]
    assert set(values) >= {"pass@1[avg-of-2]", "majority@2", "pass@2", "pass@1[avg-of-1]", "pass@1"}
    for mode in ("pass@1[avg-of-2]", "majority@2", "pass@2"):
        assert {"symbolic_correct", "judge_correct", "no_answer", "num_entries", "avg_tokens"} <= set(values[mode])
    assert values["pass@2"]["num_entries"] == 10

    rows = [json.loads(line) for line in (results / "judge/tiny-chat/arithmetic/test/output-rs1.jsonl").open()]
    assert len(rows) == 10
    for row in rows:
        assert {"generation", "predicted_answer", "symbolic_correct", "judgement", "judge_correct"} <= set(row)
    log = (results / "logs/llm_judge/tiny-chat/arithmetic/test/rs0/chunk0-of-2.log").read_text()
    assert "model_calls" in log
    # 4 generate jobs (2 seeds x 2 chunks), one model load shared by all of them
    generate_logs = [path.read_text() for path in (results / "logs/generate").rglob("*.log")]
    assert len(generate_logs) == 4
    assert sum(log.count("started model server") for log in generate_logs) == 1
    assert all("serves this job" in log for log in generate_logs)
    server_logs = [path.read_text() for path in (tmp_path / "model-servers").glob("*.log")]
    assert sum(log.count(f"loaded model for {tiny_checkpoint}") for log in server_logs) == 1

    # a changed LLM-judge setting reruns the LLM judge (and what is downstream), not generation or math judging
    config, configfile = local_checkpoint_config(tmp_path, tiny_checkpoint)
    config["judge"]["llm"]["generation"]["sampling"]["max_new_tokens"] = 4
    configfile.write_text(yaml.safe_dump(config))
    counts = dry_run_counts(tmp_path, metrics, configfile=configfile)
    assert counts.get("generate", 0) == 0 and counts.get("judge", 0) == 0
    assert counts["llm_judge"] == 4 and counts["summarize"] == 1


def test_llm_judge_jobs_are_planned_per_chunk(tmp_path, tiny_checkpoint):
    config, configfile = local_checkpoint_config(tmp_path, tiny_checkpoint)
    counts = dry_run_counts(tmp_path, configfile=configfile)
    assert counts["llm_judge"] == counts["judge"] == counts["generate"]
    del config["judge"]["llm"]
    configfile.write_text(yaml.safe_dump(config))
    without = dry_run_counts(tmp_path, configfile=configfile)
    assert "llm_judge" not in without and without["judge"] == counts["judge"]


def test_real_model_example_plans_against_local_folders(tmp_path):
    config = yaml.safe_load(EXAMPLE.read_text())
    assert config["generation"]["backend"] == "vllm"
    assert config["num_seeds"] == 8 and config["num_chunks"] == 4
    assert set(config["benchmarks"]) == {"gsm8k", "math-500"}
    folders_as_the_plan_sees_them(tmp_path, "models/Qwen2.5-1.5B-Instruct", "datasets/gsm8k", "datasets/math-500")
    counts = dry_run_counts(tmp_path, configfile=EXAMPLE)
    # base: gsm8k train (4 seeds) + gsm8k/math-500 test (8 seeds); sft-round1: both tests (8 seeds); 4 chunks each
    assert counts["generate"] == 4 * (4 + 2 * 8 + 2 * 8)
    assert counts["judge"] == counts["generate"]
    assert counts["prepare_data"] == 3  # gsm8k train + test, math-500 test
    assert counts["summarize"] == 5 and counts["sft"] == 1 and counts["eval"] == 1
