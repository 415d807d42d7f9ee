# Config validation, path patterns and one-line input functions. Every decision (checks, models, rounds,
# which samples feed which SFT, seeds, each job's model, GPUs and env) is made by snakeskills.plan, which
# tests/test_plan.py covers without Snakemake.
import os
import sys
from pathlib import Path

from snakemake.utils import min_version

from snakeskills.data.prepare import local_source_files, preparing_spec
from snakeskills.gpus import planning_for_gpu_nodes
from snakeskills.plan import (
    Layout,
    Plan,
    benchmark_judge,
    check_config,
    check_devices,
    check_model_paths,
    check_results_dir,
    is_code_benchmark,
    llm_judged,
    prepare_config,
    training_gpus,
)
from snakeskills.prompts import resolve_prompt
from snakeskills.workflow import JobSettings

min_version("9.0")


# benchmark presets merged with the keys given next to them, then the schema checks the full config and fills
# its defaults; then the cross-key, model folder and results folder checks
prepare_config(config, verbose=workflow.output_settings.verbose)
GPU_NODES = planning_for_gpu_nodes()
check_config(config, gpus_available=GPU_NODES)
check_model_paths(config)
RESULTS = Path(config["results_dir"]) / config["experiment"]
check_results_dir(RESULTS.absolute())


def gpus_available():
    """Whether jobs run where there are GPUs: this node's, or a cluster's (a SLURM submit host, or any
    non-local executor, which Snakemake names only once jobs are built). Where they do not, a config key that
    names a GPU device stops the plan (check_devices)."""
    available = GPU_NODES or workflow.non_local_exec
    if not available:
        check_devices(config)
    return available


# Path patterns: every file the workflow writes, built from wildcards only (snakeskills.plan.Layout), under
# the names the rules use.
LAYOUT = Layout.under(RESULTS)
PLAN = Plan(config, LAYOUT)
PREPARED = LAYOUT.prepared
CHECKPOINT = LAYOUT.checkpoint
ADAPTER = LAYOUT.adapter
MERGED_MODEL = LAYOUT.merged_model
GENERATION_SETTINGS = LAYOUT.generation_settings
LLM_JUDGE_SETTINGS = LAYOUT.llm_judge_settings
GENERATED = LAYOUT.generated
JUDGED_CHUNK = LAYOUT.judged_chunk
LLM_JUDGED_CHUNK = LAYOUT.llm_judged_chunk
JUDGED = LAYOUT.judged
METRICS = LAYOUT.metrics
METRICS_TABLE = LAYOUT.metrics_table
SFT_DATA = LAYOUT.sft_data
SFT_STATS = LAYOUT.sft_stats
SFT_ALPACA = LAYOUT.sft_alpaca
SFT_DATASET_INFO = LAYOUT.sft_dataset_info
SUMMARY = LAYOUT.summary
SUMMARY_TABLE = LAYOUT.summary_table
PLOT = LAYOUT.plot
SYNTHESIS_SOURCES = LAYOUT.synthesis_sources
SYNTHESIS_PROBLEMS = LAYOUT.synthesis_problems
SYNTHESIS_FILTERED = PLAN.synthesis_filtered()
SYNTHESIS_CANDIDATES = LAYOUT.synthesis_candidates
SYNTHESIS_LLM_CHECKED = LAYOUT.synthesis_llm_checked
SYNTHESIS_LLM_CHECK_STATS = LAYOUT.synthesis_llm_check_stats
CONTAMINATION_CHECK_SETTINGS = LAYOUT.contamination_check_settings
SYNTHESIZED = LAYOUT.synthesized
SYNTHESIS_DROPPED = LAYOUT.synthesis_dropped
SYNTHESIS_FILTER_STATS = LAYOUT.synthesis_filter_stats
SYNTHESIS_JUDGED = LAYOUT.synthesis_judged
SYNTHESIS_LABEL_STATS = LAYOUT.synthesis_label_stats
SYNTHESIS_FUNNEL = LAYOUT.synthesis_funnel
SYNTHESIS_FUNNEL_TABLE = LAYOUT.synthesis_funnel_table
SYNTHESIS_REFERENCES = PLAN.synthesis_reference_files()
SYNTHESIS_STATS = PLAN.synthesis_stats_files()
SYNTHESIS_RUNS = PLAN.synthesis_runs()
SFT_OUTPUT = PLAN.sft_output
LOGS = RESULTS / "logs"
REPORT_PLOTS = ["pass_at_1", "pass_at_k", "generation_lengths", "sft_examples"] + (
    ["synthesis_funnel"] if config["synthesis"] else []
)

BASE_MODEL = PLAN.base_model
TUNED_MODELS = PLAN.tuned_models
EVALUATED_TEACHER = PLAN.evaluated_teacher
# the tiny model bootstraps on its bootstrap benchmark's problems, asked as the student is asked them
TINY_MODEL_PROMPT = resolve_prompt(PLAN.tiny_model_prompt()) if config["model"]["build_tiny"] else None
JUDGE_PROMPT = resolve_prompt(config["judge"]["llm"]["prompt"]) if config["judge"]["llm"] else None
CONTAMINATION_PROMPT = (
    resolve_prompt(config["synthesis"]["decontamination"]["llm_prompt"]) if PLAN.synthesis_llm_check() else None
)


wildcard_constraints:
    round=r"\d+",
    model=r"[A-Za-z0-9._-]+",
    benchmark=r"[A-Za-z0-9._-]+",
    split=r"[A-Za-z0-9._-]+",
    seed=r"\d+",
    chunk=r"\d+",
    num_chunks=r"\d+",


def job_python():
    """The Python of the per-chunk shell: jobs: the one running Snakemake, so that `venv/bin/snakemake` or
    `venv/bin/python -m snakemake` works without activating the venv; under --sdm conda, the env's python3.

    The shell: commands read it from $SNAKESKILLS_JOB_PYTHON, set here when the workflow is parsed (also in
    each job Snakemake spawns, on SLURM), rather than from params: a params change marks finished jobs
    outdated, and a new venv path must not rerun every generation."""
    from snakemake.settings.types import DeploymentMethod

    if DeploymentMethod.CONDA in workflow.deployment_settings.deployment_method:
        return "python3"
    return sys.executable


os.environ.update(SNAKESKILLS_JOB_PYTHON=job_python())


# ---------------------------------------------------------------- input, params and resource functions


def benchmark_source_files(wildcards):
    return local_source_files(config["benchmarks"][wildcards.benchmark], wildcards.split)


def tiny_model_inputs(wildcards):
    tiny = config["tiny_model"]
    return {
        name: PREPARED.format(benchmark=tiny["bootstrap_benchmark"], split=tiny[f"{name}_split"])
        for name in ("bootstrap", "validation")
    }


def generation_model_inputs(wildcards):
    return PLAN.generation_model_inputs(wildcards.model)


def generation_model_path(wildcards):
    return PLAN.generation_model_path(wildcards.model)


def generation_adapter_path(wildcards):
    return PLAN.generation_adapter_path(wildcards.model)


def benchmark_preparing_spec(wildcards):
    """What decides a benchmark's prepared rows: its spec without how it is asked and judged."""
    return preparing_spec(config["benchmarks"][wildcards.benchmark])


def generation_model_config(wildcards):
    return PLAN.generation_job(wildcards.model, wildcards.benchmark, wildcards.split)["model"]


def generation_config(wildcards):
    return PLAN.job_generation(wildcards.model, wildcards.split)


def generation_prompt(wildcards):
    return resolve_prompt(PLAN.generation_job(wildcards.model, wildcards.benchmark, wildcards.split)["prompt"])


def generation_job_env(wildcards):
    return PLAN.generation_env(wildcards.model, wildcards.split)


def generation_job_gpus(wildcards):
    return PLAN.generation_gpus(wildcards.model, wildcards.split, gpus_available())


def llm_judge_gpus(wildcards):
    return PLAN.llm_judge_gpus(gpus_available())


LLM_JUDGE_ENV = PLAN.llm_judge_env()


def contamination_check_gpus(wildcards):
    return PLAN.contamination_check_gpus(gpus_available())


CONTAMINATION_CHECK_ENV = PLAN.contamination_check_env()


def sft_gpus(wildcards):
    return training_gpus(config, gpus_available())


def sft_training_config(wildcards):
    return PLAN.sft_training_config(gpus_available())


def sft_init(wildcards):
    return PLAN.sft_init(wildcards.model)


def sft_judged_files(wildcards):
    return PLAN.sft_judged_files(wildcards.model)


def sft_data_sources(wildcards):
    return [source for source, _, _ in PLAN.sft_judged_sources(wildcards.model)]


def sft_prompts(wildcards):
    """The resolved prompt of each SFT source, in sft_judged_files' order (the student's, with its benchmark's
    question)."""
    return [resolve_prompt(prompt) for prompt in PLAN.sft_prompts(wildcards.model)]


def sft_dataset_name(wildcards):
    """The name `dataset_info.json` gives a round's export (LLaMA-Factory's `dataset` argument)."""
    return f"{config['experiment']}-{wildcards.model}"


def base_model_path(wildcards):
    """The base checkpoint folder as a params function (a path written into params as a string fails --lint)."""
    return PLAN.base_model_folder()


def rule_judge_config(wildcards) -> JobSettings:
    """The settings that decide a benchmark's rule-based verdicts (worker count and LLM judge left out: they must not
    rerun it), as one quoted JSON argument of the judge's shell command."""
    return JobSettings(benchmark_judge(config, wildcards.benchmark))


def judge_threads():
    """Worker processes per judge job: judge.threads, or every core the run was given."""
    return config["judge"]["threads"] or workflow.cores


def prepare_data_threads(wildcards):
    """A code benchmark's preparing runs its reference solutions, as many at a time as a judge job; others: 1."""
    return judge_threads() if is_code_benchmark(config, wildcards.benchmark) else 1


def judged_chunks(wildcards):
    """Chunks merged into one seed file: LLM-judged ones where the LLM judge reads the benchmark."""
    pattern = LLM_JUDGED_CHUNK if llm_judged(config, wildcards.benchmark) else JUDGED_CHUNK
    chunks = range(config["num_chunks"])
    return [pattern.format(chunk=chunk, num_chunks=len(chunks), **dict(wildcards.items())) for chunk in chunks]


def judged_seed_files(wildcards):
    return [JUDGED.format(seed=seed, **dict(wildcards.items())) for seed in PLAN.seeds(wildcards.model, wildcards.split)]


def eval_metrics_files(wildcards):
    return PLAN.eval_metrics_files()


def eval_judged_files(wildcards):
    return PLAN.eval_judged_files()


def synthesis_train_split(wildcards):
    return PREPARED.format(benchmark=wildcards.benchmark, split=config["train_split"])


def synthesis_feedback_files(wildcards):
    return PLAN.synthesis_feedback_files(int(wildcards.round), wildcards.benchmark)


def synthesis_writer_files(wildcards):
    return PLAN.synthesis_writer_files(int(wildcards.round), wildcards.benchmark)


def synthesis_solver_files(wildcards):
    return PLAN.synthesis_solver_files(int(wildcards.round), wildcards.benchmark)


def synthesis_writer(wildcards):
    return PLAN.synthesis_writer(int(wildcards.round))


def synthesis_solver(wildcards):
    return PLAN.synthesis_solver(int(wildcards.round))


def synthesis_exact_answer(wildcards):
    return PLAN.synthesis_exact_answer(wildcards.benchmark)


def sft_stats_files(wildcards):
    return expand(SFT_STATS, model=TUNED_MODELS)


def all_targets():
    return PLAN.targets([SUMMARY, SUMMARY_TABLE], expand(PLOT, plot=REPORT_PLOTS))


def print_comparison():
    table = Path(SUMMARY_TABLE)
    if table.exists():
        print(f"\n{table.read_text()}", flush=True)
