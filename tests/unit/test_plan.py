"""The plan module (snakeskills.plan) without Snakemake: every plan-time mistake, the data each round learns from,
seeds, the model files each generation loads, and each job's GPUs and conda env. Milliseconds a test.

The same module builds the real DAG (rules/common.smk calls it); a few real dry runs (test_workflow_dag.py,
test_examples.py) check that the two agree.
"""

from __future__ import annotations

import copy
import importlib.util
from pathlib import Path

import pytest
import yaml
from conftest import DEFAULT_CONFIG, NO_SERVER, REPO, example_model_folder, teacher_section

from snakeskills.errors import SnakeskillsError
from snakeskills.plan.checks import check_config, check_devices
from snakeskills.plan.config import prepare_config, schema_error
from snakeskills.plan.folders import check_model_paths, check_results_dir
from snakeskills.plan.layout import Layout
from snakeskills.plan.resources import training_gpus, training_processes
from snakeskills.plan.run import Plan

DEFAULT = yaml.safe_load(DEFAULT_CONFIG.read_text())


def checked(mutate=None, *, gpus_available=False, **top) -> dict:
    """The embedded default with ``top`` keys set and ``mutate`` applied, validated and checked as the workflow
    does before planning."""
    config = copy.deepcopy(DEFAULT)
    config.update(top)
    if mutate is not None:
        mutate(config)
    prepare_config(config)
    check_config(config, gpus_available=gpus_available)
    check_model_paths(config)
    return config


def plan_of(mutate=None, **top) -> Plan:
    config = checked(mutate, **top)
    return Plan(config, Layout.under(f"results/{config['experiment']}"))


def with_teacher(**settings):
    return lambda config: config.update(teacher=teacher_section(**settings))


# ---------------------------------------------------------------- mistakes stop the plan, naming the key


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (
            lambda config: config["generation"].update(
                parse_reasoning=True, sampling={"max_new_tokens": 8, "stop": ["</think>"]}
            ),
            "config key generation.sampling.stop has '</think>', which cuts the text where "
            "generation.end_reasoning_string '</think>' ends the thinking",
        ),
        (lambda config: config["judge"].update(regex="(\\d+"), "config key judge.regex: '(\\\\d+' does not compile"),
        (lambda config: config.update(eval_split="train"), "config keys eval_split and train_split are both 'train'"),
        (
            lambda config: (config["generation"].update(backend="vllm"), config["sft"]["lora"].update(r=128)),
            "config key sft.lora.r is 128 but generation.vllm.max_lora_rank is 64",
        ),
        (
            lambda config: config["generation"].update(backend="vllm", compile=True),
            "config key generation.compile applies to the hf backend only, but generation.backend is 'vllm'",
        ),
        (
            lambda config: config["sft"].setdefault("filters", {}).update(score="judge_correct"),
            "config key sft.filters.score is 'judge_correct', which needs the LLM judge's verdicts",
        ),
        (
            lambda config: config["sft"].update(method="full", merge=True),
            "config key sft.merge applies to sft.method lora",
        ),
        (
            lambda config: config["sft"].pop("lora"),
            "config key sft.lora (r, alpha) is required when sft.method is lora",
        ),
        (
            lambda config: config["generation"].update(backend="openai", openai={"base_url": NO_SERVER, "model": "m"}),
            "config key generation.backend is 'openai', which samples whatever model its server serves",
        ),
        (
            lambda config: config.update(training={"gpus": 2, "processes": 1}),
            "config key training.processes is 1 but each training job has 2 GPU(s) (training.gpus)",
        ),
        (
            lambda config: (config["generation"].update(device="cpu"), config.update(training={"processes": 3})),
            "config key sft.training.batch_size (32) must be a multiple of the 3 training processes",
        ),
        (
            lambda config: config["sft"]["training"].update(gradient_accumulation_steps=5),
            "config key sft.training.batch_size (32) must be a multiple of 5 sft.training.gradient_accumulation_steps",
        ),
        (
            lambda config: config["tiny_model"]["training"].update(gradient_accumulation_steps=3),
            "config key tiny_model.training.batch_size",
        ),
        (
            lambda config: config.update(training={"distributed": "fsdp"}),
            "config key training.distributed is 'fsdp', which shards the model across GPUs, but each training job has "
            "0 GPU(s)",
        ),
        (lambda config: config["generation"].update(device="gpu0"), "config key generation.device is 'gpu0'"),
        (lambda config: config["model"].update(build_tiny=False), "config key model.path is required"),
        (
            lambda config: config["model"].update(name="sft-round0"),
            "config key model.name must not start with 'sft-round'",
        ),
        (lambda config: config.update(train_benchmarks=["gsm8k"]), "config key train_benchmarks names 'gsm8k'"),
        (
            lambda config: config.update(eval_split="dev"),
            "config key eval_split: benchmark 'arithmetic' has no split 'dev'",
        ),
        (
            lambda config: config.update(train_split="training"),
            "config key train_split: benchmark 'arithmetic' has no split 'training'",
        ),
        (
            lambda config: config["tiny_model"].update(bootstrap_benchmark="gsm8k"),
            "config key tiny_model.bootstrap_benchmark names a benchmark not in benchmarks",
        ),
        # the teacher's keys
        (with_teacher(name="base"), "config keys teacher.name and model.name are both 'base'"),
        (with_teacher(name="sft-round7"), "config key teacher.name must not start with 'sft-round'"),
        (
            lambda config: (with_teacher()(config), config["teacher"]["generation"].pop("openai")),
            "config key teacher.generation.openai (base_url, model) is required when teacher.generation.backend",
        ),
        (
            lambda config: (with_teacher()(config), config["teacher"]["generation"].update(backend="hf")),
            "config key teacher.model.path: None is not a folder",
        ),
        (
            lambda config: (with_teacher()(config), config["teacher"]["generation"].update(compile=True)),
            "config key teacher.generation.compile applies to the hf backend only",
        ),
    ],
    ids=[
        "reasoning-cut-by-stop",
        "judge-regex",
        "eval-is-train",
        "lora-rank-over-vllm-max",
        "compile-without-hf",
        "llm-score-without-judge",
        "merge-with-full",
        "lora-without-settings",
        "openai-for-the-tuned-model",
        "processes-not-one-per-gpu",
        "batch-not-shared-by-processes",
        "batch-not-shared-by-accumulation",
        "tiny-batch-not-shared-by-accumulation",
        "fsdp-without-gpus",
        "unknown-device",
        "no-model-path",
        "round-model-name",
        "unknown-train-benchmark",
        "missing-eval-split",
        "missing-train-split",
        "unknown-bootstrap-benchmark",
        "teacher-student-name",
        "teacher-round-name",
        "teacher-openai-without-server",
        "teacher-hf-without-path",
        "teacher-compile",
    ],
)
def test_mistakes_that_cost_nothing_to_find_stop_the_plan(mutate, message):
    with pytest.raises(SnakeskillsError) as error:
        checked(mutate)
    assert message in str(error.value)


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda config: config["generation"].update(device="cuda"), "config key generation.device is 'cuda'"),
        (lambda config: config["generation"].update(device="cuda:1"), "config key generation.device is 'cuda:1'"),
        (
            lambda config: config.update(
                judge={
                    **config["judge"],
                    "llm": {**teacher_section(), "generation": {**config["generation"], "device": "cuda"}},
                }
            ),
            "config key judge.llm.generation.device is 'cuda'",
        ),
        (lambda config: config.update(training={"gpus": 2}), "config key training.gpus is 2"),
    ],
    ids=["cuda", "cuda-index", "llm-judge-cuda", "training-gpus"],
)
def test_a_gpu_device_stops_a_local_plan_on_a_machine_without_gpus(mutate, message):
    """What a local run on a machine without GPUs cannot do is a plan-time error (rules/common.smk calls
    check_devices where jobs have no GPU), not a job that fails later; the same keys pass where jobs have GPUs."""
    config = copy.deepcopy(DEFAULT)
    mutate(config)
    prepare_config(config)
    with pytest.raises(SnakeskillsError, match="this machine has no GPU and the run is local") as error:
        check_devices(config)
    assert message in str(error.value)


def test_devices_a_machine_without_gpus_runs():
    for device in ("auto", "cpu"):
        config = copy.deepcopy(DEFAULT)
        config["generation"]["device"] = device
        config["training"] = {"gpus": 0}
        prepare_config(config)
        check_devices(config)


@pytest.mark.parametrize(
    ("mutate", "words"),
    [
        (lambda config: config["generation"]["sampling"].update(temprature=0.7), ["temprature"]),
        (lambda config: config.update(num_seeds="four"), ["num_seeds", "four"]),
        (lambda config: config.update(num_chunks=0), ["num_chunks", "less than the minimum of 1"]),
        (
            lambda config: config["generation"].update(backend="tgi"),
            ["config key generation.backend: 'tgi' is not one of 'hf', 'vllm', 'openai'"],
        ),
        (lambda config: config["sft"].update(rounds_data="sometimes"), ["sometimes"]),
        (lambda config: config["sft"].update(init="sometimes"), ["sometimes"]),
        (lambda config: config.update(teacher={**teacher_section(), "later_rounds": "never"}), ["later_rounds"]),
        (
            lambda config: config.update(teacher={"generation": teacher_section()["generation"]}),
            ["config key teacher lacks required key(s): prompt"],
        ),
    ],
    ids=["typo", "type", "range", "backend", "rounds-data", "init", "teacher-enum", "teacher-prompt"],
)
def test_schema_mistakes_name_the_key(mutate, words):
    with pytest.raises(SnakeskillsError) as error:
        checked(mutate)
    assert all(word in str(error.value) for word in words), str(error.value)
    assert len(str(error.value).splitlines()) <= 4, str(error.value)


def test_unknown_preset_names_the_key():
    with pytest.raises(SnakeskillsError, match=r"config key benchmarks\.gsm8k\.preset: unknown preset 'gsm9k'"):
        checked(lambda config: config.update(benchmarks={"gsm8k": {"preset": "gsm9k"}}))


@pytest.mark.parametrize("key", ["model.path", "judge.llm.model.path"])
def test_missing_model_folder_names_the_key(tmp_path, key, tiny_checkpoint):
    def mutate(config):
        config["model"].update(build_tiny=False, path=str(tiny_checkpoint))
        config["judge"]["llm"] = {
            "model": {"path": str(tiny_checkpoint)},
            "generation": {"sampling": {"max_new_tokens": 4}},
            "prompt": {"user": "{problem} {generation}"},
        }
        if key == "model.path":
            config["model"]["path"] = str(tmp_path / "no-such-model")
        else:
            config["judge"]["llm"]["model"]["path"] = str(tmp_path / "no-such-judge")

    with pytest.raises(SnakeskillsError, match=rf"config key {key}: '.*no-such-.*' is not a folder"):
        checked(mutate)


def linked_checkpoint(source: Path, folder: Path, *, leave_out: set[str]) -> Path:
    """``folder`` holding links to the files of checkpoint folder ``source``, but those in ``leave_out``."""
    folder.mkdir()
    for path in source.iterdir():
        if path.name not in leave_out:
            (folder / path.name).symlink_to(path)
    return folder


def test_checkpoint_folder_without_a_loadable_tokenizer_stops_the_plan(tmp_path, smollm2):
    """SmolLM2's folder without tokenizer.json: transformers cannot load its tokenizer (its error names neither
    folder nor key), so the plan stops naming both; with it, or with a slow BPE vocabulary, the plan goes on."""
    from transformers import AutoTokenizer

    folder = linked_checkpoint(smollm2, tmp_path / "no-tokenizer", leave_out={"tokenizer.json"})
    with pytest.raises(ValueError):
        AutoTokenizer.from_pretrained(folder)

    def with_model(path):
        return lambda config: config["model"].update(build_tiny=False, path=str(path))

    with pytest.raises(SnakeskillsError) as error:
        checked(with_model(folder))
    assert str(error.value).startswith(f"config key model.path: {str(folder)!r} has no tokenizer files"), error.value
    checked(with_model(smollm2))
    for name in ("vocab.json", "merges.txt"):
        (folder / name).write_text("{}\n" if name.endswith("json") else "#version: 0.2\n")
    checked(with_model(folder))


def test_checkpoint_folder_without_config_or_with_only_a_sentencepiece_model(tmp_path, smollm2, monkeypatch):
    judge_folder = linked_checkpoint(smollm2, tmp_path / "judge", leave_out={"config.json"})

    def with_judge(path):
        def mutate(config):
            config["judge"]["llm"] = {
                "model": {"path": str(path)},
                "generation": {"sampling": {"max_new_tokens": 4}},
                "prompt": {"user": "{problem} {generation}"},
            }

        return mutate

    with pytest.raises(SnakeskillsError, match=r"config key judge\.llm\.model\.path: .*judge' has no config\.json"):
        checked(with_judge(judge_folder))
    spm_folder = linked_checkpoint(smollm2, tmp_path / "spm", leave_out={"tokenizer.json"})
    (spm_folder / "tokenizer.model").write_bytes(b"a SentencePiece model")
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(SnakeskillsError, match=r"tokenizer\.model, which needs the sentencepiece package"):
        checked(with_judge(spm_folder))
    monkeypatch.undo()
    with_sentencepiece = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: name == "sentencepiece" or with_sentencepiece(name))
    checked(with_judge(spm_folder))


def test_results_folder_that_cannot_be_created_names_the_key(tmp_path):
    (tmp_path / "blocker").write_text("a file where the results folder should go\n")
    with pytest.raises(SnakeskillsError, match="config key results_dir: cannot create .* is a file"):
        check_results_dir(tmp_path / "blocker" / "results" / "run")
    check_results_dir(tmp_path / "a" / "b")  # not there yet, but creatable
    assert sorted(path.name for path in tmp_path.iterdir()) == ["blocker"]


# ---------------------------------------------------------------- rounds: what each round learns from


def sft_sources(plan: Plan) -> dict[str, list[str]]:
    return {model: plan.sft_data_models(model) for model in plan.tuned_models}


def test_replace_reads_the_previous_round_and_accumulate_all_before():
    replace = plan_of(rounds=3)
    assert sft_sources(replace) == {"sft-round1": ["base"], "sft-round2": ["sft-round1"], "sft-round3": ["sft-round2"]}
    accumulate = plan_of(lambda config: config["sft"].update(rounds_data="accumulate"), rounds=3)
    assert sft_sources(accumulate) == {
        "sft-round1": ["base"],
        "sft-round2": ["base", "sft-round1"],
        "sft-round3": ["base", "sft-round1", "sft-round2"],
    }
    # every train seed of every earlier model, as judged seed files
    files = accumulate.sft_judged_files("sft-round3")
    assert len(files) == 3 * DEFAULT["train_num_seeds"]
    assert files[0] == "results/tiny-arithmetic/judge/base/arithmetic/train/output-rs0.jsonl"
    assert accumulate.train_sampled_models() == ["base", "sft-round1", "sft-round2"]


def test_continue_trains_from_the_previous_adapter_or_checkpoint():
    fresh = plan_of(rounds=3)
    assert [fresh.training_init(model) for model in fresh.tuned_models] == [[], [], []]
    continued = plan_of(lambda config: config["sft"].update(init="continue"), rounds=3)
    assert [continued.training_init(model) for model in continued.tuned_models] == [
        [],
        ["results/tiny-arithmetic/models/sft-round1/adapter"],
        ["results/tiny-arithmetic/models/sft-round2/adapter"],
    ]
    # round r generates with the base model and its own adapter
    assert continued.generation_model_inputs("sft-round2") == [
        "results/tiny-arithmetic/models/base/checkpoint",
        "results/tiny-arithmetic/models/sft-round2/adapter",
    ]
    full = plan_of(lambda config: config["sft"].update(init="continue", method="full"), rounds=3)
    assert full.training_init("sft-round3") == ["results/tiny-arithmetic/models/sft-round2/checkpoint"]
    for model in full.tuned_models:
        checkpoint = f"results/tiny-arithmetic/models/{model}/checkpoint"
        assert full.generation_model_inputs(model) == [checkpoint]
        assert full.generation_model_path(model) == checkpoint and full.generation_adapter_path(model) is None


def test_tuned_models_plots_and_merged_models_are_targets():
    plan = plan_of(rounds=2)
    targets = plan.targets()
    assert {
        "results/tiny-arithmetic/models/sft-round1/adapter",
        "results/tiny-arithmetic/models/sft-round2/adapter",
    } <= set(targets)
    assert "results/tiny-arithmetic/metrics/base/arithmetic/train/metrics.json" in targets
    assert not [path for path in targets if "merged" in path]
    merged = plan_of(lambda config: config["sft"].update(merge=True), rounds=2)
    assert "results/tiny-arithmetic/models/sft-round2/merged" in merged.targets()
    full = plan_of(lambda config: config["sft"].update(method="full"))
    assert "results/tiny-arithmetic/models/sft-round1/checkpoint" in full.targets()


def test_seeds_follow_the_split_and_the_model():
    plan = plan_of(num_seeds=3, train_num_seeds=2)
    assert plan.seeds("base", "test") == [0, 1, 2] and plan.seeds("base", "train") == [0, 1]
    teacher = plan_of(with_teacher(train_num_seeds=5), num_seeds=3, train_num_seeds=2)
    assert teacher.seeds("teacher", "train") == list(range(5)) and teacher.seeds("teacher", "test") == [0, 1, 2]
    assert [run for run in teacher.eval_judged_runs() if run[0] == "teacher"] == [
        ("teacher", "arithmetic", seed) for seed in range(3)
    ]


# ---------------------------------------------------------------- the teacher


@pytest.mark.parametrize(
    ("later_rounds", "rounds_data", "expected"),
    [
        ("both", "replace", {"sft-round2": ["teacher", "sft-round1"], "sft-round3": ["teacher", "sft-round2"]}),
        (
            "both",
            "accumulate",
            {"sft-round2": ["teacher", "sft-round1"], "sft-round3": ["teacher", "sft-round1", "sft-round2"]},
        ),
        ("student", "replace", {"sft-round2": ["sft-round1"], "sft-round3": ["sft-round2"]}),
        ("student", "accumulate", {"sft-round2": ["sft-round1"], "sft-round3": ["sft-round1", "sft-round2"]}),
        ("teacher", "replace", {"sft-round2": ["teacher"], "sft-round3": ["teacher"]}),
    ],
)
def test_round1_learns_from_the_teacher_and_later_rounds_as_configured(later_rounds, rounds_data, expected):
    def mutate(config):
        with_teacher(later_rounds=later_rounds)(config)
        config["sft"]["rounds_data"] = rounds_data

    plan = plan_of(mutate, rounds=3)
    assert sft_sources(plan) == {"sft-round1": ["teacher"], **expected}
    # the teacher samples the train split once, whichever rounds read it; the base student never does
    sampled = plan.train_sampled_models()
    assert sampled.count("teacher") == 1 and "base" not in sampled
    assert set(sampled) - {"teacher"} == ({"sft-round1", "sft-round2"} if later_rounds != "teacher" else set())


def test_teacher_is_evaluated_unless_told_not_to():
    assert plan_of(with_teacher()).eval_models == ["base", "sft-round1", "teacher"]
    quiet = plan_of(with_teacher(evaluate=False))
    assert quiet.eval_models == ["base", "sft-round1"] and quiet.evaluated_teacher is None
    assert not [path for path in quiet.eval_metrics_files() if "/metrics/teacher/" in path]


def test_teacher_generates_with_its_own_section_backend_env_and_no_gpu():
    plan = plan_of(with_teacher())
    section = plan.sampling_section("teacher")
    assert section["generation"]["backend"] == "openai" and section["prompt"]["user"] == "{problem}="
    assert plan.generation_model_inputs("teacher") == [] and plan.generation_adapter_path("teacher") is None
    assert plan.generation_env("teacher", "train") == "../envs/generate-openai.yaml"
    assert plan.generation_env("base", "train") == "../envs/generate-hf.yaml"
    for gpus_available in (False, True):
        assert plan.generation_gpus("teacher", "train", gpus_available) == 0
    assert plan.generation_gpus("sft-round1", "test", True) == 1


# ---------------------------------------------------------------- GPUs


def test_gpus_follow_the_backend_and_the_node():
    def gpus(generation):
        config = checked(lambda config: config["generation"].update(generation))
        return [
            Plan(config, Layout.under("r")).generation_gpus("base", "test", available) for available in (False, True)
        ]

    # device auto takes a GPU only where there is one: no `gpu=1` on a machine without
    assert gpus({"device": "auto"}) == [0, 1]
    assert gpus({"device": "cpu"}) == [0, 0]
    assert gpus({"device": "cuda:1"}) == [1, 1]
    assert gpus({"backend": "vllm", "vllm": {"tensor_parallel_size": 4}}) == [4, 4]


def test_training_gpus_and_processes():
    auto = checked()
    assert [training_gpus(auto, available) for available in (False, True)] == [0, 1]
    assert [training_processes(auto, available) for available in (False, True)] == [1, 1]
    cpu = checked(lambda config: config["generation"].update(device="cpu"))
    assert training_gpus(cpu, True) == 0
    four = checked(lambda config: config.update(training={"gpus": 4}), gpus_available=True)
    assert training_gpus(four, True) == 4 and training_processes(four, True) == 4, "one process per GPU"
    two_cpu = checked(lambda config: config.update(training={"processes": 2}))
    assert training_processes(two_cpu, False) == 2, "CPU processes"
    two = plan_of(lambda config: config.update(training={"processes": 2}))
    assert two.trainings["sft"].training_config(False)["processes"] == 2


def test_every_shipped_example_passes_the_plan_checks(tmp_path, monkeypatch, tiny_checkpoint):
    """Each example's own checks (its model folders links to the tiny checkpoint, as test_examples.py makes them)."""
    monkeypatch.chdir(tmp_path)
    for example in sorted((REPO / "config" / "examples").glob("*.yaml")):
        config = yaml.safe_load(example.read_text())
        prepare_config(config)
        sections = [(config["model"], config["prompt"])]
        tools = (config["tools"] or {}).get("models") or {}
        for served in (config["teacher"], config["judge"]["llm"], *tools.values()):
            if served is not None:
                sections.append((served["model"], served["prompt"]))
        for section, prompt in sections:
            folder = tmp_path / section["path"] if section.get("path") else None
            if folder is not None and not folder.exists():
                folder.parent.mkdir(parents=True, exist_ok=True)
                chat_tools = section is config["model"] and (config["tools"] or {}).get("format") == "chat_template"
                example_model_folder(folder, tiny_checkpoint, prompt["chat_template_kwargs"], chat_tools)
        # a round across nodes is planned for SLURM only
        check_config(config, gpus_available=True, executor="slurm" if config["training"]["nodes"] > 1 else "local")
        check_model_paths(config)


# ---------------------------------------------------------------- problem synthesis


def with_synthesis(teacher=False, **settings):
    def mutate(config):
        if teacher:
            config["teacher"] = teacher_section()
        config["synthesis"] = settings

    return mutate


OWN_WRITER = {
    "writer": "own",
    "name": "writer",
    "generation": {
        "backend": "openai",
        "openai": {"base_url": NO_SERVER, "model": "w"},
        "sampling": {"max_new_tokens": 64},
    },
}


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (with_synthesis(writer="teacher"), "config key synthesis.writer is 'teacher' but no teacher is set"),
        (
            with_synthesis(writer="student", label={"solver": "teacher"}),
            "config key synthesis.label.solver is 'teacher'",
        ),
        (with_synthesis(writer="own"), "config key synthesis.generation (backend, sampling) is required"),
        (
            with_synthesis(**{**OWN_WRITER, "label": {"solver": "writer"}}),
            "config key synthesis.label.prompt (how the writer is asked to solve) is required",
        ),
        (
            with_synthesis(**{**OWN_WRITER, "name": "base", "label": {"solver": "student"}}),
            "config keys synthesis.name and model.name are both 'base'",
        ),
        (
            with_synthesis(**{**OWN_WRITER, "name": "sft-round7", "label": {"solver": "student"}}),
            "config key synthesis.name must not start with 'sft-round'",
        ),
        (
            with_synthesis(**{**OWN_WRITER, "filter": {"pattern": "^(\\d+"}, "label": {"solver": "student"}}),
            "config key synthesis.filter.pattern: '^(\\\\d+' does not compile: missing ),",
        ),
        (
            with_synthesis(**{**OWN_WRITER, "sampling": {"max_new_tokens": 9}, "label": {"solver": "student"}}),
            "config key synthesis.sampling replaces a teacher or student writer's sampling",
        ),
        (
            with_synthesis(writer="student", label={"solver": "student"}, decontamination={"llm_check": "judge"}),
            "config key synthesis.decontamination.llm_check is 'judge', which asks judge.llm whether a new problem "
            "is an eval problem, but judge.llm is not set",
        ),
        (
            with_synthesis(writer="student", label={"solver": "student"}, decontamination={"llm_check": "teacher"}),
            "config key synthesis.decontamination.llm_check is 'teacher', which asks teacher whether",
        ),
        (
            with_synthesis(writer="student", label={"solver": "student"}, decontamination={"llm_check": True}),
            "config key synthesis.decontamination.llm_check",
        ),
        (
            lambda config: (
                with_synthesis(writer="student", label={"solver": "student"})(config),
                config["benchmarks"]["arithmetic"]["synthetic"]["split_sizes"].update({"synth-round1": 10}),
                config.update(eval_split="synth-round1"),
            ),
            "config key eval_split: split names synth-round<r>",
        ),
    ],
)
def test_synthesis_mistakes_stop_the_plan(mutate, message):
    with pytest.raises(SnakeskillsError) as error:
        checked(mutate)
    assert message in str(error.value)


def test_own_writer_needs_its_model_folder_with_a_local_backend(tmp_path):
    settings = {
        **OWN_WRITER,
        "generation": {"backend": "hf", "sampling": {"max_new_tokens": 8}},
        "label": {"solver": "student"},
    }
    settings["model"] = {"path": str(tmp_path / "missing")}
    with pytest.raises(SnakeskillsError, match="config key synthesis.model.path"):
        checked(with_synthesis(**settings))


def test_synthesis_splits_jobs_and_seeds():
    plan = plan_of(
        with_synthesis(writer="student", sources={"new_per_problem": 3}, label={"solver": "student", "num_samples": 5}),
        rounds=2,
    )
    assert plan.synthesis.writer(1) == plan.synthesis.solver(1) == "base"
    assert plan.synthesis.writer(2) == "sft-round1", "a student writer is the model before the round (SEAL)"
    assert plan.seeds("base", "synth-round1-sources") == [0, 1, 2]
    assert plan.seeds("sft-round1", "synth-round2-problems") == [0, 1, 2, 3, 4]
    assert plan.seeds("base", "train") == [0, 1, 2, 3]
    writing = plan.generation_job("base", "arithmetic", "synth-round1-sources")
    assert writing["prompt"]["template"] == "augment-math-problem"
    assert writing["generation"].to_dict() == plan.config["generation"], (
        "no synthesis.sampling: the student's own sampling"
    )
    solving = plan.generation_job("base", "arithmetic", "synth-round1-problems")
    assert solving["prompt"] == plan.config["prompt"]
    assert plan.synthesis.writer_files(1, "arithmetic") == [
        f"results/tiny-arithmetic/generate/base/arithmetic/synth-round1-sources/rs{seed}/chunk{chunk}-of-2.jsonl"
        for seed in range(3)
        for chunk in range(2)
    ]
    assert len(plan.synthesis.solver_files(2, "arithmetic")) == 5 * 2
    assert plan.synthesis.feedback_files(2, "arithmetic") == [
        f"results/tiny-arithmetic/judge/sft-round1/arithmetic/train/output-rs{seed}.jsonl" for seed in range(4)
    ]
    assert plan.synthesis.exact_answer("arithmetic") == "arithmetic"
    assert "results/tiny-arithmetic/synthesis/funnel.txt" in plan.targets()


def test_the_llm_contamination_check_sits_between_the_ngram_check_and_the_solver():
    student = {"writer": "student", "label": {"solver": "student"}}
    plan = plan_of(with_synthesis(**student))
    assert not plan.synthesis.llm_check
    assert plan.synthesis.filtered == "results/tiny-arithmetic/data/{benchmark}/synth-round{round}-problems.jsonl"
    assert plan.synthesis.stats_files()["llm_check"] == []

    def with_llm_check(config):
        with_synthesis(**student, decontamination={"llm_check": "judge"})(config)
        config["judge"]["llm"] = {
            "generation": {
                "backend": "openai",
                "openai": {"base_url": NO_SERVER, "model": "j"},
                "sampling": {"max_new_tokens": 32},
            },
            "prompt": {"template": "judge-math"},
        }

    plan = plan_of(with_llm_check, rounds=2)
    assert plan.synthesis.llm_check
    assert plan.synthesis.filtered == "results/tiny-arithmetic/synthesis/round{round}/{benchmark}/candidates.jsonl"
    assert plan.synthesis.stats_files()["llm_check"] == [
        f"results/tiny-arithmetic/synthesis/round{r}/arithmetic/llm-check.json" for r in (1, 2)
    ]
    prompt = plan.config["synthesis"]["decontamination"]["llm_prompt"]
    assert prompt["template"] == "same-problem" and not prompt["chat_template"]
    assert plan.synthesis.contamination_checker().generation.openai.model == "j"
    assert (
        plan.synthesis.contamination_check_env() == "../envs/generate-openai.yaml"
        and plan.synthesis.contamination_check_gpus(True) == 0
    )
    plan = plan_of(with_synthesis(teacher=True, **student, decontamination={"llm_check": "teacher"}))
    checker = plan.synthesis.contamination_checker().to_dict()
    assert checker == {k: plan.config["teacher"][k] for k in ("model", "generation")}


def test_teacher_writes_with_synthesis_sampling_and_the_teacher_labels():
    plan = plan_of(
        with_synthesis(
            teacher=True,
            writer="teacher",
            sampling={"temperature": 0.9, "max_new_tokens": 80},
            label={"solver": "teacher"},
        )
    )
    writing = plan.generation_job("teacher", "arithmetic", "synth-round1-sources")
    assert writing["generation"].backend == "openai" and writing["generation"].sampling.max_new_tokens == 80
    assert plan.generation_job("teacher", "arithmetic", "train")["generation"].sampling.max_new_tokens != 80
    assert plan.generation_job("teacher", "arithmetic", "synth-round1-problems")["prompt"]["user"] == "{problem}="
    assert plan.synthesis.solver(1) == "teacher" and plan.generation_gpus("teacher", "synth-round1-sources", True) == 0


def test_own_writer_solves_with_its_label_prompt_and_loads_nothing_of_the_student():
    settings = {**OWN_WRITER, "label": {"solver": "writer", "prompt": {"user": "Solve: {problem}"}}}
    plan = plan_of(with_synthesis(**settings))
    assert plan.generation_job("writer", "arithmetic", "synth-round1-problems")["prompt"]["user"] == "Solve: {problem}"
    assert plan.generation_model_inputs("writer") == [] and plan.generation_adapter_path("writer") is None
    assert plan.generation_env("writer", "synth-round1-sources") == "../envs/generate-openai.yaml"


@pytest.mark.parametrize(
    ("sft_data", "rounds_data", "problems", "round2_sources", "train_sampled"),
    [
        ("add", "replace", "failed", ["sft-round1"] * 4 + ["synthesized"], ["base", "sft-round1"]),
        ("only", "replace", "failed", ["synthesized"], ["base", "sft-round1"]),
        ("only", "accumulate", "all", ["synthesized", "synthesized"], []),
        ("add", "accumulate", "all", ["base"] * 4 + ["sft-round1"] * 4 + ["synthesized"] * 2, ["base", "sft-round1"]),
    ],
)
def test_sft_pools_synthesized_problems_as_configured(sft_data, rounds_data, problems, round2_sources, train_sampled):
    plan = plan_of(
        lambda config: (
            with_synthesis(
                writer="student", sft_data=sft_data, sources={"problems": problems}, label={"solver": "student"}
            )(config),
            config["sft"].update(rounds_data=rounds_data),
        ),
        rounds=2,
    )
    assert [source for source, _, _ in plan.sft_judged_sources("sft-round2")] == round2_sources
    synthesized = [path for source, _, path in plan.sft_judged_sources("sft-round2") if source == "synthesized"]
    assert synthesized[-1] == "results/tiny-arithmetic/synthesis/round2/arithmetic/judged.jsonl"
    assert plan.train_sampled_models() == train_sampled, "only failures or SFT sources sample the train split"


# ---------------------------------------------------------------- schema errors: short, with the key's path


def test_unknown_key_names_its_path_and_the_closest_known_key():
    config = copy.deepcopy(DEFAULT)
    config["num_seed"] = 2
    config["generation"]["sampling"]["temprature"] = 0.7
    message = schema_error(config)
    assert message.splitlines()[:2] == [
        "unknown config key generation.sampling.temprature: did you mean 'temperature'?",
        "unknown config key num_seed: did you mean 'num_seeds'?",
    ] or message.splitlines()[:2] == [
        "unknown config key num_seed: did you mean 'num_seeds'?",
        "unknown config key generation.sampling.temprature: did you mean 'temperature'?",
    ], message
    assert len(message.splitlines()) == 3


def test_wrong_type_and_value_name_the_key_and_the_value():
    config = copy.deepcopy(DEFAULT)
    config["generation"]["sampling"]["temperature"] = "hot"
    assert (
        schema_error(config).splitlines()[0] == "config key generation.sampling.temperature: expected number, got 'hot'"
    )
    config = copy.deepcopy(DEFAULT)
    config["generation"]["backend"] = "vlm"
    first = schema_error(config).splitlines()[0]
    assert first.startswith("config key generation.backend: 'vlm' is not one of 'hf', "), first


def test_field_map_typo_and_missing_keys_are_short():
    config = copy.deepcopy(DEFAULT)
    config["benchmarks"]["mine"] = {"source": "jsonl", "jsonl": {"test": "/data/x.jsonl"}}
    del config["experiment"]
    lines = schema_error(config).splitlines()
    assert "unknown config key benchmarks.mine.jsonl.test: known keys: paths" in lines
    assert "the config lacks required key(s): experiment" in lines
    assert len(lines) <= 5


def test_schema_violation_raises_the_short_message_and_the_full_one_only_when_verbose():
    config = copy.deepcopy(DEFAULT)
    config["num_seed"] = 2
    with pytest.raises(SnakeskillsError) as short:
        prepare_config(copy.deepcopy(config))
    assert str(short.value).startswith("unknown config key num_seed: did you mean 'num_seeds'?")
    assert len(str(short.value).splitlines()) == 2
    with pytest.raises(SnakeskillsError) as verbose:
        prepare_config(copy.deepcopy(config), verbose=True)
    assert "Failed validating" in str(verbose.value) and len(str(verbose.value).splitlines()) > 100


def test_valid_config_has_no_schema_error():
    assert schema_error(copy.deepcopy(DEFAULT)) is None


def test_unset_api_key_variable_stops_the_plan_naming_the_full_key(monkeypatch):
    monkeypatch.delenv("SNAKESKILLS_UNSET_KEY", raising=False)
    teacher = teacher_section()
    teacher["generation"]["openai"]["api_key_env"] = "SNAKESKILLS_UNSET_KEY"
    with pytest.raises(
        SnakeskillsError,
        match=r"config key teacher\.generation\.openai\.api_key_env: environment variable SNAKESKILLS_UNSET_KEY is "
        "not set",
    ):
        checked(teacher=teacher)
    monkeypatch.setenv("SNAKESKILLS_UNSET_KEY", "k")
    checked(teacher=teacher)


def test_cpu_processes_without_gpus_key_say_what_to_set():
    with pytest.raises(SnakeskillsError) as error:
        checked(lambda config: config.update(training={"processes": 2}), gpus_available=True)
    message = str(error.value)
    assert "training.gpus is null" in message and "set generation.device: cpu" in message, message


def test_every_methods_rounds_say_their_method(tmp_path):
    """SFT's rounds are sft-round<r> beside dpo-round<r>, kto-round<r>, grpo-round<r>, and 'round' stays reserved for
    model names."""
    config = yaml.safe_load((REPO / "config/examples/tiny-arithmetic-sft-dpo-kto-grpo.yaml").read_text())
    config["rounds"] = 2
    prepare_config(config)
    plan = Plan(config, Layout.under(tmp_path / "results"))
    assert plan.tuned_models == [f"{method}-round{r}" for method in config["methods"] for r in (1, 2)]
    with pytest.raises(SnakeskillsError, match="must not start with .* or 'round'"):
        checked(lambda config: config["model"].update(name="round1"))


def test_the_tool_use_plot_is_a_target_only_with_tools():
    tools = {
        "tool": "calculator",
        "tags": {
            "code_begin": "<calc>",
            "code_end": "</calc>",
            "code_output_begin": "<out>",
            "code_output_end": "</out>",
        },
    }
    assert "results/tiny-arithmetic/report/tool_use.png" not in plan_of().targets()
    assert "results/tiny-arithmetic/report/tool_use.png" in plan_of(tools=tools).targets()
