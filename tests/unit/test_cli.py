"""The per-chunk jobs' command line (snakeskills.cli) and how settings reach it through a shell; the samples command."""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys

import pytest
from snakemake.utils import format as snakemake_format

from snakeskills.cli import parse_wildcards
from snakeskills.io import read_jsonl, write_json, write_jsonl
from snakeskills.job import JobSettings
from snakeskills.plan.layout import Layout


def test_parse_wildcards_reads_snakemakes_form():
    text = "benchmark=gsm8k,chunk=3,model=sft-round1,num_chunks=10,seed=7,split=test"
    assert parse_wildcards(text) == {
        "benchmark": "gsm8k",
        "chunk": "3",
        "model": "sft-round1",
        "num_chunks": "10",
        "seed": "7",
        "split": "test",
    }
    with pytest.raises(argparse.ArgumentTypeError, match="name=value"):
        parse_wildcards("chunk=3,seed")
    with pytest.raises(argparse.ArgumentTypeError, match="lack num_chunks"):
        parse_wildcards("chunk=3,seed=1")


def test_job_settings_reach_the_command_as_one_quoted_json_argument():
    settings = {"regex": r"\$(\d+)'", "note": '$(touch PWNED) `id`; "quoted"', "timeout_seconds": 5}
    command = snakemake_format("judge --settings-json {params.judge:q} --threads 2", params=_params(settings))
    arguments = shlex.split(command)
    assert arguments[:2] == ["judge", "--settings-json"] and arguments[3:] == ["--threads", "2"]
    assert json.loads(arguments[2]) == settings
    # the params rerun trigger records repr(): the dict's, so equal settings give equal records
    assert repr(JobSettings(settings)) == repr(settings)


def _params(settings: dict):
    return argparse.Namespace(judge=JobSettings(settings))


def run_cli(*arguments: str, cwd=None) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "snakeskills.cli", *arguments]
    return subprocess.run(command, capture_output=True, text=True, cwd=cwd)


def test_judge_command_judges_a_chunk(tmp_path):
    generations = tmp_path / "chunk.jsonl"
    write_jsonl(
        generations,
        [
            {"id": "a", "problem": "1+1", "expected_answer": "2", "generation": "so \\boxed{2}"},
            {"id": "b", "problem": "2+2", "expected_answer": "4", "generation": "no answer"},
        ],
    )
    settings = {"extraction": "boxed", "regex": None, "equivalence": "math-verify", "timeout_seconds": 5}
    settings["memory_limit_mb"] = 2048
    process = run_cli(
        "judge",
        "--settings-json",
        json.dumps(settings),
        "--threads",
        "1",
        "--input",
        str(generations),
        "--output",
        str(tmp_path / "judged.jsonl"),
        "--log",
        str(tmp_path / "judge.log"),
    )
    assert process.returncode == 0, process.stderr + (tmp_path / "judge.log").read_text()
    judged = read_jsonl(tmp_path / "judged.jsonl")
    assert [row["symbolic_correct"] for row in judged] == [True, False]
    assert [row["predicted_answer"] for row in judged] == ["2", None]


def test_a_judge_job_finds_a_users_extraction_in_the_working_directory(tmp_path):
    """As a workflow's judge job runs (`python -m snakeskills.cli` in the run's folder): a module there is the
    user's `module:function`."""
    (tmp_path / "answers.py").write_text("def after_equals(text, regex):\n    return text.rpartition('=')[2] or None\n")
    write_jsonl(
        tmp_path / "chunk.jsonl", [{"id": "a", "problem": "1+1", "expected_answer": "2", "generation": "1+1=2"}]
    )
    settings = {"extraction": "answers:after_equals", "regex": None, "equivalence": "exact"}
    settings.update(timeout_seconds=5, memory_limit_mb=None)
    process = run_cli(
        *("judge", "--settings-json", json.dumps(settings), "--threads", "1", "--input", "chunk.jsonl"),
        *("--output", "judged.jsonl", "--log", "judge.log"),
        cwd=tmp_path,
    )
    assert process.returncode == 0, process.stderr
    (row,) = read_jsonl(tmp_path / "judged.jsonl")
    assert (row["predicted_answer"], row["symbolic_correct"]) == ("2", True)


def test_bad_settings_fail_naming_the_argument_or_file(tmp_path):
    process = run_cli(
        "judge",
        "--settings-json",
        "{not json",
        "--threads",
        "1",
        "--input",
        str(tmp_path / "missing.jsonl"),
        "--output",
        str(tmp_path / "out.jsonl"),
        "--log",
        str(tmp_path / "judge.log"),
    )
    assert process.returncode == 1
    assert "--settings-json is not JSON" in process.stderr

    settings_file = tmp_path / "settings.json"
    write_json(settings_file, {"model": {}, "generation": {}})
    process = run_cli(
        "generate",
        "--wildcards",
        "chunk=0,num_chunks=1,seed=0",
        "--settings",
        str(settings_file),
        "--threads",
        "1",
        "--gpus",
        "0",
        "--output",
        str(tmp_path / "out.jsonl"),
        "--log",
        str(tmp_path / "generate.log"),
    )
    assert process.returncode == 1
    assert f"{settings_file}: settings file lacks split, model_path, adapter_path, prompt" in process.stderr
    assert not (tmp_path / "out.jsonl").exists()


# ---------------------------------------------------------------- samples: judged samples for people to read


def write_judged(results, model: str, benchmark: str, rows: list[dict], split: str = "test", seed: int = 0) -> None:
    write_jsonl(results / Layout().judged.format(model=model, benchmark=benchmark, split=split, seed=seed), rows)


def judged(index: int, correct: bool, **extra) -> dict:
    row = {"id": f"p{index}", "problem": f"{index}+{index}", "expected_answer": str(2 * index)}
    answer = str(2 * index) if correct else "0"
    row.update(generation=f"so \\boxed{{{answer}}}", predicted_answer=answer, symbolic_correct=correct)
    return {**row, **extra}


@pytest.fixture
def sample_results(tmp_path):
    results = tmp_path / "results" / "exp"
    rows = [judged(index, index % 3 == 0, extraction_route="boxed") for index in range(9)]
    write_judged(results, "base", "add", rows)
    write_judged(results, "sft-round1", "add", [judged(index, True) for index in range(3)])  # judged before routes
    return results


def test_samples_prints_chosen_samples_of_a_results_folder(sample_results):
    process = run_cli("samples", str(sample_results), "--model", "base", "--verdict", "incorrect", "--limit", "3")
    assert process.returncode == 0, process.stderr
    out = process.stdout
    assert "base on add (test): 3 of 6 incorrect shown; 9 samples in all; chosen with seed 0" in out
    assert out.count("INCORRECT") == 3 and "CORRECT " not in out.replace("INCORRECT", "")
    assert "route: boxed" in out and "verdict: incorrect" in out and "sft-round1" not in out
    # the same samples again from `results`, the folder of its one experiment
    again = run_cli("samples", str(sample_results.parent), "--model", "base", "--verdict", "incorrect", "--limit", "3")
    assert again.returncode == 0, again.stderr
    assert again.stdout == out
    # records judged before extraction_route was recorded show a dash
    older = run_cli("samples", str(sample_results), "--model", "sft-round1")
    assert "route: unknown" in older.stdout and "2 of 3 correct shown; chosen" in older.stdout


def test_samples_cuts_long_texts_unless_full(sample_results):
    write_judged(sample_results, "base", "long", [judged(1, True, generation="a" * 3000 + " \\boxed{2}")])
    cut = run_cli("samples", str(sample_results), "--benchmark", "long", "--max-chars", "100")
    assert cut.returncode == 0, cut.stderr
    assert "characters cut; --full shows them" in cut.stdout and "a" * 100 not in cut.stdout
    full = run_cli("samples", str(sample_results), "--benchmark", "long", "--full")
    assert "a" * 3000 + " \\boxed{2}" in full.stdout


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--model", "bse"], "no model 'bse' in {results}; models there: base, sft-round1"),
        (["--benchmark", "gsm8k"], "no benchmark 'gsm8k' in {results}; benchmarks there: add"),
        (["--split", "train"], "no split 'train' in {results}; splits there: test"),
        (
            ["--model", "sft-round1", "--verdict", "incorrect"],
            "no judged samples match verdict incorrect; what there is:\n"
            "  sft-round1 on add (test): 3 samples, 3 correct, 0 incorrect; routes: unknown 3",
        ),
        (["--route", "regex", "--model", "base"], "no judged samples match route 'regex'"),
    ],
)
def test_samples_errors_say_what_there_is(sample_results, arguments, message):
    process = run_cli("samples", str(sample_results), *arguments)
    assert process.returncode == 1 and process.stdout == ""
    assert message.format(results=sample_results) in process.stderr


def test_samples_names_a_missing_results_folder(tmp_path):
    process = run_cli("samples", str(tmp_path / "nowhere"))
    assert process.returncode == 1
    assert f"snakeskills error: no results folder {tmp_path / 'nowhere'}" in process.stderr
    bad = run_cli("samples", str(tmp_path), "--limit", "0")
    assert bad.returncode == 2 and "--limit: must be at least 1; got 0" in bad.stderr


def test_the_cli_starts_without_polars():
    """Every job runs the CLI, some in vLLM's environment, which has no polars: building its parser imports none."""
    import subprocess
    import sys

    code = "import sys; sys.modules['polars'] = None; from snakeskills.cli import build_parser; build_parser()"
    process = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert process.returncode == 0, process.stderr[-2000:]
