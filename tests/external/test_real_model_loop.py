"""The whole loop on a real pretrained model: config/examples/smollm2-135m-instruct-arithmetic.yaml, run as the
README says (convert and link the model, then `snakemake --configfile ... -c 2`), about 5 minutes on 2 cores.

SmolLM2-135M-Instruct samples 4 solutions to each of 192 training problems, the judge keeps its correct
ones, a LoRA is trained on them, and base and tuned models are compared on 96 held-out problems. Besides the
gain, the records and logs show that the real tokenizer and chat template were used correctly.
"""

from __future__ import annotations

import datetime
import itertools
import json
import re
import subprocess
import sys

import pytest
from conftest import REPO, run_snakemake, sft_training_rows
from transformers import AutoTokenizer

from snakeskills.training.sft import IGNORE_INDEX, to_prompt_completion

pytestmark = pytest.mark.slow

EXAMPLE = REPO / "config/examples/smollm2-135m-instruct-arithmetic.yaml"
RESULTS = "results/smollm2-135m-instruct-arithmetic"
BASE = "smollm2-135m-instruct"


@pytest.fixture(scope="module")
def real_run(tmp_path_factory, smollm2):
    workdir = tmp_path_factory.mktemp("real-model-run")
    link = subprocess.run(
        [
            sys.executable,
            "-m",
            "snakeskills.models.pretrained",
            "smollm2-135m-instruct",
            "--link",
            "models/SmolLM2-135M-Instruct",
        ],
        capture_output=True,
        text=True,
        cwd=workdir,
        timeout=600,
    )
    assert link.returncode == 0, link.stderr[-3000:]
    assert (workdir / "models/SmolLM2-135M-Instruct").resolve() == smollm2.resolve()
    process = run_snakemake(workdir, "--cores", "2", configfile=EXAMPLE, timeout=1800)
    assert process.returncode == 0, process.stdout[-5000:] + process.stderr[-5000:]
    return workdir / RESULTS


def rows(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_tuned_real_model_gains_on_held_out_problems(real_run):
    summary = json.loads((real_run / "eval/summary.json").read_text())
    base = summary[BASE]["arithmetic"]["pass@1[avg-of-2]"]
    tuned = summary["sft-round1"]["arithmetic"]["pass@1[avg-of-2]"]
    assert base["num_entries"] == tuned["num_entries"] == 96
    assert tuned["symbolic_correct"] - base["symbolic_correct"] >= 20, (base, tuned)
    assert tuned["truncated"] < base["truncated"], "the tuned model learned to end its answers"


def test_prompts_are_rendered_with_the_models_chat_template(real_run):
    logs = sorted((real_run / "logs/generate").rglob("*.log"))
    assert len(logs) == 4 + 2 * 2  # base: 4 train seeds, 2 test seeds; sft-round1: 2 test seeds
    for log in logs:
        match = re.search(
            r"model input of the first row \(\d+ tokens, ids start \[([\d, ]+)\]\): (.*)$", log.read_text(), re.M
        )
        assert match, log
        ids = [int(token) for token in match.group(1).split(", ")]
        text = json.loads(match.group(2))
        assert ids[0] == 1 and ids[1] != 1, "one <|im_start|> opens the prompt"
        assert text.startswith("<|im_start|>system\n") and text.count("<|im_start|>") == 3
        assert "<|im_start|>user\nSolve the following math problem." in text
        assert text.endswith("<|im_end|>\n<|im_start|>assistant\n")


def test_most_rows_end_by_eos(real_run):
    for model in (BASE, "sft-round1"):
        generated = [
            row for seed in (0, 1) for row in rows(real_run / f"judge/{model}/arithmetic/test/output-rs{seed}.jsonl")
        ]
        stopped = sum(row["finish_reason"] == "stop" for row in generated) / len(generated)
        assert stopped > 0.5, (model, stopped)
        assert all(row["num_generated_tokens"] <= 48 for row in generated)


def test_sft_examples_learn_the_assistant_turn_and_its_eos(real_run, smollm2, tmp_path):
    tokenizer = AutoTokenizer.from_pretrained(smollm2)
    start, eos = tokenizer.convert_tokens_to_ids("<|im_start|>"), tokenizer.eos_token_id
    examples = rows(real_run / "sft/sft-round1/data.jsonl")
    stats = json.loads((real_run / "sft/sft-round1/stats.json").read_text())
    assert len(examples) == stats["kept"] >= 20
    prepared = [
        to_prompt_completion(record, chat_template=True, chat_template_kwargs={}, tokenizer=tokenizer)
        for record in examples
    ]
    trained, _ = sft_training_rows(smollm2, prepared, tmp_path, max_length=256)  # what SFTTrainer trains on
    assert len(trained) == len(examples)
    for record, example, row in zip(examples, prepared, trained, strict=True):
        prompt_length = len(example["prompt_ids"])
        assert row["input_ids"][0] == start and row["input_ids"][1] != start
        assert row["labels"][:prompt_length] == [IGNORE_INDEX] * prompt_length
        learned = row["labels"][prompt_length:]
        assert learned[-1] == eos and tokenizer.decode(learned[:-1]) == record["messages"][-1]["content"]
    metrics = json.loads((real_run / "models/sft-round1/adapter/training_metrics.json").read_text())
    assert metrics["num_examples"] == len(examples)


def test_long_jobs_log_how_far_along_they_are(real_run):
    """The real run's jobs say how far along they are: each generation chunk logs rows done / total, rows/s,
    generated tokens/s, elapsed time and an ETA (or done at its end), at least every 30 s; the SFT job logs
    step i/N with the loss, examples/s and an ETA, and its total time."""
    progress = re.compile(
        r"generate chunk0-of-1\.jsonl: (\d+)/(\d+) rows \([\d.]+%\), [\d.]+ rows/s, [\d.]+ generated tokens/s, "
        r"elapsed \w+, (ETA \w+|done)$",
        re.M,
    )
    for log in sorted((real_run / "logs/generate").rglob("*.log")):
        lines = progress.findall(log.read_text())
        assert lines and lines[-1][2] == "done" and lines[-1][0] == lines[-1][1], (log, lines)
        done = [int(line[0]) for line in lines]
        assert done == sorted(done), log
        # from the model's load to the end, a line at least every 30 s (inside a long batch too: its step)
        stamps = [
            datetime.datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f")
            for line in log.read_text().splitlines()
            if "loaded model" in line or " snakeskills.progress " in line
        ]
        gaps = [(later - earlier).total_seconds() for earlier, later in itertools.pairwise(stamps)]
        assert len(stamps) >= 2 and max(gaps) <= 30, (log, gaps)
    sft_log = (real_run / "logs/sft/sft-round1.log").read_text()
    step_line = r"step (\d+)/(\d+), loss [\d.]+, learning rate [\d.e-]+, [\d.]+ examples/s, elapsed \w+, ETA \w+$"
    steps = re.findall(step_line, sft_log, re.M)
    done = [int(step) for step, _ in steps]
    assert len(steps) >= 2 and done == sorted(done) and {total for _, total in steps} == {steps[0][1]}, sft_log
    assert re.search(rf"training done: {steps[0][1]} steps in \w+$", sft_log, re.M), sft_log[-3000:]
