"""A fallback extraction that credits wrong statements, through the real ``snakemake`` (issue 53): a user's own JSONL
task asks which of two numbers is larger, the model answers one question with ``\\boxed{}`` and the others with the
wrong statement ``2>7`` (2 is larger than 7), and ``judge.regex`` reads the last number when there is no box, as the
shipped SmolLM2 examples set it. Each judged row says which route found its answer, metrics.json counts the routes,
and the summarize job warns that the correct verdicts rest on the fallback (the training data's counts and warnings
are tested on the same task without Snakemake: tests/unit/test_extraction_routes.py).

The model is a tiny Llama whose weights make it write a fixed text after a prompt's last character: its one layer
adds nothing to the residual stream, so its next token depends on the current token alone (embeddings one-hot, the
output layer a successor table), and greedy decoding follows a chain of characters. About 20 s on 2 cores: the
eval split only, one generate job."""

from __future__ import annotations

import json

import pytest
import yaml
from conftest import run_snakemake

from snakeskills.io import write_jsonl
from snakeskills.models.tiny_model import build_char_tokenizer

RESULTS = "results/fallback"
# what the model writes after a prompt's last character
CHAINS = {"?": "2>7", ".": "\\boxed{5}"}
# (problem, expected answer): "2>7" names 7 last, the right answer of the questions ending in "?"
PROBLEMS = [("Which is larger, 2 or 7?", "7"), ("Which is larger, 7 or 2?", "7"), ("Write the larger of 5 and 3.", "5")]
LAST_NUMBER = r"(-?\d+)"  # the shipped SmolLM2 examples' judge.regex


def save_scripted_llama(folder, chains: dict[str, str]) -> None:
    """A Llama with the character tokenizer that writes ``chains[c]`` after a prompt ending in ``c`` (greedy), then
    its end-of-sequence token; the characters of all chains must differ, as each has one successor."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    tokenizer = build_char_tokenizer()
    vocabulary = len(tokenizer)
    successor = {}
    for last, text in chains.items():
        ids = [*tokenizer.convert_tokens_to_ids([last, *text]), tokenizer.eos_token_id]
        for current, following in zip(ids, ids[1:], strict=False):
            assert successor.setdefault(current, following) == following, f"{text!r} repeats a character"
    config = LlamaConfig(
        vocab_size=vocabulary,
        hidden_size=vocabulary,
        intermediate_size=8,
        num_hidden_layers=1,
        num_attention_heads=1,
        num_key_value_heads=1,
        max_position_embeddings=64,
        tie_word_embeddings=False,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    model = LlamaForCausalLM(config)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.zero_()  # the layer's attention and MLP outputs are zero: the residual is the token's embedding
        model.model.embed_tokens.weight.copy_(torch.eye(vocabulary))
        model.model.norm.weight.fill_(1.0)
        for current in range(vocabulary):
            model.lm_head.weight[successor.get(current, tokenizer.eos_token_id), current] = 10.0
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)


@pytest.fixture(scope="module")
def fallback_run(tmp_path_factory):
    """The eval split's metrics of the scripted model on the comparison task, judged with a last-number judge.regex:
    (working folder, snakemake's output)."""
    workdir = tmp_path_factory.mktemp("fallback")
    save_scripted_llama(workdir / "scripted", CHAINS)
    for split in ("train", "test"):  # the train split is planned, not generated
        rows = [{"id": f"{split}-{i}", "problem": p, "expected_answer": a} for i, (p, a) in enumerate(PROBLEMS)]
        write_jsonl(workdir / f"{split}.jsonl", rows)
    config = {
        "experiment": "fallback",
        "model": {"name": "scripted", "build_tiny": False, "path": str(workdir / "scripted")},
        "benchmarks": {
            "compare": {
                "source": "jsonl",
                "jsonl": {"paths": {s: str(workdir / f"{s}.jsonl") for s in ("train", "test")}},
            }
        },
        "train_benchmarks": ["compare"],
        "prompt": {"user": "{problem}", "chat_template": False},
        "num_seeds": 1,
        "train_num_seeds": 1,
        "num_chunks": 1,
        "generation": {"backend": "hf", "batch_size": 4, "sampling": {"temperature": 0, "max_new_tokens": 12}},
        "judge": {"extraction": "boxed", "regex": LAST_NUMBER, "equivalence": "exact"},
        "sft": {  # round 1 is planned, not trained
            "lora": {"r": 4, "alpha": 8},
            "training": {"num_epochs": 1, "learning_rate": 1e-3, "batch_size": 4, "max_length": 32},
        },
    }
    (workdir / "config.yaml").write_text(yaml.safe_dump(config))
    targets = [f"{RESULTS}/metrics/scripted/compare/test/metrics.json"]
    process = run_snakemake(workdir, "--cores", "2", *targets, configfile=workdir / "config.yaml", timeout=300)
    output = process.stdout + process.stderr
    assert process.returncode == 0, output[-5000:]
    return workdir, output


def test_the_judged_rows_say_the_wrong_statements_were_credited_by_the_fallback(fallback_run):
    workdir, _ = fallback_run
    judged = workdir / RESULTS / "judge/scripted/compare/test/output-rs0.jsonl"
    rows = [json.loads(line) for line in judged.read_text().splitlines()]
    assert [(row["generation"], row["predicted_answer"], row["symbolic_correct"]) for row in rows] == [
        ("2>7", "7", True),
        ("2>7", "7", True),
        ("\\boxed{5}", "5", True),
    ]
    assert [row["extraction_route"] for row in rows] == ["regex fallback", "regex fallback", "boxed"]


def test_metrics_count_the_routes_and_summarize_warns(fallback_run):
    workdir, _ = fallback_run
    metrics = json.loads((workdir / RESULTS / "metrics/scripted/compare/test/metrics.json").read_text())
    assert metrics["compare"]["pass@1"]["symbolic_correct"] == 100.0
    routes = metrics["compare/extraction_routes"]
    assert routes["routes"] == {"boxed": {"samples": 1, "correct": 1}, "regex fallback": {"samples": 2, "correct": 2}}
    assert routes["correct_by_fallback"] == pytest.approx(200 / 3)
    table = (workdir / RESULTS / "metrics/scripted/compare/test/metrics.txt").read_text()
    assert "correct verdicts by a fallback (*): 66.67%" in table
    log = (workdir / RESULTS / "logs/summarize/scripted/compare/test.log").read_text()
    assert (
        "WARNING: warning: scripted on compare (test): 66.7% of the correct verdicts (2 of 3) rest on a fallback "
        "extraction (warnings.max_fallback_share 10%): 2 by regex fallback"
    ) in log, log
    assert "drop judge.regex" in log
