"""ReST-EM on code with a real model: SmolLM2-135M-Instruct learns to write small Python functions from its own
programs that pass their tests.

Usage: python bench/code_functions.py --out FOLDER, then the command it prints (about 18 minutes on 2 CPU cores).

Writes FOLDER/train.jsonl, FOLDER/test.jsonl and FOLDER/config.yaml. Six function families (add_n, times_n,
repeat_n, last_n, is_multiple_of_n, power_n), each asked for six values of n in train (36 problems) and three
others in test (18): "Write a Python function `add_7(x)` that returns x plus 7.", with three to five asserts each,
shown in the problem as MBPP shows its tests. The config is a code benchmark of its own (``code: {tests: asserts,
show_tests: true}``, the code prompt, ``judge: {extraction: code}``): 8 samples per train problem, the passing
programs kept for one LoRA round, 4 samples per test problem before and after. BENCHMARKS.md has the figures.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
FAMILIES = [
    ("add_{n}", "x", "returns x plus {n}", lambda n: [(value, value + n) for value in (0, 3, -5, 100)]),
    ("times_{n}", "x", "returns x multiplied by {n}", lambda n: [(value, value * n) for value in (0, 3, -5, 7)]),
    (
        "repeat_{n}",
        "s",
        "returns the string s repeated {n} times",
        lambda n: [(repr(text), repr(text * n)) for text in ("a", "ab", "")],
    ),
    (
        "last_{n}",
        "items",
        "returns a list of the last {n} elements of the list items",
        lambda n: [(repr(list(range(10))), repr(list(range(10))[-n:]))],
    ),
    (
        "is_multiple_of_{n}",
        "x",
        "returns True when x is divisible by {n}, and False otherwise",
        lambda n: [(value, value % n == 0) for value in (0, n, n + 1, 5 * n, 7)],
    ),
    ("power_{n}", "x", "returns x raised to the power {n}", lambda n: [(value, value**n) for value in (0, 2, 3, -1)]),
]
SPLITS = {"train": (2, 3, 4, 5, 6, 8), "test": (7, 9, 11)}


def rows(split: str) -> list[dict]:
    problems = []
    for name_pattern, argument, what, cases in FAMILIES:
        for n in SPLITS[split]:
            name = name_pattern.format(n=n)
            problems.append(
                {
                    "uid": f"{split}-{name}",
                    "description": f"Write a Python function `{name}({argument})` that {what.format(n=n)}.",
                    "asserts": [f"assert {name}({given}) == {expected}" for given, expected in cases(n)],
                }
            )
    return problems


def run_config(folder: Path, *, experiment: str, benchmark: str, spec: dict) -> dict:
    """The run both code benchmarks of bench/ use: SmolLM2 on ``benchmark`` (its ``spec``), 8 samples per train
    problem, one LoRA round on the passing programs, 4 samples per test problem before and after."""
    return {
        "experiment": experiment,
        "results_dir": str(folder / "results"),
        "model": {"name": "smol", "build_tiny": False, "path": "models/SmolLM2-135M-Instruct", "dtype": "float32"},
        "benchmarks": {benchmark: spec},
        "train_benchmarks": [benchmark],
        "prompt": {"template": "generic-math", "chat_template": True},
        "num_seeds": 4,
        "train_num_seeds": 8,
        "generation": {
            "backend": "hf",
            "device": "cpu",
            "batch_size": 64,
            "sampling": {"temperature": 0.7, "top_p": 1.0, "top_k": 0, "max_new_tokens": 128},
        },
        "sft": {
            "seed": 0,
            "filters": {"correct_only": True, "dedup": True},
            "lora": {"r": 16, "alpha": 32, "dropout": 0.0},
            "training": {"num_epochs": 3, "learning_rate": 1.0e-3, "batch_size": 16, "max_length": 384},
        },
    }


def config(folder: Path) -> dict:
    spec = {
        "source": "jsonl",
        "jsonl": {"paths": {split: str(folder / f"{split}.jsonl") for split in SPLITS}},
        "field_map": {"id": "uid", "problem": "description"},
        "code": {"tests": "asserts", "show_tests": True},
        "prompt": {"template": "code"},
        "judge": {"extraction": "code", "timeout_seconds": 5},
    }
    return run_config(folder, experiment="smollm2-135m-instruct-functions", benchmark="funcs", spec=spec)


def write_run(description: str, rows, config) -> None:
    """The command line of a bench/ code run: ``--out FOLDER`` gets each split's JSONL (``rows(split)``) and the
    config (``config(folder)``); then the commands to run it are printed."""
    parser = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True, help="folder for the data, the config and the results")
    folder = Path(parser.parse_args().out).resolve()
    folder.mkdir(parents=True, exist_ok=True)
    for split in SPLITS:
        (folder / f"{split}.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows(split)), encoding="utf-8")
    (folder / "config.yaml").write_text(yaml.safe_dump(config(folder), sort_keys=False), encoding="utf-8")
    print(
        "python3 -m snakeskills.models.pretrained smollm2-135m-instruct --link models/SmolLM2-135M-Instruct\n"
        f"python3 -m snakemake --configfile {folder / 'config.yaml'} -c all"
    )


if __name__ == "__main__":
    write_run(__doc__, rows, config)
