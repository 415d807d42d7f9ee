# Validation, the plan, and input functions. Every decision (checks, models, rounds, which samples feed which SFT,
# seeds, each job's settings, GPUs and env) is made by the snakeskills.plan package, which tests/unit/test_plan.py
# covers without Snakemake; the rules read file patterns from LAYOUT (snakeskills.plan.layout.Layout) and call
# PLAN's methods directly (`lambda w: PLAN.judged_seed_files(w.model, w.benchmark, w.split)`); the functions
# below are those that do more than pass wildcards on, or that several rules share.
import os
import sys
from pathlib import Path

from snakemake.utils import min_version

from snakeskills.data.specs import local_source_files, preparing_spec
from snakeskills.backends.gpus import cluster_run, planning_for_gpu_nodes, started_executor
from snakeskills.plan.checks import check_code_sandbox, check_config, check_devices
from snakeskills.plan.config import prepare_config
from snakeskills.plan.folders import check_model_paths, check_results_dir
from snakeskills.plan.layout import PREPARED_SPLIT, Layout
from snakeskills.plan.resources import training_gpu_resource, training_nodes_resources
from snakeskills.plan.run import Plan
from snakeskills.settings.run import RunSettings
from snakeskills.training.methods import TRAINING_METHODS, checkpoint_model_parts
from snakeskills.plan.sections import benchmark_judge, benchmark_metrics, benchmark_prompt, is_code_benchmark
from snakeskills.prompts import resolve_prompt
from snakeskills.job import JobSettings, forward_interruptions_to_jobs

min_version("9.0")


# ---------------------------------------------------------------- validation

# benchmark presets merged with the keys given next to them, then the schema checks the full config and fills
# its defaults; then the cross-key, model folder and results folder checks
prepare_config(config, verbose=workflow.output_settings.verbose)
SETTINGS = RunSettings.from_config(config)  # the typed sections, read once
EXECUTOR = started_executor()  # --executor, or the profile's (profiles/slurm: slurm); a dry run's too
GPU_NODES = planning_for_gpu_nodes(EXECUTOR)
# the executor that runs the jobs: not known to a job's own Snakemake inside a cluster's job (its run's was checked
# where the run started), nor yet to a run through Snakemake's API
JOBS_EXECUTOR = None if workflow.remote_exec or EXECUTOR is None else EXECUTOR.name
check_config(config, gpus_available=GPU_NODES, settings=SETTINGS, executor=JOBS_EXECUTOR)
check_code_sandbox(config)
check_model_paths(config, SETTINGS)
RESULTS = Path(config["results_dir"]) / config["experiment"]
check_results_dir(RESULTS.absolute())
LAYOUT = Layout.under(RESULTS)
LOGS = Path(LAYOUT.logs)
PLAN = Plan(config, LAYOUT, SETTINGS)
SYNTHESIS = PLAN.synthesis  # None without synthesis (rules/synthesis.smk is then not included)


def gpus_available():
    """Whether jobs run where there are GPUs: a cluster's nodes, where Snakemake was started with a cluster's executor
    (`--profile slurm`), a dry run included, wherever the plan is made; else this node's, or a SLURM submit host's
    (planning_for_gpu_nodes). A workflow run through Snakemake's API names its executor only once jobs are built,
    hence asked again here. Where jobs have no GPU, a config key that names a GPU device stops the plan
    (check_devices)."""
    available = GPU_NODES or workflow.non_local_exec or cluster_run(EXECUTOR or started_executor())
    if not available:
        check_devices(config, SETTINGS)
    return available


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


def generation_settings(wildcards):
    return PLAN.generation_settings(wildcards.model, wildcards.benchmark, wildcards.split)


def local_run():
    """Whether Snakemake runs the jobs on this node (`snakemake -c all`), not each in an allocation of its own
    (`--profile slurm`). Here a shared model server (generation.share_model) claims its GPUs itself and the jobs it
    serves declare none, so they run side by side (snakeskills.backends.specs.declared_job_gpus)."""
    return not (workflow.non_local_exec or cluster_run(EXECUTOR or started_executor()))


def rule_judge_config(wildcards) -> JobSettings:
    """The settings that decide a benchmark's rule-based verdicts (worker count and LLM judge left out: they must not
    rerun it), as one quoted JSON argument of the judge's shell command."""
    return JobSettings(benchmark_judge(config, wildcards.benchmark))


def judge_threads():
    """Worker processes per judge job: judge.threads, or every core the run was given."""
    return config["judge"]["threads"] or workflow.cores


def sft_filters():
    """sft.filters, with sft.pass_rate as its pass_rate where it leaves out problems (a run with the default keeps the
    value it always had, so its SFT data is not made again)."""
    bounds = config["sft"]["pass_rate"]
    every_problem = bounds["min"] == 0 and bounds["max"] == 1
    return config["sft"]["filters"] if every_problem else {**config["sft"]["filters"], "pass_rate": bounds}


def sft_dataset_name(wildcards):
    """The name `dataset_info.json` gives a round's export (LLaMA-Factory's `dataset` argument)."""
    return f"{config['experiment']}-{wildcards.model}"


def training_job_gpus(wildcards):
    """GPUs of a training job (every method's: training.gpus; none across several nodes: TRAINING_NODES asks
    for each node's)."""
    return training_gpu_resource(config, gpus_available())


# what a training job across several nodes asks SLURM for (nodes, a task per node, each node's GPUs); none on one
TRAINING_NODES = training_nodes_resources(config, GPU_NODES)


def training_settings(wildcards):
    """The settings that decide a round's weights, from its training method's section."""
    return PLAN.training_for(wildcards.model).training_config(gpus_available())


def segmented_model(model):
    """Whether ``model`` is a training segment's checkpoint (a round trained in segments: plan/validation.py)."""
    return checkpoint_model_parts(model) is not None


def training_judging(wildcards):
    """Each train benchmark's rule-based judge settings and the student's parse_reasoning settings, for a method
    rewarded online by the judge (grpo); none for the others."""
    if not PLAN.training_for(wildcards.model).method.judges_rewards:
        return {}
    judging = {"judges": grpo_judges(wildcards), "reasoning": student_reasoning(wildcards)}
    if PLAN.tools is not None:  # GRPO samples with the student's tools
        judging["tools"] = PLAN.tools.training_section().to_dict()
    return judging


def previous_model_train_files(wildcards):
    """The previous model's judged train samples a dpo, kto or grpo round's data is made from."""
    return [path for _, path in PLAN.previous_model_train_files(wildcards.model)]


def previous_model_train_benchmarks(wildcards):
    return [benchmark for benchmark, _ in PLAN.previous_model_train_files(wildcards.model)]


def previous_model_train_prompts(wildcards):
    """The student's resolved prompt with each file's benchmark question, in previous_model_train_files' order."""
    return [
        resolve_prompt(benchmark_prompt(config["prompt"], config["benchmarks"][benchmark]))
        for benchmark in previous_model_train_benchmarks(wildcards)
    ]


def student_reasoning(wildcards):
    """The student's parse_reasoning settings: GRPO's judge reads the answer after the thinking, as for samples."""
    generation = config["generation"]
    return {key: generation[key] for key in ("parse_reasoning", "end_reasoning_string")}


def grpo_judges(wildcards):
    """Each train benchmark's rule-based judge settings: GRPO's reward is their verdict."""
    return {benchmark: benchmark_judge(config, benchmark) for benchmark in config["train_benchmarks"]}
