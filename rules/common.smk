import json
import os
import re
import sys
from pathlib import Path

from snakemake.utils import min_version, validate

from snakeskills.gpus import generation_gpus, training_gpus, training_processes
from snakeskills.data.prepare import apply_presets, check_benchmark_specs, check_splits, local_source_files
from snakeskills.prompts import resolve_prompt
from snakeskills.workflow import JobSettings

min_version("9.0")


# Benchmark presets (snakeskills/data/benchmarks/*.yaml) merged with the keys given next to them, before
# validation: the schema checks, and fills the defaults of, the full specs that rules and params see.
if "benchmarks" in config:
    config["benchmarks"] = apply_presets(config["benchmarks"])

validate(config, schema="../config/schema.yaml")
check_benchmark_specs(config["benchmarks"])


def check_config(config):
    """Cross-key checks the JSON schema cannot express; each names the key at fault."""
    if not config["model"]["build_tiny"] and not config["model"]["path"]:
        raise ValueError("config key model.path is required when model.build_tiny is false")
    for name in config["train_benchmarks"]:
        if name not in config["benchmarks"]:
            raise ValueError(f"config key train_benchmarks names {name!r}, which is not in benchmarks")
    if config["model"]["build_tiny"]:
        tiny = config["tiny_model"] if "tiny_model" in config else None
        if tiny is None:
            raise ValueError("config key tiny_model is required when model.build_tiny is true")
        if tiny["bootstrap_benchmark"] not in config["benchmarks"]:
            raise ValueError("config key tiny_model.bootstrap_benchmark names a benchmark not in benchmarks")
    if config["model"]["name"].startswith("round"):
        raise ValueError("config key model.name must not start with 'round' (reserved for tuned models)")
    required_splits = {name: [(config["eval_split"], "eval_split")] for name in config["benchmarks"]}
    for name in config["train_benchmarks"]:
        required_splits[name].append((config["train_split"], "train_split"))
    if config["model"]["build_tiny"]:
        tiny = config["tiny_model"]
        for key in ("bootstrap_split", "validation_split"):
            required_splits[tiny["bootstrap_benchmark"]].append((tiny[key], f"tiny_model.{key}"))
    check_splits(config["benchmarks"], required_splits)
    if config["eval_split"] == config["train_split"]:
        raise ValueError(
            f"config keys eval_split and train_split are both {config['eval_split']!r}: the evaluation would "
            "measure the problems the model was trained on; give a held-out split"
        )
    if config["judge"]["regex"] is not None:
        try:
            re.compile(config["judge"]["regex"])
        except re.error as error:
            raise ValueError(f"config key judge.regex: {config['judge']['regex']!r} does not compile: {error}") from None
    generation = config["generation"]
    sft = config["sft"]
    if sft["method"] == "lora" and "lora" not in sft:
        raise ValueError("config key sft.lora (r, alpha) is required when sft.method is lora")
    if sft["method"] == "full" and sft["merge"]:
        raise ValueError(
            "config key sft.merge applies to sft.method lora (base + adapter merged); sft.method full already "
            "writes each round's full checkpoint (models/round{r}/checkpoint)"
        )
    sft_gpus = training_gpus(sft, generation)
    processes = training_processes(sft, sft_gpus)
    if sft_gpus > 0 and processes != sft_gpus:
        raise ValueError(
            f"config key sft.processes is {processes} but the sft job has {sft_gpus} GPU(s) (sft.gpus): training "
            "runs one process per GPU; set sft.processes to null or to sft.gpus"
        )
    accumulation = sft["training"]["gradient_accumulation_steps"]
    if sft["training"]["batch_size"] % (processes * accumulation):
        raise ValueError(
            f"config key sft.training.batch_size ({sft['training']['batch_size']}) must be a multiple of the "
            f"{processes} training processes (sft.processes / sft.gpus) x {accumulation} "
            "sft.training.gradient_accumulation_steps: each forward pass takes an equal share"
        )
    if config["model"]["build_tiny"]:
        tiny_training = config["tiny_model"]["training"]
        if tiny_training["batch_size"] % tiny_training["gradient_accumulation_steps"]:
            raise ValueError(
                "config key tiny_model.training.batch_size must be a multiple of "
                "tiny_model.training.gradient_accumulation_steps"
            )
    if sft["distributed"] == "fsdp" and sft_gpus < 2:
        raise ValueError(
            "config key sft.distributed is 'fsdp', which shards the model across GPUs, but the sft job has "
            f"{sft_gpus} GPU(s); set sft.gpus to 2 or more, or use ddp"
        )
    if generation["backend"] == "openai":
        raise ValueError(
            "config key generation.backend is 'openai', which samples whatever model its server serves, not the "
            "tuned rounds; use hf or vllm for the model being tuned (openai serves the LLM judge, judge.llm, and "
            "the teacher, teacher.generation)"
        )
    if (
        generation["backend"] == "vllm"
        and sft["method"] == "lora"
        and sft["lora"]["r"] > generation["vllm"]["max_lora_rank"]
    ):
        raise ValueError(
            f"config key sft.lora.r is {config['sft']['lora']['r']} but generation.vllm.max_lora_rank is "
            f"{generation['vllm']['max_lora_rank']}: vLLM could not load the tuned adapters; raise max_lora_rank"
        )
    score = config["sft"]["filters"]["score"]
    if score != "symbolic_correct" and config["judge"]["llm"] is None:
        raise ValueError(
            f"config key sft.filters.score is {score!r}, which needs the LLM judge's verdicts, but judge.llm "
            "is not set; set judge.llm or use sft.filters.score: symbolic_correct"
        )
    for key, section in generation_sections(config).items():
        check_generation_section(section, key)
    if config["teacher"] is not None:
        check_teacher(config["teacher"], config["model"]["name"])


def generation_sections(config):
    """Every generation config section, by its config key: the student's, the LLM judge's, the teacher's."""
    sections = {"generation": config["generation"]}
    if config["judge"]["llm"] is not None:
        sections["judge.llm.generation"] = config["judge"]["llm"]["generation"]
    if config["teacher"] is not None:
        sections["teacher.generation"] = config["teacher"]["generation"]
    return sections


def check_generation_section(generation, key):
    if generation["compile"] and generation["backend"] != "hf":
        raise ValueError(
            f"config key {key}.compile applies to the hf backend only, but {key}.backend is "
            f"{generation['backend']!r} (vllm compiles by itself unless {key}.vllm.enforce_eager)"
        )
    if generation["backend"] == "openai" and "openai" not in generation:
        raise ValueError(f"config key {key}.openai (base_url, model) is required when {key}.backend is openai")


def check_teacher(teacher, student_name):
    name = teacher["name"]
    if name == student_name:
        raise ValueError(
            f"config keys teacher.name and model.name are both {name!r}: teacher and student would share results "
            "paths; rename one"
        )
    if name.startswith("round"):
        raise ValueError("config key teacher.name must not start with 'round' (reserved for tuned models)")


check_config(config)


def check_model_paths(config):
    """Local model folders must exist before anything is scheduled (no hub downloads at run time)."""
    paths = {}
    if not config["model"]["build_tiny"]:
        paths["model.path"] = config["model"]["path"]
    for key, served in (("judge.llm", config["judge"]["llm"]), ("teacher", config["teacher"])):
        if served is not None and served["generation"]["backend"] != "openai":
            paths[f"{key}.model.path"] = served["model"]["path"]
    for key, path in paths.items():
        if not path or not Path(path).is_dir():
            raise ValueError(
                f"config key {key}: {path!r} is not a folder; give a local Hugging Face checkpoint folder "
                "(download it first, e.g. `hf download <repo> --local-dir <folder>`)"
            )


check_model_paths(config)


RESULTS = Path(config["results_dir"]) / config["experiment"]


def check_results_dir(path):
    """The results folder must be creatable and writable before any job runs (nothing half-written)."""
    existing = path
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        raise ValueError(f"config key results_dir: cannot create {str(path)!r}: {str(existing)!r} is a file")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise ValueError(f"config key results_dir: {str(existing)!r} is not writable, so {str(path)!r} cannot be created")


check_results_dir(RESULTS.absolute())
BASE_MODEL = config["model"]["name"]
TUNED_MODELS = [f"round{r}" for r in range(1, config["rounds"] + 1)]
MODELS = [BASE_MODEL, *TUNED_MODELS]
TEACHER = config["teacher"]["name"] if config["teacher"] is not None else None
EVALUATED_TEACHER = TEACHER if TEACHER is not None and config["teacher"]["evaluate"] else None
# the models compared on the eval split, in table order: the student before and after each round, the teacher
EVAL_MODELS = MODELS + ([EVALUATED_TEACHER] if EVALUATED_TEACHER is not None else [])
BENCHMARKS = list(config["benchmarks"])
SEEDS = list(range(config["num_seeds"]))
TRAIN_SEEDS = list(range(config["train_num_seeds"]))
CHUNKS = list(range(config["num_chunks"]))
PROMPT = resolve_prompt(config["prompt"])
JUDGE_PROMPT = resolve_prompt(config["judge"]["llm"]["prompt"]) if config["judge"]["llm"] else None

# Path patterns: every file the workflow writes, built from wildcards only.
PREPARED = str(RESULTS / "data/{benchmark}/{split}.jsonl")
# a full checkpoint: the built tiny base model (model.build_tiny) or a round's full fine-tune (sft.method full)
CHECKPOINT = str(RESULTS / "models/{model}/checkpoint")
ADAPTER = str(RESULTS / "models/{model}/adapter")
MERGED_MODEL = str(RESULTS / "models/{model}/merged")
GENERATED = str(RESULTS / "generate/{model}/{benchmark}/{split}/rs{seed}/chunk{chunk}-of-{num_chunks}.jsonl")
GENERATION_SETTINGS = str(RESULTS / "settings/generate/{model}/{benchmark}/{split}.json")
LLM_JUDGE_SETTINGS = str(RESULTS / "settings/llm_judge.json")
JUDGED_CHUNK = str(RESULTS / "judge/{model}/{benchmark}/{split}/rs{seed}/chunk{chunk}-of-{num_chunks}.jsonl")
LLM_JUDGED_CHUNK = str(RESULTS / "judge-llm/{model}/{benchmark}/{split}/rs{seed}/chunk{chunk}-of-{num_chunks}.jsonl")
JUDGED = str(RESULTS / "judge/{model}/{benchmark}/{split}/output-rs{seed}.jsonl")
METRICS = str(RESULTS / "metrics/{model}/{benchmark}/{split}/metrics.json")
METRICS_TABLE = str(RESULTS / "metrics/{model}/{benchmark}/{split}/metrics.txt")
SFT_DATA = str(RESULTS / "sft/{model}/data.jsonl")
SFT_STATS = str(RESULTS / "sft/{model}/stats.json")
SFT_ALPACA = str(RESULTS / "sft/{model}/alpaca.json")
SFT_DATASET_INFO = str(RESULTS / "sft/{model}/dataset_info.json")
SUMMARY = str(RESULTS / "eval/summary.json")
SUMMARY_TABLE = str(RESULTS / "eval/summary.txt")
PLOT = str(RESULTS / "report/{plot}.png")
LOGS = RESULTS / "logs"


wildcard_constraints:
    model=r"[A-Za-z0-9._-]+",
    benchmark=r"[A-Za-z0-9._-]+",
    split=r"[A-Za-z0-9._-]+",
    seed=r"\d+",
    chunk=r"\d+",
    num_chunks=r"\d+",


def parent_model(model):
    """The model `model` was trained after: the base model for round1, else the previous round."""
    round_number = int(model.removeprefix("round"))
    return BASE_MODEL if round_number == 1 else f"round{round_number - 1}"


def sft_data_models(model):
    """Models whose judged train generations feed `model`'s SFT data (sft.rounds_data, teacher.later_rounds).

    replace: the previous round's only; accumulate: the base model's and every earlier round's. With a teacher,
    the teacher takes the base model's place: round1 learns from it, later rounds from it, the student's own
    rounds, or both (teacher.later_rounds).
    """
    student = MODELS[: MODELS.index(model)]
    if config["sft"]["rounds_data"] == "replace":
        student = student[-1:]
    if TEACHER is None:
        return student
    student = [name for name in student if name != BASE_MODEL]
    later_rounds = config["teacher"]["later_rounds"]
    if not student or later_rounds == "teacher":
        return [TEACHER]
    return student if later_rounds == "student" else [TEACHER, *student]


def train_sampled_models():
    """Every model that samples the train split: those whose generations feed some round's SFT data."""
    return list(dict.fromkeys(name for model in TUNED_MODELS for name in sft_data_models(model)))


SFT_METHOD = config["sft"]["method"]
# what a round's SFT writes: an adapter on the base model (lora) or a full checkpoint (full)
SFT_OUTPUT = ADAPTER if SFT_METHOD == "lora" else CHECKPOINT


def sft_init(wildcards):
    """What `model`'s training continues from (sft.init continue, from round 2 on): the previous round's
    adapter (lora) or checkpoint (full); none otherwise (training starts from the base model)."""
    if config["sft"]["init"] == "base" or parent_model(wildcards.model) == BASE_MODEL:
        return []
    return [SFT_OUTPUT.format(model=parent_model(wildcards.model))]


SFT_GPUS = training_gpus(config["sft"], config["generation"])


def sft_training_config():
    """The sft settings that decide how a round is trained (data choice and filters act through its input).

    The processes count too: each process draws its own share of every batch, so the weights differ."""
    keys = ("method", "seed", "lora", "training") if SFT_METHOD == "lora" else ("method", "seed", "training")
    return {
        **{key: config["sft"][key] for key in keys},
        "processes": training_processes(config["sft"], SFT_GPUS),
        "distributed": config["sft"]["distributed"],
    }


def sft_dataset_name(wildcards):
    """The name `dataset_info.json` gives a round's export (LLaMA-Factory's `dataset` argument)."""
    return f"{config['experiment']}-{wildcards.model}"


def base_model_folder():
    """The base checkpoint folder: the built tiny model or model.path."""
    if config["model"]["build_tiny"]:
        return CHECKPOINT.format(model=BASE_MODEL)
    return config["model"]["path"]


def base_model_path(wildcards):
    """`base_model_folder` as a params function (a path written into params as a string fails `--lint`)."""
    return base_model_folder()


def generation_model_path(wildcards):
    """The checkpoint a model generates with: a full fine-tune's own (sft.method full), else the base model;
    the teacher's own (teacher.model.path; none for an openai server)."""
    if wildcards.model == TEACHER:
        return config["teacher"]["model"]["path"]
    if wildcards.model != BASE_MODEL and SFT_METHOD == "full":
        return CHECKPOINT.format(model=wildcards.model)
    return base_model_folder()


def generation_adapter_path(wildcards):
    """The LoRA adapter a tuned round generates with (sft.method lora); none for the base model, the teacher, or
    full fine-tunes."""
    if wildcards.model in (BASE_MODEL, TEACHER) or SFT_METHOD == "full":
        return None
    return ADAPTER.format(model=wildcards.model)


def sampling_section(model):
    """The config section that says how `model` samples: the teacher's own, or the student's (every other)."""
    return config["teacher"] if model == TEACHER else config


def generation_model_config(wildcards):
    """model (name, dtype, trust_remote_code, ...) or teacher.model, for the generation settings file."""
    return sampling_section(wildcards.model)["model"]


def generation_config(wildcards):
    """generation or teacher.generation (backend, sampling, ...), for the generation settings file."""
    return sampling_section(wildcards.model)["generation"]


TEACHER_PROMPT = resolve_prompt(config["teacher"]["prompt"]) if TEACHER is not None else None


def generation_prompt(wildcards):
    """The resolved prompt a model is sampled with: the teacher's own, or the student's."""
    return TEACHER_PROMPT if wildcards.model == TEACHER else PROMPT


def base_model_inputs():
    """Files Snakemake must produce before the base model can load (none for a local checkpoint)."""
    return [CHECKPOINT.format(model=BASE_MODEL)] if config["model"]["build_tiny"] else []


def benchmark_source_files(wildcards):
    """Local files prepare_data reads for a split (JSONL/parquet files, an hf.path folder); none from the hub."""
    return local_source_files(config["benchmarks"][wildcards.benchmark], wildcards.split)


def tiny_model_inputs(wildcards):
    tiny = config["tiny_model"]
    return {
        "bootstrap": PREPARED.format(benchmark=tiny["bootstrap_benchmark"], split=tiny["bootstrap_split"]),
        "validation": PREPARED.format(benchmark=tiny["bootstrap_benchmark"], split=tiny["validation_split"]),
    }


def generation_model_inputs(wildcards):
    """The files a model's generation loads: base model, base + adapter (lora) or the round's checkpoint (full);
    none for the teacher (a local folder or a server)."""
    if wildcards.model == TEACHER:
        return []
    if wildcards.model != BASE_MODEL and SFT_METHOD == "full":
        return [CHECKPOINT.format(model=wildcards.model)]
    adapter = generation_adapter_path(wildcards)
    return base_model_inputs() + ([] if adapter is None else [adapter])


def seeds_for(model, split):
    """Random seeds a model samples a split with: train_num_seeds (teacher.train_num_seeds for the teacher) on
    the train split, num_seeds on any other."""
    if split != config["train_split"]:
        return SEEDS
    return list(range(config["teacher"]["train_num_seeds"])) if model == TEACHER else TRAIN_SEEDS


def rule_judge_config():
    """The settings that decide rule-based verdicts (worker count and LLM judge left out: they must not rerun it).

    A JobSettings: the judge's shell command receives it as one quoted JSON argument.
    """
    return JobSettings({key: value for key, value in config["judge"].items() if key not in ("llm", "threads")})


def judge_threads():
    """Worker processes per judge job: judge.threads, or every core the run was given."""
    return config["judge"]["threads"] or workflow.cores


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


def generation_env(generation):
    """The conda env (`--sdm conda`) of a generation backend: envs/generate-{hf,vllm,openai}.yaml."""
    return f"../envs/generate-{generation['backend']}.yaml"


def generation_job_env(wildcards):
    """The conda env of a model's generate jobs: its backend's (the teacher's may differ from the student's)."""
    return generation_env(generation_config(wildcards))


def generation_job_gpus(wildcards):
    """GPUs of a model's generate jobs (its backend's; none for a teacher behind an openai server)."""
    return generation_gpus(generation_config(wildcards))


LLM_JUDGE_ENV = generation_env(config["judge"]["llm"]["generation"] if config["judge"]["llm"] else config["generation"])
LLM_JUDGE_GPUS = generation_gpus(config["judge"]["llm"]["generation"]) if config["judge"]["llm"] else 0


def judged_chunks(wildcards):
    """Chunks merged into one seed file: LLM-judged ones when judge.llm is set."""
    return expand(
        LLM_JUDGED_CHUNK if config["judge"]["llm"] else JUDGED_CHUNK,
        model=wildcards.model,
        benchmark=wildcards.benchmark,
        split=wildcards.split,
        seed=wildcards.seed,
        chunk=CHUNKS,
        num_chunks=config["num_chunks"],
    )


def judged_seed_files(wildcards):
    return expand(
        JUDGED,
        model=wildcards.model,
        benchmark=wildcards.benchmark,
        split=wildcards.split,
        seed=seeds_for(wildcards.model, wildcards.split),
    )


def sft_judged_runs(wildcards):
    """(model, benchmark, seed) of every judged train-split seed file `wildcards.model`'s SFT data is made from."""
    split = config["train_split"]
    return [
        (model, benchmark, seed)
        for model in sft_data_models(wildcards.model)
        for benchmark in config["train_benchmarks"]
        for seed in seeds_for(model, split)
    ]


def sft_judged_files(wildcards):
    """The judged seed files of `sft_judged_runs`, in the same order."""
    split = config["train_split"]
    return [JUDGED.format(model=m, benchmark=b, split=split, seed=seed) for m, b, seed in sft_judged_runs(wildcards)]


def sft_data_sources(wildcards):
    """The model that wrote each of `sft_judged_files` (an SFT example's `generated_by`)."""
    return [model for model, _, _ in sft_judged_runs(wildcards)]


def eval_runs():
    """(model, benchmark) pairs compared on the eval split, in table order."""
    return [(model, benchmark) for model in EVAL_MODELS for benchmark in BENCHMARKS]


def eval_metrics_files(wildcards):
    return [METRICS.format(model=model, benchmark=benchmark, split=config["eval_split"]) for model, benchmark in eval_runs()]


def eval_judged_runs():
    """(model, benchmark, seed) of every judged seed file on the eval split, in plot order."""
    return [(model, benchmark, seed) for model in EVAL_MODELS for benchmark in BENCHMARKS for seed in SEEDS]


def eval_judged_files(wildcards):
    """The judged seed files of `eval_judged_runs`, in the same order (generation lengths)."""
    return [
        JUDGED.format(model=model, benchmark=benchmark, split=config["eval_split"], seed=seed)
        for model, benchmark, seed in eval_judged_runs()
    ]


def sft_stats_files(wildcards):
    return expand(SFT_STATS, model=TUNED_MODELS)


REPORT_PLOTS = ["pass_at_1", "pass_at_k", "generation_lengths", "sft_examples"]


def all_targets():
    train_metrics = expand(
        METRICS, model=train_sampled_models(), benchmark=config["train_benchmarks"], split=config["train_split"]
    )
    merged = expand(MERGED_MODEL, model=TUNED_MODELS) if SFT_METHOD == "lora" and config["sft"]["merge"] else []
    return [SUMMARY, SUMMARY_TABLE, *train_metrics, *expand(PLOT, plot=REPORT_PLOTS), *merged]


def print_comparison():
    table = Path(SUMMARY_TABLE)
    if table.exists():
        print(f"\n{table.read_text()}", flush=True)
