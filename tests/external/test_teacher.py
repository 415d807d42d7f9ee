"""Teacher -> student (config key `teacher`): a teacher model samples the train split once, the student learns from
its judged-correct samples as text.

The plan (dry runs) is checked for every teacher.later_rounds x sft.rounds_data; the slow test runs the real thing:
a SmolLM2-135M-Instruct teacher behind `transformers serve`, reached through the openai backend, and the embedded
tiny model (a character tokenizer, 99 tokens against SmolLM2's 49,152) as the student.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml
from conftest import (
    NO_SERVER,
    planned_jobs,
    run_snakemake,
    shrunk_default_config,
    teacher_section,
    write_config,
)

from snakeskills.results.comparison import format_comparison

RESULTS = "results/teacher"


def teacher_config(tmp_path, *, rounds=2, rounds_data="replace", name="config.yaml", split_sizes=None, **teacher):
    config = shrunk_default_config(split_sizes or {"bootstrap": 4800, "validation": 100, "train": 200, "test": 96})
    config["experiment"] = "teacher"
    config["rounds"] = rounds
    config["sft"]["rounds_data"] = rounds_data
    config["teacher"] = teacher_section(**teacher)
    return write_config(tmp_path / name, config)


def sft_data_models(jobs, model) -> list[str]:
    (job,) = [job for job in jobs if job["rule"] == "sft_data" and job["wildcards"]["model"] == model]
    return list(dict.fromkeys(re.search(r"/judge/([^/]+)/", path).group(1) for path in job["input"]))


def generate_jobs(jobs) -> set[tuple[str, str, str]]:
    return {
        (job["wildcards"]["model"], job["wildcards"]["split"], job["wildcards"]["seed"])
        for job in jobs
        if job["rule"] == "generate"
    }


# ---------------------------------------------------------------- the plan (dry runs)


def test_teacher_jobs_use_its_backend_settings(tmp_path):
    """The teacher's settings file holds its own model, prompt and sampling, not the student's."""
    configfile = teacher_config(tmp_path)
    settings = tmp_path / RESULTS / "settings/generate/teacher/arithmetic/train.json"
    process = run_snakemake(tmp_path, "--cores", "1", str(settings.relative_to(tmp_path)), configfile=configfile)
    assert process.returncode == 0, process.stdout[-3000:] + process.stderr[-3000:]
    teacher = json.loads(settings.read_text())
    assert teacher["generation"]["backend"] == "openai" and teacher["generation"]["openai"]["base_url"] == NO_SERVER
    assert teacher["prompt"]["user"] == "{problem}=" and teacher["prompt"]["chat_template"] is True
    assert teacher["generation"]["sampling"]["temperature"] == 0.7
    assert teacher["model"] == {"path": None, "dtype": "auto", "trust_remote_code": False}
    assert teacher["model_path"] is None and teacher["adapter_path"] is None


def test_comparison_says_how_much_of_the_teachers_lead_each_round_closed():
    def metrics(score):
        modes = ("pass@1[avg-of-2]", "majority@2", "pass@2")
        return {mode: {"num_entries": 10, "symbolic_correct": score} for mode in modes}

    summary = {
        "base": {"sums": metrics(20.0)},
        "sft-round1": {"sums": metrics(35.0)},
        "teacher": {"sums": metrics(50.0)},
    }
    table = format_comparison(summary, "base", "teacher")
    gain = "sft-round1 vs base on sums: pass@1[avg-of-2] symbolic_correct +15.00 points (50% of the teacher's +30.00)"
    assert gain in table
    assert "teacher vs base on sums: pass@1[avg-of-2] symbolic_correct +30.00 points" in table.splitlines()[-1]
    assert "teacher's" not in format_comparison(summary, "base")


# ---------------------------------------------------------------- a real teacher and student (slow)


def served_teacher(teacher: Path, workdir: Path) -> Path:
    """A copy of the teacher whose generation config samples: `transformers serve` decodes greedily, whatever
    temperature a request sends, unless the checkpoint's generation_config.json says do_sample."""
    served = workdir / "served-teacher"
    served.mkdir()
    for path in teacher.iterdir():
        if path.is_file():
            (served / path.name).symlink_to(path)
    generation_config = json.loads((teacher / "generation_config.json").read_text())
    (served / "generation_config.json").unlink()
    (served / "generation_config.json").write_text(json.dumps({**generation_config, "do_sample": True}))
    return served


@pytest.fixture(scope="module")
def teacher_run(tmp_path_factory, arithmetic_teacher):
    from servers import TransformersServer

    workdir = tmp_path_factory.mktemp("teacher-run")
    served = served_teacher(arithmetic_teacher, workdir)
    # the teacher's 512 requests, 8 in flight, batched by the server: most of this run's time was the teacher
    # answering one request at a time (410 of 540 s in a loaded suite run)
    server = TransformersServer(served, continuous_batching=True).start()
    try:
        configfile = teacher_config(
            workdir,
            base_url=server.base_url,
            model=str(served),
            max_concurrency=8,
            split_sizes={"bootstrap": 4800, "validation": 100, "train": 320, "test": 96},
            train_num_seeds=1,
        )
        config = yaml.safe_load(configfile.read_text())
        # the teacher's few hundred answers are a tenth of what the default's student learns from: more epochs over
        # them. On an AVX2 CPU: a student bootstrapped to 0.25, 10 epochs: +5.21; 40 epochs: +11.98; the default's
        # student (0.5), 40 epochs: 21.35 % -> 38.02 % (+16.67)
        config["sft"]["training"]["num_epochs"] = 40
        write_config(configfile, config)
        process = run_snakemake(workdir, "--cores", "2", configfile=configfile)
        peak_memory_gb = server.peak_memory_gb()
    finally:
        server.stop()
    assert process.returncode == 0, process.stdout[-5000:] + process.stderr[-5000:]
    return workdir, configfile, peak_memory_gb


@pytest.mark.slow
def test_student_gains_on_held_out_problems_from_a_real_teacher(teacher_run):
    workdir, *_ = teacher_run
    results = workdir / RESULTS
    summary = json.loads((results / "eval/summary.json").read_text())
    score = {model: summary[model]["arithmetic"]["pass@1[avg-of-2]"]["symbolic_correct"] for model in summary}
    assert list(summary) == ["base", "sft-round1", "sft-round2", "teacher"]
    assert score["teacher"] - score["base"] >= 10, score
    assert score["sft-round1"] - score["base"] >= 10, score
    table = (results / "eval/summary.txt").read_text()
    assert re.search(r"sft-round1 vs base on arithmetic: .* points \(\d+% of the teacher's \+[\d.]+\)", table), table


@pytest.mark.slow
def test_the_served_teacher_holds_a_bounded_memory(teacher_run):
    """Its continuous batching cache is bounded (servers.CONTINUOUS_BATCHING_BOUNDS), not sized from the machine's
    RAM (14.4 GB for this 135M-parameter teacher on a 24 GB machine)."""
    from servers import PEAK_MEMORY_BOUND_GB

    *_, peak_memory_gb = teacher_run
    assert peak_memory_gb < PEAK_MEMORY_BOUND_GB, peak_memory_gb


@pytest.mark.slow
def test_teacher_text_is_retokenized_for_the_student(teacher_run):
    from transformers import AutoTokenizer

    from snakeskills.training.sft import to_prompt_completion

    workdir, *_ = teacher_run
    results = workdir / RESULTS
    records = [json.loads(line) for line in (results / "sft/sft-round1/data.jsonl").read_text().splitlines()]
    assert records and {record["generated_by"] for record in records} == {"teacher"}
    # the student's prompt (no chat template, no system message), answered with the teacher's text
    assert records[0]["messages"][0] == {"role": "user", "content": f"{records[0]['problem']}="}
    generated = results / "generate/teacher/arithmetic/train/rs0/chunk0-of-1.jsonl"
    teacher_rows = [json.loads(line) for line in generated.read_text().splitlines()]
    assert {record["messages"][-1]["content"] for record in records} <= {row["generation"] for row in teacher_rows}
    # the teacher's tokens (SmolLM2's vocabulary) never reach the student: its own tokenizer encodes the text
    student = AutoTokenizer.from_pretrained(results / "models/sft-round1/adapter")
    assert len(student) < 128
    for record in records:
        example = to_prompt_completion(record, chat_template=False, chat_template_kwargs={}, tokenizer=student)
        ids = student(example["completion"], add_special_tokens=False)["input_ids"]
        assert student.unk_token_id not in example["prompt_ids"] + ids, record
        assert student.decode(ids) == record["messages"][-1]["content"]
    # the teacher was asked in its own chat format, through the chat API of its server
    log = next((results / "logs/generate/teacher/arithmetic/train").rglob("*.log")).read_text()
    assert "openai backend" in log and "(chat API)" in log


@pytest.mark.slow
def test_teacher_samples_are_made_once_and_reused_by_later_rounds(teacher_run, tmp_path):
    workdir, configfile, _ = teacher_run
    results = workdir / RESULTS
    round2 = json.loads((results / "sft/sft-round2/stats.json").read_text())
    assert (
        round2["kept_by_source"]["teacher"] == json.loads((results / "sft/sft-round1/stats.json").read_text())["kept"]
    )
    assert round2["kept_by_source"]["sft-round1"] > 0
    assert len(list((results / "logs/generate/teacher/arithmetic/train").rglob("*.log"))) == 1
    # a third round (the server is gone) reuses the teacher's files: no teacher job is planned
    config = yaml.safe_load(configfile.read_text())
    config["rounds"] = 3
    jobs = planned_jobs(workdir, write_config(tmp_path / "three-rounds.yaml", config))
    assert not [job for job in jobs if job["wildcards"].get("model") == "teacher"]
    assert sft_data_models(jobs, "sft-round3") == ["teacher", "sft-round2"]
