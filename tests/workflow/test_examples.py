"""A config given with --configfile is the whole config: nothing of the embedded default reaches it.

Every shipped example plans only its own benchmarks, and the prompt its generate jobs run with (the settings
file, written for real) is its template's. Model folders are stand-ins (the tiny checkpoint: planning and
settings never load a model) and datasets are the fixtures in their Hub repositories' layout.
"""

from __future__ import annotations

import json
import os

import pytest
import yaml
from conftest import REPO, example_model_folder, planned_jobs, run_snakemake
from dataset_fixtures import WRITERS
from without_slurm import stand_in_sbatch

from snakeskills.data.specs import load_preset
from snakeskills.prompts import load_template_file, template_path

# the examples on a real model's folder (the tiny-model example's DAG and run: tests/workflow/test_methods.py), planned
# here by a local run: a round across nodes is planned for SLURM only (its plan: tests/external/test_slurm.py)
EXAMPLES = [
    path
    for path in sorted((REPO / "config" / "examples").glob("*.yaml"))
    if not yaml.safe_load(path.read_text())["model"].get("build_tiny")
    and (yaml.safe_load(path.read_text()).get("training") or {}).get("nodes", 1) == 1
]


def local_folders_for(config: dict, workdir, checkpoint) -> None:
    """The model folder (a link to the tiny checkpoint) and the local dataset copies the config names."""
    model = workdir / config["model"]["path"]
    model.parent.mkdir(parents=True, exist_ok=True)
    chat_tools = (config.get("tools") or {}).get("format") == "chat_template"
    example_model_folder(model, checkpoint, config["prompt"].get("chat_template_kwargs", {}), chat_tools)
    for spec in config["benchmarks"].values():
        if "hf" in spec:
            WRITERS[spec["preset"]](workdir / spec["hf"]["path"])


def asked_template(config: dict, benchmark: str) -> str:
    """The template a benchmark's problems are asked with: its own (given, or its preset's), else the config's (None:
    the config writes its prompt out, system and user)."""
    spec = config["benchmarks"][benchmark]
    own = {**(load_preset(spec["preset"]) if "preset" in spec else {}), **spec}.get("prompt", {})
    return own.get("template") or config["prompt"].get("template")


def planned_benchmarks(jobs) -> set[str]:
    return {job["wildcards"]["benchmark"] for job in jobs if "benchmark" in job["wildcards"]}


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda path: path.stem)
def test_example_plans_its_own_benchmarks_with_its_templates_prompt(
    tmp_path, example, tiny_checkpoint, request, monkeypatch
):
    config = yaml.safe_load(example.read_text())
    if any({**load_preset(spec.get("preset", "gsm8k")), **spec}.get("code") for spec in config["benchmarks"].values()):
        request.getfixturevalue("bubblewrap")  # a code benchmark: the plan checks that its sandbox starts
    if (config.get("grpo") or {}).get("vllm_mode"):  # planned where jobs get GPUs: a GPU node or a SLURM submit host
        monkeypatch.setenv("PATH", f"{stand_in_sbatch(tmp_path / 'submit-host-bin')}{os.pathsep}{os.environ['PATH']}")
    local_folders_for(config, tmp_path, tiny_checkpoint)
    jobs = planned_jobs(tmp_path, example)
    assert planned_benchmarks(jobs) == set(config["benchmarks"])
    assert "build_tiny_model" not in {job["rule"] for job in jobs}
    synthesis = config.get("synthesis") or {}
    if synthesis.get("decontamination", {}).get("llm_check"):
        checks = [job for job in jobs if job["rule"] == "synthesis_llm_check"]
        assert len(checks) == config["rounds"] * len(config["train_benchmarks"])

    settings_files = [
        f"results/{config['experiment']}/settings/generate/{config['model']['name']}/{benchmark}/{config['eval_split']}.json"
        for benchmark in config["benchmarks"]
    ]
    process = run_snakemake(tmp_path, "--cores", "1", *settings_files, configfile=example)
    assert process.returncode == 0, process.stdout[-3000:] + process.stderr[-3000:]
    for benchmark, path in zip(config["benchmarks"], settings_files, strict=True):
        name = asked_template(config, benchmark)
        if name is None:
            template = {"user": config["prompt"]["user"], "system": config["prompt"].get("system")}
        else:
            template = load_template_file(template_path(name, "prompt.template"))
        prompt = json.loads((tmp_path / path).read_text())["prompt"]
        assert prompt["user"] == template["user"]
        assert prompt["system"] == template.get("system")
        assert prompt["chat_template"] is config["prompt"]["chat_template"]
        assert prompt["chat_template_kwargs"] == config["prompt"].get("chat_template_kwargs", {})


def test_a_user_config_plans_no_arithmetic_job(tmp_path, tiny_checkpoint):
    config = {
        "experiment": "mine",
        "model": {"build_tiny": False, "path": str(tiny_checkpoint)},
        "benchmarks": {
            "sums": {
                "source": "synthetic",
                "synthetic": {"operations": ["+"], "max_operand": 9, "seed": 1, "split_sizes": {"train": 8, "test": 8}},
            }
        },
        "train_benchmarks": ["sums"],
        "prompt": {"template": "generic-math", "chat_template": True},
        "generation": {"sampling": {"max_new_tokens": 8}},
        "sft": {
            "lora": {"r": 4, "alpha": 8},
            "training": {"num_epochs": 1, "learning_rate": 1e-3, "batch_size": 4, "max_length": 64},
        },
    }
    configfile = tmp_path / "mine.yaml"
    configfile.write_text(yaml.safe_dump(config))
    jobs = planned_jobs(tmp_path, configfile)
    assert planned_benchmarks(jobs) == {"sums"}
    assert {job["rule"] for job in jobs} >= {"prepare_data", "generate", "sft", "eval"}
    assert "build_tiny_model" not in {job["rule"] for job in jobs}


def test_without_a_config_file_the_embedded_default_runs(tmp_path):
    process = run_snakemake(tmp_path, "--dry-run", configfile=None)
    output = process.stdout + process.stderr
    assert process.returncode == 0, output
    assert "rule build_tiny_model:" in output and "benchmark=arithmetic" in output
