"""DAG shape and config validation through real `snakemake` dry runs (fast, nothing is executed)."""

from __future__ import annotations

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
    assert "unknown config key generation.sampling.temprature: did you mean 'temperature'?" in output
    assert len(output.splitlines()) < 12, "a short message, not the schema"
    assert not (tmp_path / "results").exists()


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
