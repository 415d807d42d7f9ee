"""Self-improvement rounds, the report's plots and the SFT exports.

Fast tests: the plotting and export functions on hand-made data, and dry runs that show which files each
round's SFT data and training read (sft.rounds_data, sft.init) and that the shipped round examples plan.
Slow tests: one real 2-round run of a shrunken tiny default (accumulate + continue), checked from its
logs, its files and `snakemake --report`.
"""

from __future__ import annotations

import base64
import json
import re
from html import escape
from pathlib import Path

import pytest
import yaml
from conftest import (
    REPO,
    dry_run_counts,
    folders_as_the_plan_sees_them,
    planned_jobs,
    run_snakemake,
    shrunk_default_config,
    write_config,
)

from snakeskills.errors import SnakeskillsError
from snakeskills.plan.layout import Layout
from snakeskills.results import report, samples
from snakeskills.training.sft_data import llamafactory_dataset_info, to_alpaca, write_sft_exports

EXAMPLES = REPO / "config" / "examples"
PLOTS = ("pass_at_1", "gains", "pass_at_k", "generation_lengths", "sft_examples", "training_curves")


def rounds_config(tmp_path, *, rounds=2, rounds_data="replace", init="base", method="lora", name="config.yaml"):
    """The embedded default, shrunk to run fast (fewer problems, 2 seeds, 1 chunk), with the round settings.

    sft.method full drops the LoRA settings (a full fine-tune needs none) and lowers the learning rate.
    """
    config = shrunk_default_config({"bootstrap": 4800, "validation": 200, "train": 1000, "test": 200})
    config["experiment"] = "rounds"
    config["rounds"] = rounds
    config["sft"].update(rounds_data=rounds_data, init=init, method=method)
    if method == "full":
        del config["sft"]["lora"]
        config["sft"]["training"]["learning_rate"] = 1e-3
    return write_config(tmp_path / name, config)


def job_inputs(jobs, rule, model) -> list[str]:
    (job,) = [job for job in jobs if job["rule"] == rule and job["wildcards"].get("model") == model]
    return job["input"]


def judged_models(inputs) -> list[str]:
    return sorted({re.search(r"/judge/([^/]+)/", path).group(1) for path in inputs})


GENERATION_SETTINGS = "results/rounds/settings/generate/{model}/{benchmark}/{split}.json"

# ---------------------------------------------------------------- rounds in the DAG (dry runs)


def test_plots_and_exports_are_part_of_a_normal_run(tmp_path):
    counts = dry_run_counts(tmp_path, configfile=rounds_config(tmp_path, rounds=2))
    for plot in PLOTS:
        assert counts[f"plot_{plot}"] == 1
    jobs = planned_jobs(tmp_path, rounds_config(tmp_path, rounds=2))
    (sft_examples,) = [job for job in jobs if job["rule"] == "plot_sft_examples"]
    assert sft_examples["input"] == [
        "results/rounds/sft/sft-round1/stats.json",
        "results/rounds/sft/sft-round2/stats.json",
    ]
    (lengths,) = [job for job in jobs if job["rule"] == "plot_generation_lengths"]
    assert len(lengths["input"]) == 3 * 2  # base, sft-round1, sft-round2 on the test split, 2 seeds


def _plan_example(tmp_path, name, model_folder):
    configfile = EXAMPLES / name
    folders_as_the_plan_sees_them(tmp_path, model_folder, "datasets/gsm8k", "datasets/math-500")
    return yaml.safe_load(configfile.read_text()), configfile


def test_rest_em_example_plans_against_local_folders(tmp_path):
    config, configfile = _plan_example(tmp_path, "llama-3.2-1b-instruct-rest-em.yaml", "models/Llama-3.2-1B-Instruct")
    assert config["rounds"] == 3 and config["sft"]["rounds_data"] == "replace" and config["sft"]["init"] == "continue"
    counts = dry_run_counts(tmp_path, configfile=configfile)
    # base, sft-round1, sft-round2 sample the train split (5 seeds); all 4 models both test sets (4 seeds); 4 chunks
    assert counts["generate"] == 4 * (3 * 5 + 4 * 2 * 4)
    assert counts["sft_data"] == counts["sft"] == 3
    assert counts["summarize"] == 3 + 4 * 2 and counts["eval"] == 1
    jobs = planned_jobs(tmp_path, configfile)
    experiment = config["experiment"]
    assert f"results/{experiment}/models/sft-round2/adapter" in job_inputs(jobs, "sft", "sft-round3")
    assert judged_models(job_inputs(jobs, "sft_data", "sft-round3")) == ["sft-round2"]


def test_dataenvgym_example_plans_against_local_folders(tmp_path):
    config, configfile = _plan_example(tmp_path, "dataenvgym-iterate-train-eval.yaml", "models/Qwen2.5-1.5B-Instruct")
    assert config["sft"]["rounds_data"] == "accumulate" and config["sft"]["init"] == "base"
    rounds = config["rounds"]
    counts = dry_run_counts(tmp_path, configfile=configfile)
    synthesis = config["synthesis"]
    # per round, the agent writes (new_per_problem seeds) and answers (num_samples seeds) in 4 chunks each
    writing = rounds * (synthesis["sources"]["new_per_problem"] + synthesis["label"]["num_samples"]) * 4
    assert counts["generate"] == 4 * (rounds * 4 + (rounds + 1) * 2 * 4) + writing
    assert counts["synthesis_sources"] == counts["synthesis_label"] == rounds and counts["synthesis_funnel"] == 1
    assert counts["sft"] == rounds and counts["eval"] == 1
    jobs = planned_jobs(tmp_path, configfile)
    last = f"sft-round{rounds}"
    inputs = job_inputs(jobs, "sft_data", last)
    synthesized = [path for path in inputs if "/synthesis/" in path]
    assert judged_models([path for path in inputs if path not in synthesized]) == sorted(
        ["student", *[f"sft-round{r}" for r in range(1, rounds)]]
    )
    assert synthesized == [
        f"results/{config['experiment']}/synthesis/round{r}/gsm8k/judged.jsonl" for r in range(1, rounds + 1)
    ]
    assert not [path for path in job_inputs(jobs, "sft", last) if path.endswith("/adapter")]


# ---------------------------------------------------------------- plots and exports (plain functions)


def _metrics(pass_values, majority_values, std):
    k = len(pass_values)
    metrics = {}
    for index, value in enumerate(pass_values, start=1):
        metrics[f"pass@{index}"] = {"symbolic_correct": value, "num_entries": 10}
        metrics[f"pass@1[avg-of-{index}]"] = {"symbolic_correct": 40.0 + index, "num_entries": 10}
    for index, value in enumerate(majority_values, start=2):
        metrics[f"majority@{index}"] = {"symbolic_correct": value, "num_entries": 10}
    metrics[f"pass@1[avg-of-{k}]"]["symbolic_correct_statistics"] = {"avg": 0.4, "std_dev_across_runs": std}
    return metrics


SUMMARY = {
    "base": {
        "add": _metrics([40.0, 55.0, 60.0], [42.0, 45.0], 0.02),
        "mul": _metrics([10.0, 15.0, 20.0], [11.0, 12.0], 0.01),
    },
    "sft-round1": {
        "add": _metrics([70.0, 80.0, 85.0], [72.0, 75.0], 0.015),
        "mul": _metrics([20.0, 25.0, 30.0], [21.0, 22.0], 0.0),
    },
}


def test_pass_at_1_points_use_the_largest_k_and_seed_std():
    assert report.pass_at_1_points(SUMMARY, "add") == [("base", 43.0, 2.0), ("sft-round1", 43.0, 1.5)]
    single_seed = {
        "base": {"add": {"pass@1": {"symbolic_correct": 50.0}, "pass@1[avg-of-1]": {"symbolic_correct": 50.0}}}
    }
    assert report.pass_at_1_points(single_seed, "add") == [("base", 50.0, 0.0)]


def test_at_k_curves_sort_by_k():
    curves = report.at_k_curves(SUMMARY["sft-round1"]["add"])
    assert curves["pass"] == [(1, 70.0), (2, 80.0), (3, 85.0)]
    assert curves["majority"] == [(2, 72.0), (3, 75.0)]


def test_plots_are_written_as_png(tmp_path):
    judged = []
    for model, tokens in (("base", [3, 5, 5]), ("sft-round1", [4, 4, 9])):
        path = tmp_path / f"{model}.jsonl"
        path.write_text(
            "".join(json.dumps({"id": str(i), "num_generated_tokens": t}) + "\n" for i, t in enumerate(tokens))
        )
        judged.append(path)
    lengths = report.read_generation_lengths(judged, [("base", "add", 0), ("sft-round1", "add", 0)])
    assert lengths == {("base", "add"): [3, 5, 5], ("sft-round1", "add"): [4, 4, 9]}
    stats = {
        "sft-round1": {
            "judged": 20,
            "incorrect": 8,
            "truncated": 1,
            "too_long": 0,
            "duplicate": 3,
            "kept": 8,
            "problems_covered": 6,
            "kept_by_source": {"base": 8},
        },
        "sft-round2": {
            "judged": 40,
            "incorrect": 10,
            "truncated": 0,
            "too_long": 0,
            "duplicate": 12,
            "kept": 18,
            "problems_covered": 9,
            "kept_by_source": {"base": 8, "sft-round1": 10},
        },
    }
    outputs = {name: tmp_path / f"{name}.png" for name in PLOTS}
    report.plot_pass_at_1(SUMMARY, outputs["pass_at_1"])
    report.plot_pass_at_k(SUMMARY, outputs["pass_at_k"])
    paired = {"gain": 12.5, "ci_low": 3.0, "ci_high": 21.0, "confidence": 0.95}
    report.plot_gains(
        {**SUMMARY, "sft-round1": {**SUMMARY["sft-round1"], "math/paired_gain": paired}}, outputs["gains"]
    )
    report.plot_generation_lengths(lengths, outputs["generation_lengths"])
    report.plot_sft_examples(stats, outputs["sft_examples"])
    histories = {
        "sft-round1": [{"step": step, "loss": 1 / step} for step in (20, 40, 60)],
        "dpo-round1": [{"step": step, "loss": 0.6, "rewards/accuracies": 0.5 + step / 100} for step in (1, 2, 3)],
        "grpo-round1": [{"step": step, "reward": 0.2 + step / 10} for step in (1, 2, 3)],
    }
    methods = {"sft-round1": "sft", "dpo-round1": "dpo", "grpo-round1": "grpo"}
    report.plot_training_curves(histories, methods, outputs["training_curves"])
    assert report.training_curve("dpo", histories["dpo-round1"]) == (
        "preference accuracy",
        [(1, 0.51), (2, 0.52), (3, 0.53)],
    )
    assert report.training_curve("sft", []) == ("training loss", [])
    for path in outputs.values():
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not list(tmp_path.glob(".*.tmp")), "plots are written atomically"


def test_generation_lengths_name_a_row_without_token_count(tmp_path):
    path = tmp_path / "judged.jsonl"
    path.write_text('{"id": "a", "num_generated_tokens": 3}\n{"id": "b"}\n')
    with pytest.raises(SnakeskillsError, match="row 2 lacks field 'num_generated_tokens'"):
        report.read_generation_lengths([path], [("base", "add", 0)])


def test_alpaca_and_llamafactory_exports(tmp_path):
    records = [
        {"id": "a", "messages": [{"role": "user", "content": "1+2="}, {"role": "assistant", "content": "\\boxed{3}"}]},
        {
            "id": "b",
            "messages": [
                {"role": "system", "content": "Add."},
                {"role": "user", "content": "2+2="},
                {"role": "assistant", "content": "\\boxed{4}"},
            ],
        },
    ]
    assert to_alpaca(records[0]) == {"instruction": "1+2=", "input": "", "output": "\\boxed{3}"}
    assert to_alpaca(records[1]) == {"instruction": "2+2=", "input": "", "output": "\\boxed{4}", "system": "Add."}
    data = tmp_path / "data.jsonl"
    data.write_text("".join(json.dumps(record) + "\n" for record in records))
    count = write_sft_exports(
        data,
        alpaca_path=tmp_path / "alpaca.json",
        dataset_info_path=tmp_path / "dataset_info.json",
        dataset_name="exp-round1",
    )
    assert count == 2
    assert json.loads((tmp_path / "alpaca.json").read_text())[1]["system"] == "Add."
    assert json.loads((tmp_path / "dataset_info.json").read_text()) == {
        "exp-round1": {
            "file_name": "alpaca.json",
            "formatting": "alpaca",
            "columns": {"prompt": "instruction", "query": "input", "response": "output", "system": "system"},
        }
    }
    assert "system" not in llamafactory_dataset_info("x", "alpaca.json", with_system=False)["x"]["columns"]


# ---------------------------------------------------------------- a real 2-round run (slow)

RESULTS = "results/rounds"


def run_rounds(tmp_path_factory, name: str, **settings):
    """A real run of `rounds_config(**settings)` in a fresh folder; returns (folder, config file)."""
    workdir = tmp_path_factory.mktemp(name)
    configfile = rounds_config(workdir, **settings)
    process = run_snakemake(workdir, "--cores", "2", configfile=configfile)
    assert process.returncode == 0, process.stdout[-5000:] + process.stderr[-5000:]
    return workdir, configfile


def generate_log(workdir: Path, job: str) -> str:
    """The log of a generate job (``model/benchmark/split/rsN``, one chunk), its paths relative to ``workdir``:
    a job served by the shared model server names the model by the absolute path the server loaded."""
    log = (workdir / RESULTS / f"logs/generate/{job}/chunk0-of-1.log").read_text()
    return log.replace(f"{workdir}/", "")


@pytest.fixture(scope="module")
def two_rounds(tmp_path_factory):
    """The shrunken tiny default with 2 rounds, data accumulated, round 2 continuing round 1's adapter."""
    return run_rounds(tmp_path_factory, "two-rounds", rounds=2, rounds_data="accumulate", init="continue")


@pytest.mark.slow
def test_round2_learns_from_round1_generations(two_rounds):
    workdir, _ = two_rounds
    results = workdir / RESULTS
    checkpoint = f"{RESULTS}/models/base/checkpoint"
    # sft-round1's train-split samples (sft-round2's SFT data) come from the base model + sft-round1's adapter
    log = generate_log(workdir, "sft-round1/arithmetic/train/rs0")
    assert f"loaded model {checkpoint} + adapter {RESULTS}/models/sft-round1/adapter" in log
    log = generate_log(workdir, "sft-round2/arithmetic/test/rs1")
    assert f"loaded model {checkpoint} + adapter {RESULTS}/models/sft-round2/adapter" in log
    assert "+ adapter" not in generate_log(workdir, "base/arithmetic/train/rs0")

    summary = json.loads((results / "eval/summary.json").read_text())
    assert list(summary) == ["base", "sft-round1", "sft-round2"]
    for model in summary:
        assert summary[model]["arithmetic"]["pass@1[avg-of-2]"]["num_entries"] == 200
    table = (results / "eval/summary.txt").read_text()
    assert "sft-round1 vs base" in table and "sft-round2 vs base" in table


@pytest.mark.slow
def test_accumulate_and_continue_for_real(two_rounds):
    workdir, _ = two_rounds
    results = workdir / RESULTS
    round1 = json.loads((results / "sft/sft-round1/stats.json").read_text())
    round2 = json.loads((results / "sft/sft-round2/stats.json").read_text())
    assert round1["judged"] == 1000 * 2  # base: 1000 train problems x 2 seeds
    assert round2["judged"] == 2 * 1000 * 2  # accumulated: base's and sft-round1's samples
    assert round2["kept"] > round1["kept"]

    first = json.loads((results / "models/sft-round1/adapter/training_metrics.json").read_text())
    second = json.loads((results / "models/sft-round2/adapter/training_metrics.json").read_text())
    assert first["init_path"] is None and first["method"] == "lora"
    assert second["init_path"] == f"{RESULTS}/models/sft-round1/adapter"
    assert second["num_examples"] == round2["kept"]
    assert (
        f"continuing from adapter {RESULTS}/models/sft-round1/adapter"
        in (results / "logs/sft/sft-round2.log").read_text()
    )
    assert "training a fresh LoRA" in (results / "logs/sft/sft-round1.log").read_text()


@pytest.fixture(scope="module")
def two_full_rounds(tmp_path_factory):
    """The shrunken tiny default with 2 rounds of full fine-tuning, round 2 continuing round 1's checkpoint."""
    workdir, _ = run_rounds(tmp_path_factory, "two-full-rounds", rounds=2, init="continue", method="full")
    return workdir


@pytest.mark.slow
def test_full_fine_tuning_rounds_generate_with_their_own_checkpoints_and_gain(two_full_rounds):
    results = two_full_rounds / RESULTS
    # sft-round1 samples sft-round2's data (train) and is evaluated (test); sft-round2, the last, is only evaluated
    for model, split, seed in (("sft-round1", "train", 0), ("sft-round1", "test", 1), ("sft-round2", "test", 1)):
        log = generate_log(two_full_rounds, f"{model}/arithmetic/{split}/rs{seed}")
        assert f"loaded model {RESULTS}/models/{model}/checkpoint on cpu" in log
        assert "+ adapter" not in log
    assert not list(results.glob("models/*/adapter"))
    first = json.loads((results / "models/sft-round1/checkpoint/training_metrics.json").read_text())
    second = json.loads((results / "models/sft-round2/checkpoint/training_metrics.json").read_text())
    assert first["method"] == second["method"] == "full"
    assert first["init_path"] is None and second["init_path"] == f"{RESULTS}/models/sft-round1/checkpoint"
    assert first["saved_dtype"] == "float32"  # the tiny base checkpoint's dtype
    log = (results / "logs/sft/sft-round2.log").read_text()
    assert f"fully fine-tuning {RESULTS}/models/sft-round1/checkpoint" in log

    summary = json.loads((results / "eval/summary.json").read_text())
    accuracy = {model: summary[model]["arithmetic"]["pass@1[avg-of-2]"]["symbolic_correct"] for model in summary}
    assert list(accuracy) == ["base", "sft-round1", "sft-round2"]
    assert accuracy["sft-round1"] >= accuracy["base"] + 10, accuracy
    assert accuracy["sft-round2"] >= accuracy["base"] + 10, accuracy


@pytest.mark.slow
def test_sft_exports_for_trl_and_llamafactory(two_rounds):
    workdir, _ = two_rounds
    folder = workdir / RESULTS / "sft/sft-round2"
    rows = [json.loads(line) for line in (folder / "data.jsonl").read_text().splitlines()]
    for row in rows:
        assert [message["role"] for message in row["messages"]] == ["user", "assistant"]
    alpaca = json.loads((folder / "alpaca.json").read_text())
    assert len(alpaca) == len(rows)
    assert alpaca[0] == {
        "instruction": rows[0]["messages"][0]["content"],
        "input": "",
        "output": rows[0]["messages"][1]["content"],
    }
    info = json.loads((folder / "dataset_info.json").read_text())
    assert info == {
        "rounds-sft-round2": {
            "file_name": "alpaca.json",
            "formatting": "alpaca",
            "columns": {"prompt": "instruction", "query": "input", "response": "output"},
        }
    }


@pytest.mark.slow
def test_changing_round_settings_reruns_only_the_rounds_they_change(two_rounds, tmp_path):
    workdir, configfile = two_rounds
    process = run_snakemake(workdir, "--dry-run", configfile=configfile)
    assert "Nothing to be done" in process.stdout + process.stderr
    # replace: sft-round2's SFT data now comes from sft-round1 alone; sft-round1 (trained on the base model's) is kept
    replace = rounds_config(tmp_path, rounds_data="replace", init="continue")
    jobs = planned_jobs(workdir, replace)
    assert [job["wildcards"]["model"] for job in jobs if job["rule"] == "sft_data"] == ["sft-round2"]
    assert judged_models(job_inputs(jobs, "sft_data", "sft-round2")) == ["sft-round1"]
    assert [job["wildcards"]["model"] for job in jobs if job["rule"] == "sft"] == ["sft-round2"]
    # init base: sft-round2's adapter no longer starts from sft-round1's, so it is retrained; its data is kept
    fresh = planned_jobs(workdir, rounds_config(tmp_path, rounds_data="accumulate", init="base", name="fresh.yaml"))
    assert [job["rule"] for job in fresh if job["rule"] in ("sft_data", "sft")] == ["sft"]
    assert job_inputs(fresh, "sft", "sft-round2") == [
        f"{RESULTS}/sft/sft-round2/data.jsonl",
        f"{RESULTS}/models/base/checkpoint",
    ]


@pytest.mark.slow
def test_report_holds_the_plots(two_rounds):
    workdir, configfile = two_rounds
    for plot in PLOTS:
        assert (workdir / RESULTS / f"report/{plot}.png").read_bytes()[:4] == b"\x89PNG"
    process = run_snakemake(workdir, "--report", "report.html", configfile=configfile, timeout=300)
    assert process.returncode == 0, process.stdout[-3000:] + process.stderr[-3000:]
    html = (workdir / "report.html").read_text()
    for plot in PLOTS:
        # each plot is embedded in the single HTML file as a data URI
        assert f"filename={plot}.png;base64,iVBORw0KGgo" in html
    # captions, rendered with the run's config, and the rule graph
    assert "[avg-of-2]" in html and "std_dev_across_runs" in html
    assert re.search(r"this run uses(\s|\\n)*<tt[^>]*>accumulate", html)
    assert "rulegraph_spec" in html
    # the samples page, embedded whole as a data URI: each model's chosen samples, correct and incorrect, escaped
    page = (workdir / RESULTS / "report/samples.html").read_text()
    match = re.search(r"data:text/html;charset=[\w-]+;filename=samples\.html;base64,([A-Za-z0-9+/=]+)", html)
    assert match, "the report embeds report/samples.html"
    assert base64.b64decode(match.group(1)).decode() == page
    files = samples.select_files(samples.find_judged_files(workdir / RESULTS, Layout().judged), splits=["test"])
    groups = samples.choose_samples(files)
    assert [group.model for group in groups] == ["base", "sft-round1", "sft-round2"]
    for group in groups:
        assert {sample.correct for sample in group.samples} == {True, False}, group.model
        for sample in group.samples:
            assert escape(sample.record["generation"]) in page and escape(sample.record["problem"]) in page
    assert "<dt>route</dt>" in page and "<dt>verdict</dt>" in page
    # each group's extraction routes, and the run's warnings as eval/summary.txt ends with them
    assert "<th>extraction routes (* a fallback)</th>" in page
    warnings = json.loads((workdir / RESULTS / "eval/warnings.json").read_text())
    summary_table = (workdir / RESULTS / "eval/summary.txt").read_text()
    assert all(line in summary_table for line in warnings)
    assert all(escape(line) in page for line in warnings) and ("Warnings" in page)
