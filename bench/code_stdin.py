"""ReST-EM on programs that read standard input: SmolLM2-135M-Instruct learns to write whole programs from its
own programs that pass their input/output cases (``code.cases``).

Usage: python bench/code_stdin.py --out FOLDER, then the command it prints (about 8 minutes on 2 CPU cores).

Writes FOLDER/train.jsonl, FOLDER/test.jsonl and FOLDER/config.yaml. Six problem families (add, times, repeat a
word, sum of a line plus n, YES/NO divisibility, square plus n), each asked for six values of n in train (36
problems) and three others in test (18): "Read an integer x from standard input and print x plus 7.", with three
to five cases each, stored as APPS stores them (``input_output``: JSON text ``{"inputs": [...], "outputs":
[...]}``). The config is a code benchmark of its own (``code: {cases: input_output, show_tests: true}``, the
code-stdin prompt, ``judge: {extraction: code}``): 8 samples per train problem, the passing programs kept for one
LoRA round, 4 samples per test problem before and after. BENCHMARKS.md has the figures.
"""

from __future__ import annotations

import json
from pathlib import Path

from code_functions import SPLITS, run_config, write_run  # bench/ is the script's folder, so on sys.path

FAMILIES = [
    (
        "add",
        "Read an integer x from standard input and print x plus {n}.",
        lambda n: [(f"{value}\n", f"{value + n}\n") for value in (0, 3, -5, 100)],
    ),
    (
        "times",
        "Read an integer x from standard input and print x multiplied by {n}.",
        lambda n: [(f"{value}\n", f"{value * n}\n") for value in (0, 3, -5, 7)],
    ),
    (
        "repeat",
        "Read a word from standard input and print it {n} times, joined without spaces.",
        lambda n: [(f"{word}\n", f"{word * n}\n") for word in ("a", "ab", "xyz")],
    ),
    (
        "sum_plus",
        "Read a line of integers separated by spaces from standard input and print their sum plus {n}.",
        lambda n: [
            (" ".join(map(str, values)) + "\n", f"{sum(values) + n}\n") for values in ([1, 2, 3], [10], [-4, 4, 5])
        ],
    ),
    (
        "multiple",
        "Read an integer x from standard input. Print YES if x is divisible by {n}, otherwise print NO.",
        lambda n: [(f"{value}\n", "YES\n" if value % n == 0 else "NO\n") for value in (0, n, n + 1, 5 * n, 7)],
    ),
    (
        "square_plus",
        "Read an integer x from standard input and print x squared plus {n}.",
        lambda n: [(f"{value}\n", f"{value * value + n}\n") for value in (0, 2, -3)],
    ),
]


def rows(split: str) -> list[dict]:
    problems = []
    for name, statement, cases in FAMILIES:
        for n in SPLITS[split]:
            pairs = cases(n)
            input_output = {"inputs": [given for given, _ in pairs], "outputs": [expected for _, expected in pairs]}
            problems.append(
                {
                    "pid": f"{split}-{name}-{n}",
                    "statement": statement.format(n=n),
                    "input_output": json.dumps(input_output),
                }
            )
    return problems


def config(folder: Path) -> dict:
    spec = {
        "source": "jsonl",
        "jsonl": {"paths": {split: str(folder / f"{split}.jsonl") for split in SPLITS}},
        "field_map": {"id": "pid", "problem": "statement"},
        "code": {"cases": "input_output", "show_tests": True},
        "prompt": {"template": "code-stdin"},
        "judge": {"extraction": "code", "timeout_seconds": 5},
    }
    return run_config(folder, experiment="smol-stdin", benchmark="progs", spec=spec)


if __name__ == "__main__":
    write_run(__doc__, rows, config)
