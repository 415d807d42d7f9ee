"""A user's own metric (``module:function``) that raises on a row, through the real ``snakemake`` on an untrained
tiny checkpoint: the console and the summarize job's log name the config key, the function, the row and the
exception's last line, the run fails, and no summary file is left; a metric module that fails while it is
imported stops the plan naming the key."""

from __future__ import annotations

import json

import yaml
from conftest import run_snakemake

# a user's metric with a bug: its table of levels misses the third problem
MY_METRICS = """
def by_difficulty(problems):
    counts = {}
    for number, samples in enumerate(problems, start=1):
        for row in samples:
            counts[LEVELS[number]] = counts.get(LEVELS[number], 0) + row["symbolic_correct"]
    return counts


LEVELS = {1: "easy", 2: "easy", 4: "hard"}
"""


def hook_config(tmp_path, checkpoint) -> tuple[dict, object]:
    """The smallest real run of the tiny checkpoint to a summary: 4 test problems, 1 seed, 1 chunk, no training."""
    config = {
        "experiment": "hooks",
        "model": {"name": "tiny-chat", "build_tiny": False, "path": str(checkpoint)},
        "benchmarks": {
            "arithmetic": {
                "source": "synthetic",
                "synthetic": {"operations": ["+"], "max_operand": 9, "seed": 0, "split_sizes": {"train": 4, "test": 4}},
            }
        },
        "train_benchmarks": ["arithmetic"],
        "prompt": {"user": "{problem}=", "chat_template": True},
        "num_seeds": 1,
        "num_chunks": 1,
        "generation": {"backend": "hf", "batch_size": 4, "sampling": {"temperature": 1.0, "max_new_tokens": 4}},
        "judge": {"regex": r"(\d+)", "extraction": "boxed"},
        "metrics": {"difficulty": {"function": "my_metrics:by_difficulty"}},
        "sft": {
            "lora": {"r": 4, "alpha": 8},
            "training": {"num_epochs": 1, "learning_rate": 1e-3, "batch_size": 4, "max_length": 32},
        },
    }
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    return config, path


def test_a_users_metric_that_raises_on_a_row_stops_its_job_naming_key_function_row_and_error(tmp_path, tiny_checkpoint):
    (tmp_path / "my_metrics.py").write_text(MY_METRICS)
    _, configfile = hook_config(tmp_path, tiny_checkpoint)
    target = "results/hooks/metrics/tiny-chat/arithmetic/test/metrics.json"
    process = run_snakemake(tmp_path, "--cores", "2", target, configfile=configfile, timeout=600)
    output = process.stdout + process.stderr
    assert process.returncode != 0, output[-4000:]
    judged = "results/hooks/judge/tiny-chat/arithmetic/test/output-rs0.jsonl"
    assert (tmp_path / judged).exists(), output[-6000:]
    rows = [json.loads(line) for line in (tmp_path / judged).read_text().splitlines()]
    assert len(rows) == 4
    message = (
        f"config key metrics.difficulty: 'my_metrics:by_difficulty' raised on row 3 of {judged} "
        f"(id {rows[2]['id']!r}): KeyError: 3 (my_metrics.py, line 6, in by_difficulty)"
    )
    log_path = "results/hooks/logs/summarize/tiny-chat/arithmetic/test.log"
    assert f"snakeskills error: {message} (log: {log_path})" in output, output[-4000:]
    log = (tmp_path / log_path).read_text()
    assert f"ERROR: {message}\nTraceback (most recent call last):\n" in log, log
    assert 'my_metrics.py", line 6, in by_difficulty' in log
    # nothing half-written: no summary file, finished or temporary
    summary = (tmp_path / target).parent
    assert not summary.exists() or not list(summary.iterdir()), list(summary.iterdir())


def test_a_metric_module_that_fails_while_it_is_imported_stops_the_plan_naming_the_key(tmp_path, tiny_checkpoint):
    (tmp_path / "my_metrics.py").write_text(MY_METRICS + "\nTHRESHOLDS = open('thresholds.yaml').read()\n")
    _, configfile = hook_config(tmp_path, tiny_checkpoint)
    process = run_snakemake(tmp_path, "--dry-run", configfile=configfile, timeout=300)
    output = process.stdout + process.stderr
    assert process.returncode != 0, output[-4000:]
    assert (
        "config key metrics.difficulty.function: 'my_metrics:by_difficulty': module 'my_metrics' fails while it is "
        "imported: FileNotFoundError: [Errno 2] No such file or directory: 'thresholds.yaml' (my_metrics.py, line 12, "
        "in <module>)"
    ) in output, output[-4000:]
