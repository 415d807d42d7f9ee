"""DAG shape and config validation through real `snakemake` dry runs (fast, nothing is executed)."""

from __future__ import annotations

import pytest
import yaml
from conftest import DEFAULT_CONFIG, dry_run_counts, run_snakemake


def test_job_counts_follow_chunks_and_seeds(tmp_path):
    # default: 2 models; base generates on train (4 seeds) + test (4 seeds), round1 on test (4 seeds)
    counts = dry_run_counts(tmp_path, "--config", "num_chunks=3", "num_seeds=5", "train_num_seeds=2")
    train_jobs = 2 * 3  # base on train: 2 seeds x 3 chunks
    test_jobs = 2 * 5 * 3  # base and round1 on test: 5 seeds x 3 chunks
    assert counts["generate"] == train_jobs + test_jobs
    assert counts["judge"] == train_jobs + test_jobs
    assert counts["merge_judged"] == 2 + 2 * 5
    assert counts["summarize"] == 3  # base/train, base/test, round1/test
    assert counts["prepare_data"] == 4  # bootstrap, validation, train, test
    assert counts["build_tiny_model"] == counts["sft_data"] == counts["sft"] == counts["eval"] == 1


def test_rounds_chain_models(tmp_path):
    counts = dry_run_counts(tmp_path, "--config", "rounds=3", "num_chunks=1", "num_seeds=2", "train_num_seeds=2")
    # rounds 1..3 are trained; base, round1 and round2 generate training data; all 4 models are evaluated
    assert counts["sft"] == counts["sft_data"] == 3
    assert counts["generate"] == 3 * 2 + 4 * 2
    assert counts["summarize"] == 3 + 4


def _write_config(tmp_path, mutate):
    config = yaml.safe_load(DEFAULT_CONFIG.read_text())
    mutate(config)
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def test_mistyped_key_stops_before_any_job(tmp_path):
    def mutate(config):
        config["generation"]["sampling"]["temprature"] = 0.7

    process = run_snakemake(tmp_path, "--cores", "1", configfile=_write_config(tmp_path, mutate))
    output = process.stdout + process.stderr
    assert process.returncode != 0
    assert "temprature" in output
    assert not (tmp_path / "results").exists()


def test_wrong_type_names_the_key(tmp_path):
    process = run_snakemake(tmp_path, "--cores", "1", "--config", "num_seeds=four")
    output = process.stdout + process.stderr
    assert process.returncode != 0
    assert "num_seeds" in output and "four" in output
    assert not (tmp_path / "results").exists()


def test_missing_model_path_names_the_key(tmp_path):
    def mutate(config):
        config["model"]["build_tiny"] = False

    process = run_snakemake(tmp_path, "--dry-run", configfile=_write_config(tmp_path, mutate))
    assert process.returncode != 0
    assert "model.path" in process.stdout + process.stderr


def test_lint_is_clean(tmp_path):
    process = run_snakemake(tmp_path, "--lint")
    output = process.stdout + process.stderr
    assert process.returncode == 0, output
    assert "Lints for" not in output, output


def test_ruff_is_clean():
    import shutil
    import subprocess

    from conftest import REPO

    ruff = shutil.which("ruff")
    assert ruff, "ruff is part of the [test] extra"
    for command in ([ruff, "check", "."], [ruff, "format", "--check", "."]):
        process = subprocess.run(command, capture_output=True, text=True, cwd=REPO)
        assert process.returncode == 0, process.stdout + process.stderr


def test_unknown_backend_names_the_key(tmp_path):
    def mutate(config):
        config["generation"]["backend"] = "tgi"

    process = run_snakemake(tmp_path, "--dry-run", configfile=_write_config(tmp_path, mutate))
    output = process.stdout + process.stderr
    assert process.returncode != 0
    assert "'tgi' is not one of ['hf', 'vllm', 'openai']" in output and "backend" in output
    assert not (tmp_path / "results").exists()


def test_out_of_range_value_names_the_key(tmp_path):
    process = run_snakemake(tmp_path, "--dry-run", "--config", "num_chunks=0")
    output = process.stdout + process.stderr
    assert process.returncode != 0
    assert "num_chunks" in output and "less than the minimum of 1" in output


def test_results_folder_that_cannot_be_created_names_the_key(tmp_path):
    (tmp_path / "blocker").write_text("a file where the results folder should go\n")
    process = run_snakemake(tmp_path, "--cores", "1", "--config", "results_dir=blocker/results")
    output = process.stdout + process.stderr
    assert process.returncode != 0
    assert "config key results_dir" in output and "is a file" in output
    assert sorted(path.name for path in tmp_path.iterdir() if not path.name.startswith(".")) == ["blocker"]


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda config: config["judge"].update(regex="(\\d+"), "config key judge.regex: '(\\\\d+' does not compile"),
        (lambda config: config.update(eval_split="train"), "config keys eval_split and train_split are both 'train'"),
        (
            lambda config: (config["generation"].update(backend="vllm"), config["sft"]["lora"].update(r=128)),
            "config key sft.lora.r is 128 but generation.vllm.max_lora_rank is 64",
        ),
        (
            lambda config: config["generation"].update(backend="vllm", compile=True),
            "config key generation.compile applies to the hf backend only, but generation.backend is 'vllm'",
        ),
        (
            lambda config: config["sft"].setdefault("filters", {}).update(score="judge_correct"),
            "config key sft.filters.score is 'judge_correct', which needs the LLM judge's verdicts",
        ),
        (
            lambda config: config["sft"].update(method="full", merge=True),
            "config key sft.merge applies to sft.method lora",
        ),
        (
            lambda config: config["sft"].pop("lora"),
            "config key sft.lora (r, alpha) is required when sft.method is lora",
        ),
        (
            lambda config: config["generation"].update(
                backend="openai", openai={"base_url": "http://x/v1", "model": "m"}
            ),
            "config key generation.backend is 'openai', which samples whatever model its server serves",
        ),
        (
            lambda config: config["sft"].update(gpus=2, processes=1),
            "config key sft.processes is 1 but the sft job has 2 GPU(s) (sft.gpus)",
        ),
        (
            lambda config: (config["generation"].update(device="cpu"), config["sft"].update(processes=3)),
            "config key sft.training.batch_size (32) must be a multiple of the 3 training processes",
        ),
        (
            lambda config: config["sft"].update(distributed="fsdp"),
            "config key sft.distributed is 'fsdp', which shards the model across GPUs, but the sft job has 1 GPU(s)",
        ),
    ],
    ids=[
        "judge-regex",
        "eval-is-train",
        "lora-rank-over-vllm-max",
        "compile-without-hf",
        "llm-score-without-judge",
        "merge-with-full",
        "lora-without-settings",
        "openai-for-the-tuned-model",
        "processes-not-one-per-gpu",
        "batch-not-shared-by-processes",
        "fsdp-on-one-gpu",
    ],
)
def test_mistakes_that_cost_nothing_to_find_stop_the_plan(tmp_path, mutate, message):
    process = run_snakemake(tmp_path, "--dry-run", configfile=_write_config(tmp_path, mutate))
    output = process.stdout + process.stderr
    assert process.returncode != 0
    assert message in output, output[-2000:]
    assert not (tmp_path / "results").exists()
