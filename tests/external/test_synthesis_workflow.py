"""Problem synthesis for real, in the workflow: SmolLM2-135M-Instruct writes new sums from train problems, the
fine-tuned SmolLM2 teacher (conftest.arithmetic_teacher) answers each 5 times, a problem is labelled when all five
agree (synthesis.label.min_agreement 1.0), and the embedded tiny student trains on the synthesized problems only:
no answer of the train split is used (synthesis.sources.problems all, synthesis.sft_data only). The arithmetic
skill computes every parsed a+b exactly, which is the ground truth for parse rate and label accuracy. Eval problems
injected into the writer's output must all be removed by decontamination, and a run killed while the solver
samples resumes to the same labels. The LLM contamination check, added to the finished run, judges every new
problem beside its most similar eval problem with SmolLM2.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
import yaml
from conftest import REPO, job_counts, run_snakemake, shrunk_default_config, write_config

from snakeskills.data.synthetic import arithmetic_answer
from snakeskills.job import snakemake_command
from snakeskills.synthesis.contamination_check import NO_SHARED_WORD_JUDGEMENT
from snakeskills.synthesis.problems import problem_key

pytestmark = pytest.mark.slow

RESULTS = "results/synthesis"
SOURCES, NEW_PER_SOURCE = 320, 3
# the test teacher is trained on sums of two numbers from 10 to 99; on others (a one-digit or a three-digit operand)
# its five samples often agree on a wrong answer, so the new problems are kept to its range
TWO_DIGIT_SUM = r"^\s*[1-9]\d\s*\+\s*[1-9]\d\s*$"
WRITER_PROMPT = (
    "Write a new sum of two numbers below 100, like the given one.\n\n"
    "Sum: 12+30\nNew sum: 45+17\n\nSum: 63+8\nNew sum: 21+54\n\nSum: 7+88\nNew sum: 39+6\n\n"
    "Sum: {problem}\nNew sum:"
)


def synthesis_config(workdir: Path, smollm2: Path, teacher: Path) -> Path:
    # 384 eval problems: the student's gain is measured to about a point (its two seeds' pass@1 differed by 0.5-1.1
    # points), where 96 left it within 6
    config = shrunk_default_config({"bootstrap": 4800, "validation": 100, "train": 320, "test": 384})
    config["experiment"] = "synthesis"
    config["sft"]["training"]["num_epochs"] = 40  # about 150 labelled problems: more epochs, as in the teacher test
    config["teacher"] = {
        "model": {"path": str(teacher)},
        "prompt": {"user": "{problem}=", "chat_template": True},
        "generation": {
            "backend": "hf",
            "device": "cpu",
            "batch_size": 64,
            "rows_per_flush": 64,
            "sampling": {"temperature": 0.7, "max_new_tokens": 12},
        },
        "evaluate": False,
    }
    config["synthesis"] = {
        "writer": "own",
        "name": "smollm2-writer",
        "model": {"path": str(smollm2)},
        "generation": {
            "backend": "hf",
            "device": "cpu",
            "batch_size": 64,
            "sampling": {"temperature": 1.0, "max_new_tokens": 10, "stop": ["\n"]},
        },
        "prompt": {"user": WRITER_PROMPT, "chat_template": False},
        "sources": {"problems": "all", "max_problems": SOURCES, "new_per_problem": NEW_PER_SOURCE},
        "filter": {"pattern": TWO_DIGIT_SUM},
        "label": {"solver": "teacher", "num_samples": 5, "min_agreement": 1.0},
        "sft_data": "only",
    }
    return write_config(workdir / "config.yaml", config)


def rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


# eval problems in the kept form written the way a writer might, with other spacing: decontamination must catch
# every one
def injected_rows(test_split: Path, source: dict) -> list[dict]:
    in_form = [row for row in rows(test_split) if re.match(TWO_DIGIT_SUM, row["problem"])]
    return [
        {**source, "generation": " " + row["problem"].replace("+", " + "), "finish_reason": "stop"}
        for row in in_form[:8]
    ]


@pytest.fixture(scope="module")
def synthesis_run(tmp_path_factory, smollm2, arithmetic_teacher):
    workdir = tmp_path_factory.mktemp("synthesis-run")
    configfile = synthesis_config(workdir, smollm2, arithmetic_teacher)
    results = workdir / RESULTS
    writer_chunk = results / "generate/smollm2-writer/arithmetic/synth-round1-sources/rs0/chunk0-of-1.jsonl"
    test_split = results / "data/arithmetic/test.jsonl"
    targets = [str(path.relative_to(workdir)) for path in (writer_chunk, test_split)]
    first = run_snakemake(workdir, "--cores", "2", *targets, configfile=configfile)
    assert first.returncode == 0, first.stdout[-4000:] + first.stderr[-4000:]
    written = rows(writer_chunk)
    injected = injected_rows(test_split, written[0])
    writer_chunk.write_text("".join(json.dumps(row) + "\n" for row in injected + written))
    process = run_snakemake(workdir, "--cores", "2", configfile=configfile, timeout=1800)
    assert process.returncode == 0, process.stdout[-5000:] + process.stderr[-5000:]
    return workdir, configfile, injected


def test_most_written_texts_parse_into_new_problems(synthesis_run):
    workdir, _, injected = synthesis_run
    results = workdir / RESULTS
    counts = json.loads((results / "synthesis/round1/arithmetic/filter.json").read_text())
    written = counts["generated"] - len(injected)
    assert written == SOURCES * NEW_PER_SOURCE
    assert counts["parsed"] + counts["off_pattern"] - len(injected) > 0.8 * written, counts
    dropped = rows(results / "synthesis/round1/arithmetic/dropped.jsonl")
    off_pattern_sums = [row for row in dropped if row["reason"] == "off_pattern" and arithmetic_answer(row["problem"])]
    assert counts["parsed"] + len(off_pattern_sums) - len(injected) > 0.6 * written, "most are sums"
    assert counts["parsed"] - len(injected) > 0.15 * written, "enough are sums of two numbers from 10 to 99"
    problems = rows(results / "data/arithmetic/synth-round1-problems.jsonl")
    assert all(arithmetic_answer(problem["problem"]) is not None for problem in problems)
    train = {problem_key(row["problem"]) for row in rows(results / "data/arithmetic/train.jsonl")}
    assert not train & {problem_key(problem["problem"]) for problem in problems}, "no copy of a train problem"
    assert {problem["generated_by"] for problem in problems} == {"smollm2-writer"}


def test_injected_eval_problems_are_all_removed(synthesis_run):
    workdir, _, injected = synthesis_run
    results = workdir / RESULTS
    eval_keys = {problem_key(row["problem"]) for row in rows(results / "data/arithmetic/test.jsonl")}
    problems = rows(results / "data/arithmetic/synth-round1-problems.jsonl")
    assert not eval_keys & {problem_key(problem["problem"]) for problem in problems}
    contaminated = [
        row for row in rows(results / "synthesis/round1/arithmetic/dropped.jsonl") if row["reason"] == "contaminated"
    ]
    caught = {row["generation"] for row in contaminated}
    assert all(row["generation"] in caught for row in injected), "each injected eval problem is dropped as contaminated"
    assert all(row["score"] == 1.0 and row["eval_benchmark"] == "arithmetic" for row in contaminated[: len(injected)])


def test_majority_labels_are_right_and_feed_the_students_sft(synthesis_run):
    workdir, _, _ = synthesis_run
    results = workdir / RESULTS
    label = json.loads((results / "synthesis/round1/arithmetic/label.json").read_text())
    assert label["labelled"] >= 100 and label["label_checked"] == label["labelled"], label
    assert label["label_accuracy"] >= 0.9, label
    labelled = rows(results / "data/arithmetic/synth-round1.jsonl")
    assert all(record["agreement"] == 1.0 and record["labelled_by"] == "teacher" for record in labelled)
    assert {"source_id", "generated_by", "round", "expected_answer"} <= set(labelled[0])
    stats = json.loads((results / "sft/sft-round1/stats.json").read_text())
    assert list(stats["kept_by_source"]) == ["synthesized"] and stats["kept"] > 0
    assert not (results / "judge/base/arithmetic/train").exists(), "no train-split answer was judged"
    funnel = (results / "eval/summary.txt").read_text()
    assert "synthesized problems per round" in funnel and "round1  arithmetic" in funnel
    assert (results / "report/synthesis_funnel.png").stat().st_size > 0


def test_student_trained_on_synthesized_problems_only_gains(synthesis_run):
    workdir, _, _ = synthesis_run
    summary = json.loads((workdir / RESULTS / "eval/summary.json").read_text())
    score = {model: summary[model]["arithmetic"]["pass@1[avg-of-2]"]["symbolic_correct"] for model in summary}
    # measured on a 2-core AVX2 machine: 26.17 -> 39.32 (+13.15); the training trajectory differs with the CPU's
    # kernels (bench/demo_kernels.py), so the bar sits well below
    assert score["sft-round1"] - score["base"] >= 7, score


def test_killed_while_labelling_resumes_to_the_same_labels(synthesis_run):
    """Two of the solver's seeds and everything made from them are deleted, the labelling is run again and killed
    (the whole process group) while the solver samples, then resumed: the same labels and judged samples."""
    workdir, configfile, _ = synthesis_run
    results = workdir / RESULTS
    outputs = [
        results / "data/arithmetic/synth-round1.jsonl",
        results / "synthesis/round1/arithmetic/judged.jsonl",
        results / "synthesis/round1/arithmetic/label.json",
    ]
    reference = {path: path.read_bytes() for path in outputs}
    for path in outputs:
        path.unlink()
    for seed in (0, 1):
        shutil.rmtree(results / f"generate/teacher/arithmetic/synth-round1-problems/rs{seed}")
    targets = [str(path.relative_to(workdir)) for path in outputs]
    command = snakemake_command(REPO / "Snakefile", workdir, configfile, "--cores", "2", *targets)
    process = subprocess.Popen(
        command, cwd=workdir, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    progress = list((results / "generate/teacher").rglob("*.progress"))
    deadline = time.monotonic() + 300
    while not progress and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.5)
        progress = [path for path in (results / "generate/teacher").rglob("*.progress") if path.stat().st_size]
    killed = process.poll() is None
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    assert killed and progress, "the solver was killed part-way through a chunk"
    assert run_snakemake(workdir, "--unlock", configfile=configfile).returncode == 0
    resumed = run_snakemake(workdir, "--cores", "2", "--rerun-incomplete", *targets, configfile=configfile)
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    for path in outputs:
        assert path.read_bytes() == reference[path], path
    logs = [
        path.read_text() for path in (results / "logs/generate/teacher/arithmetic/synth-round1-problems").rglob("*.log")
    ]
    assert any("rows already done" in log for log in logs), "a killed chunk resumed from its progress file"


def test_the_llm_contamination_check_added_to_a_finished_run(synthesis_run, smollm2, tmp_path):
    """synthesis.decontamination.llm_check switched on in a copy of the finished run, with SmolLM2-135M-Instruct
    (stock, hf on the CPU, chat template, greedy) as judge.llm on the shipped same-problem prompt (2 of its
    examples; the one check job gets both cores with Snakemake's --set-threads): only the check's jobs run.
    Commuted copies of eval sums ("b+a" for an eval "a+b") share no n-gram with them, so they pass the n-gram check
    and reach the judge beside the very eval problem they were made from. A 135M model cannot tell (it answered No
    on every pair tried, copies included: BENCHMARKS.md), so this tests the machinery with a real model: each
    candidate judged beside its most similar eval problem, the verdicts the model's own text, and what it called
    the same removed."""
    workdir, configfile, _ = synthesis_run
    copy = tmp_path / "run"
    shutil.copytree(workdir, copy, symlinks=True)
    results = copy / RESULTS
    eval_rows = rows(results / "data/arithmetic/test.jsonl")
    known = {problem_key(row["problem"]) for row in eval_rows + rows(results / "data/arithmetic/train.jsonl")}
    commuted = {}
    for row in eval_rows:
        match = re.match(r"^\s*(\d+)\s*\+\s*(\d+)\s*$", row["problem"])
        if match and re.match(TWO_DIGIT_SUM, row["problem"]) and problem_key(f"{match[2]}+{match[1]}") not in known:
            commuted[f"{match[2]}+{match[1]}"] = row["problem"]
    commuted = dict(list(commuted.items())[:6])
    writer_chunk = results / "generate/smollm2-writer/arithmetic/synth-round1-sources/rs0/chunk0-of-1.jsonl"
    written = rows(writer_chunk)
    injected = [{**written[0], "generation": f" {text}", "finish_reason": "stop"} for text in commuted]
    writer_chunk.write_text("".join(json.dumps(row) + "\n" for row in injected + written))
    config = yaml.safe_load(configfile.read_text())
    config["judge"]["llm"] = {
        "model": {"path": str(smollm2)},
        "prompt": {"template": "judge-math", "chat_template": True},
        "generation": {
            "backend": "hf",
            "device": "cpu",
            "batch_size": 64,
            "sampling": {"temperature": 0.0, "max_new_tokens": 40},
        },
    }
    config["synthesis"]["decontamination"] = {
        "llm_check": "judge",
        "llm_prompt": {"template": "same-problem", "num_few_shot": 2, "chat_template": True},
    }
    check = results / "synthesis/round1/arithmetic/llm-check.json"
    arguments = ["--cores", "2", str(check.relative_to(copy)), "--set-threads", "synthesis_llm_check=2"]
    process = run_snakemake(copy, *arguments, configfile=write_config(copy / "llm-check.yaml", config))
    assert process.returncode == 0, process.stdout[-4000:] + process.stderr[-4000:]
    assert job_counts(process.stdout + process.stderr) == {
        "contamination_check_settings": 1,
        "synthesis_problems": 1,
        "synthesis_llm_check": 1,
    }
    candidates = rows(results / "synthesis/round1/arithmetic/candidates.jsonl")
    checked = rows(results / "synthesis/round1/arithmetic/llm-check.jsonl")
    assert [row["id"] for row in checked] == [row["id"] for row in candidates] and len(candidates) > 100
    similar = {row["problem"]: row for row in checked}
    for text, eval_problem in commuted.items():
        assert similar[text]["similar_problem"] == eval_problem and similar[text]["word_overlap"] == 1.0, text
    eval_problems = {row["problem"] for row in eval_rows}
    assert all(row["similar_problem"] in eval_problems for row in checked), "every sum shares '+' with an eval sum"
    judgements = [row["contamination_judgement"] for row in checked]
    assert all(judgement.strip() and judgement != NO_SHARED_WORD_JUDGEMENT for judgement in judgements)
    assert len(set(judgements)) > 1, "the model's own text, row by row"
    kept = rows(results / "data/arithmetic/synth-round1-problems.jsonl")
    assert kept == [row for row, verdict in zip(candidates, checked, strict=True) if not verdict["llm_contaminated"]]
    stats = json.loads(check.read_text())
    assert stats == {
        "checked": len(checked),
        "asked": len(checked),
        "contaminated": len(checked) - len(kept),
        "clean": len(kept),
    }
    log = (results / "logs/synthesis/round1/arithmetic/llm-check.log").read_text()
    assert "<|im_start|>system" in log and "contamination check done" in log
