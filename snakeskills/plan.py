"""The plan: config checks and every decision the workflow's DAG is built from, as plain functions.

``rules/common.smk`` validates the config against ``config/schema.yaml`` (``prepare_config``), runs
``check_config``, builds one ``Plan`` and keeps one-line input functions that call it. Everything here is
testable without Snakemake (tests/test_plan.py): which models exist, which samples feed each round's SFT,
how many seeds each model draws on each split, what a model generates with, each job's GPUs and conda env.
Mistakes raise ``SnakeskillsError`` naming the config key, before any job runs.
"""

from __future__ import annotations

import importlib.util
import os
import re
from dataclasses import dataclass, fields
from pathlib import Path

from snakeskills.backends.specs import backend_spec
from snakeskills.data.prepare import apply_presets, check_benchmark_specs, check_splits
from snakeskills.errors import SnakeskillsError

SCHEMA = Path(__file__).resolve().parent.parent / "config" / "schema.yaml"
DEFAULT_CONFIG = SCHEMA.parent / "config.yaml"


def prepare_config(config: dict, *, verbose: bool = False) -> None:
    """Apply benchmark presets, validate ``config`` against the schema and fill its defaults, in place.

    A schema violation raises a ``SnakeskillsError`` of one or two lines (``schema_error``); Snakemake's own
    message, with the schema and the config, follows it only with ``verbose``."""
    from snakemake.exceptions import WorkflowError
    from snakemake.utils import validate

    if "benchmarks" in config:
        config["benchmarks"] = apply_presets(config["benchmarks"])
    try:
        validate(config, schema=str(SCHEMA))
    except WorkflowError as error:  # the defaults filled before the failure add no violation of their own
        message = schema_error(config) or str(error)
        if verbose:
            raise SnakeskillsError(f"{message}\n\n{error}") from None
        raise SnakeskillsError(message) from None
    check_benchmark_specs(config["benchmarks"])


def schema_error(config: dict, *, limit: int = 3) -> str | None:
    """The config's schema violations, one line each (at most ``limit``): the key's path, the bad value, and for
    an unknown key the closest known one. ``None`` when the config is valid."""
    import jsonschema
    import yaml

    schema = yaml.safe_load(SCHEMA.read_text(encoding="utf-8"))
    errors = sorted(jsonschema.Draft202012Validator(schema).iter_errors(config), key=jsonschema.exceptions.relevance)
    errors = [jsonschema.exceptions.best_match([error]) for error in errors]
    missing: dict[str, list[str]] = {}  # one line per object that lacks required keys
    for error in errors:
        if error.validator == "required" and isinstance(error.instance, dict):
            path = ".".join(str(part) for part in error.absolute_path)
            missing.setdefault(path, []).extend(key for key in error.validator_value if key not in error.instance)
    lines = [line for error in errors if error.validator != "required" for line in _error_lines(error)]
    for path, keys in missing.items():
        where = f"config key {path}" if path else "the config"
        lines.append(f"{where} lacks required key(s): {', '.join(dict.fromkeys(keys))}")
    lines = list(dict.fromkeys(lines))
    if not lines:
        return None
    more = f"\n(and {len(lines) - limit} more)" if len(lines) > limit else ""
    return "\n".join(lines[:limit]) + more + _SCHEMA_HINT


def _error_lines(error) -> list[str]:
    import difflib

    path = ".".join(str(part) for part in error.absolute_path)
    where = f"config key {path}" if path else "the config"
    if error.validator == "additionalProperties" and isinstance(error.instance, dict):
        known = sorted(error.schema.get("properties", {}))
        lines = []
        for key in (key for key in error.instance if key not in known):
            full_key = f"{path}.{key}" if path else str(key)
            close = difflib.get_close_matches(str(key), known, n=1, cutoff=0.6)
            hint = f"did you mean {close[0]!r}?" if close else f"known keys: {', '.join(known)}"
            lines.append(f"unknown config key {full_key}: {hint}")
        if lines:
            return lines
    value = _short(error.instance)
    if error.validator == "type":
        expected = error.validator_value
        expected = " or ".join(expected) if isinstance(expected, list) else expected
        return [f"{where}: expected {expected}, got {value}"]
    if error.validator == "enum":
        return [f"{where}: {value} is not one of {', '.join(_short(choice) for choice in error.validator_value)}"]
    return [f"{where}: {value}: {error.message.replace(repr(error.instance), '').strip()}"]


_SCHEMA_HINT = "\n(config/schema.yaml describes every key; run snakemake with --verbose for the full check)"


def _short(value, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def default_config() -> dict:
    """The embedded default (config/config.yaml), validated: the schema's defaults filled. For benchmarks and
    tests that call package functions directly and need a whole section (``sft.training``, ``generation``)."""
    import yaml

    config = yaml.safe_load(DEFAULT_CONFIG.read_text(encoding="utf-8"))
    prepare_config(config)
    return config


# ---------------------------------------------------------------- checks


def generation_sections(config: dict) -> dict[str, dict]:
    """Every generation config section, by its config key: the student's, the LLM judge's, the teacher's."""
    sections = {"generation": config["generation"]}
    if config["judge"]["llm"] is not None:
        sections["judge.llm.generation"] = config["judge"]["llm"]["generation"]
    if config["teacher"] is not None:
        sections["teacher.generation"] = config["teacher"]["generation"]
    synthesis = config["synthesis"]
    if synthesis is not None and synthesis["writer"] == "own" and synthesis["generation"] is not None:
        sections["synthesis.generation"] = synthesis["generation"]
    return sections


ASKED_PROMPT_KEYS = ("template", "system", "user", "num_few_shot")
JUDGE_RULE_KEYS = ("extraction", "regex", "equivalence", "timeout_seconds", "memory_limit_mb")


def benchmark_prompt(prompt: dict, benchmark_spec: dict) -> dict:
    """The prompt section a model answers a benchmark's problems with: the model's ``prompt``, whose question
    (template, system, user, num_few_shot) the benchmark's own ``prompt`` replaces when it gives one; the chat
    template settings stay the model's."""
    asked = benchmark_spec["prompt"]
    if not asked:
        return prompt
    return {**prompt, **dict.fromkeys(ASKED_PROMPT_KEYS), **asked}


def benchmark_judge(config: dict, benchmark: str) -> dict:
    """The rule-based judge's settings for one benchmark's answers: ``judge``'s, with the benchmark's own ``judge``
    keys (extraction, regex, equivalence, limits) in their place (worker count and LLM judge left out). Letters
    need no symbolic comparison: a multichoice benchmark's are extraction and regex only, so that changing the math
    judge's settings does not rerun its judge jobs; a code benchmark's are extraction and the limits a program
    runs under."""
    settings = {**{key: config["judge"][key] for key in JUDGE_RULE_KEYS}, **config["benchmarks"][benchmark]["judge"]}
    if settings["extraction"] == "multichoice":
        return {"extraction": "multichoice", "regex": settings["regex"]}
    if settings["extraction"] == "code":
        return {key: settings[key] for key in ("extraction", "timeout_seconds", "memory_limit_mb")}
    return settings


def is_code_benchmark(config: dict, benchmark: str) -> bool:
    """Whether a benchmark's answers are programs judged by their tests (benchmarks.<name>.code)."""
    return config["benchmarks"][benchmark]["code"] is not None


def llm_judged(config: dict, benchmark: str) -> bool:
    """Whether the LLM judge (judge.llm) reads a benchmark's answers: every benchmark's but a code benchmark's,
    whose tests decide."""
    return config["judge"]["llm"] is not None and not is_code_benchmark(config, benchmark)


def check_config(config: dict, *, gpus_available: bool) -> None:
    """Cross-key checks the JSON schema cannot express; each names the key at fault.

    ``gpus_available``: whether the planning node sees GPUs (decides hf ``device: auto``'s GPU count)."""
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
    _check_splits(config)
    _check_regex(config["judge"]["regex"], "judge.regex")
    _check_benchmark_questions(config)
    for key, section in generation_sections(config).items():
        backend_spec(section).check(section, key)
        _check_reasoning(section, key)
    _check_student_backend(config)
    _check_sft(config, gpus_available)
    if config["teacher"] is not None:
        check_model_name(config["teacher"]["name"], "teacher.name")
        if config["teacher"]["name"] == model["name"]:
            raise SnakeskillsError(
                f"config keys teacher.name and model.name are both {model['name']!r}: teacher and student would "
                "share results paths; rename one"
            )
    if config["synthesis"] is not None:
        _check_synthesis(config)
    for key, (prompt, reader) in prompt_readers(config).items():
        _check_chat_template_kwargs(config, key, prompt, reader)


def prompt_readers(config: dict) -> dict[str, tuple[dict, dict]]:
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
        from snakeskills.tiny_model import CHAT_TEMPLATE

        template, source = CHAT_TEMPLATE, "the tiny model"
    else:
        path = reader["model"]["path"]
        if not backend_spec(reader["generation"]).needs_local_model or not path or not Path(path).is_dir():
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


def _check_regex(pattern: str | None, key: str) -> None:
    if pattern is None:
        return
    try:
        re.compile(pattern)
    except re.error as error:
        raise SnakeskillsError(f"config key {key}: {pattern!r} does not compile: {error}") from None


def _check_benchmark_questions(config: dict) -> None:
    """The student's prompt and each benchmark's own must resolve (a template that exists, format strings that
    parse), a benchmark's judge regex compile, a multiple-choice benchmark be judged as one (a math judge would
    compare letters with math-verify), and code be judged by running tests, on a benchmark that has them."""
    from snakeskills.prompts import resolve_prompt

    resolve_prompt(config["prompt"])
    for benchmark, spec in config["benchmarks"].items():
        key = f"benchmarks.{benchmark}"
        _check_regex(spec["judge"].get("regex"), f"{key}.judge.regex")
        if spec["prompt"]:
            resolve_prompt(benchmark_prompt(config["prompt"], spec), f"{key}.prompt")
        extraction = benchmark_judge(config, benchmark)["extraction"]
        if spec["multiple_choice"] is not None and extraction != "multichoice":
            raise SnakeskillsError(
                f"config key {key}.judge.extraction: benchmark {benchmark!r} is multiple-choice (its expected answers "
                f"are option letters) but is judged with extraction {extraction!r}; set {key}.judge: "
                "{extraction: multichoice}"
            )
        if spec["code"] is not None and extraction != "code":
            raise SnakeskillsError(
                f"config key {key}.judge.extraction: benchmark {benchmark!r} is a code benchmark (its answers are "
                f"programs, judged by running its tests) but is judged with extraction {extraction!r}; set "
                f"{key}.judge: {{extraction: code}}"
            )
        if spec["code"] is None and extraction == "code":
            raise SnakeskillsError(
                f"config key {key}.judge.extraction is code (run each answer against the row's tests), but benchmark "
                f"{benchmark!r} has no tests; describe them with {key}.code, or judge it another way"
            )


def _check_reasoning(generation: dict, key: str) -> None:
    """A stop string that cuts a reasoning model's text at (or before) the end of its thinking would leave every
    generation without an answer."""
    if not generation["parse_reasoning"]:
        return
    end = generation["end_reasoning_string"]
    for stop in generation["sampling"]["stop"]:
        if stop in end or end in stop:
            raise SnakeskillsError(
                f"config key {key}.sampling.stop has {stop!r}, which cuts the text where {key}.end_reasoning_string "
                f"{end!r} ends the thinking, so no answer would follow; drop it from stop"
            )


def _check_synthesis(config: dict) -> None:
    synthesis = config["synthesis"]
    writer, solver = synthesis["writer"], synthesis["label"]["solver"]
    for key, who in (("synthesis.writer", writer), ("synthesis.label.solver", solver)):
        if who == "teacher" and config["teacher"] is None:
            raise SnakeskillsError(f"config key {key} is 'teacher' but no teacher is set (config key teacher)")
    if writer == "own":
        if synthesis["generation"] is None:
            raise SnakeskillsError(
                "config key synthesis.generation (backend, sampling) is required when synthesis.writer is own"
            )
        if synthesis["sampling"] is not None:
            raise SnakeskillsError(
                "config key synthesis.sampling replaces a teacher or student writer's sampling; an own writer "
                "samples with synthesis.generation.sampling"
            )
        name = synthesis["name"]
        check_model_name(name, "synthesis.name")
        taken = {config["model"]["name"]: "model.name"}
        if config["teacher"] is not None:
            taken[config["teacher"]["name"]] = "teacher.name"
        if name in taken:
            raise SnakeskillsError(
                f"config keys synthesis.name and {taken[name]} are both {name!r}: they would share results paths; "
                "rename one"
            )
        if solver == "writer" and synthesis["label"]["prompt"] is None:
            raise SnakeskillsError(
                "config key synthesis.label.prompt (how the writer is asked to solve) is required when "
                "synthesis.label.solver is writer and synthesis.writer is own"
            )
    _check_regex(synthesis["filter"]["pattern"], "synthesis.filter.pattern")
    for benchmark in config["train_benchmarks"]:  # multiple-choice and code benchmarks are judged so (checked before)
        kind = {"multichoice": "multiple-choice", "code": "a code benchmark"}.get(
            benchmark_judge(config, benchmark)["extraction"]
        )
        if kind is not None:
            raise SnakeskillsError(
                f"config key synthesis: train benchmark {benchmark!r} is {kind}, and synthesis writes "
                "open-answer problems labelled by majority vote; train on it without synthesis (synthesis: null), or "
                "leave it out of train_benchmarks"
            )
    checker = synthesis["decontamination"]["llm_check"]
    section = {"judge": "judge.llm", "teacher": "teacher"}.get(checker)
    if checker is not None and (config["judge"]["llm"] if checker == "judge" else config["teacher"]) is None:
        raise SnakeskillsError(
            f"config key synthesis.decontamination.llm_check is {checker!r}, which asks {section} whether a new "
            f"problem is an eval problem, but {section} is not set; set it, or llm_check: null"
        )
    for key in ("train_split", "eval_split"):
        if synthesis_split_part(config[key]) is not None:
            raise SnakeskillsError(f"config key {key}: split names synth-round<r>... are kept for synthesized data")


def check_model_name(name: str, key: str) -> None:
    if name.startswith("round"):
        raise SnakeskillsError(f"config key {key} must not start with 'round' (reserved for tuned models)")


def _check_splits(config: dict) -> None:
    required = {name: [(config["eval_split"], "eval_split")] for name in config["benchmarks"]}
    for name in config["train_benchmarks"]:
        required[name].append((config["train_split"], "train_split"))
    if config["model"]["build_tiny"]:
        tiny = config["tiny_model"]
        for key in ("bootstrap_split", "validation_split"):
            required[tiny["bootstrap_benchmark"]].append((tiny[key], f"tiny_model.{key}"))
    check_splits(config["benchmarks"], required)
    if config["eval_split"] == config["train_split"]:
        raise SnakeskillsError(
            f"config keys eval_split and train_split are both {config['eval_split']!r}: the evaluation would "
            "measure the problems the model was trained on; give a held-out split"
        )


def _check_student_backend(config: dict) -> None:
    generation, sft = config["generation"], config["sft"]
    if not backend_spec(generation).supports_adapters:
        raise SnakeskillsError(
            f"config key generation.backend is {generation['backend']!r}, which samples whatever model its server "
            "serves, not the tuned rounds; use hf or vllm for the model being tuned (openai serves the LLM judge, "
            "judge.llm, and the teacher, teacher.generation)"
        )
    lora_rank = sft["lora"]["r"] if sft["method"] == "lora" and "lora" in sft else 0
    if generation["backend"] == "vllm" and lora_rank > generation["vllm"]["max_lora_rank"]:
        raise SnakeskillsError(
            f"config key sft.lora.r is {lora_rank} but generation.vllm.max_lora_rank is "
            f"{generation['vllm']['max_lora_rank']}: vLLM could not load the tuned adapters; raise max_lora_rank"
        )


def check_batch_divides(batch_size: int, processes: int, accumulation: int, section: str) -> None:
    """``{section}.batch_size`` must split evenly over processes x gradient accumulation steps."""
    if batch_size % (processes * accumulation):
        by_processes = f"the {processes} training processes (sft.processes / sft.gpus) x " if processes > 1 else ""
        raise SnakeskillsError(
            f"config key {section}.batch_size ({batch_size}) must be a multiple of {by_processes}{accumulation} "
            f"{section}.gradient_accumulation_steps: each forward pass takes an equal share"
        )


def _check_sft(config: dict, gpus_available: bool) -> None:
    sft = config["sft"]
    if sft["method"] == "lora" and "lora" not in sft:
        raise SnakeskillsError("config key sft.lora (r, alpha) is required when sft.method is lora")
    if sft["method"] == "full" and sft["merge"]:
        raise SnakeskillsError(
            "config key sft.merge applies to sft.method lora (base + adapter merged); sft.method full already "
            "writes each round's full checkpoint (models/round{r}/checkpoint)"
        )
    gpus = training_gpus(config, gpus_available)
    processes = training_processes(config, gpus_available)
    if gpus > 0 and processes != gpus:
        gpus_origin = (
            "sft.gpus"
            if sft["gpus"] is not None
            else f"sft.gpus is null: one GPU where the run may use GPUs, generation.device is "
            f"{config['generation']['device']!r}"
        )
        raise SnakeskillsError(
            f"config key sft.processes is {processes} but the sft job has {gpus} GPU(s) ({gpus_origin}): training "
            "runs one process per GPU; set sft.processes to null or to sft.gpus"
            + (
                ""
                if sft["gpus"] is not None
                else "; to train with several CPU processes, set generation.device: cpu (hf backend)"
            )
        )
    training = sft["training"]
    check_batch_divides(training["batch_size"], processes, training["gradient_accumulation_steps"], "sft.training")
    if config["model"]["build_tiny"]:
        tiny = config["tiny_model"]["training"]
        check_batch_divides(tiny["batch_size"], 1, tiny["gradient_accumulation_steps"], "tiny_model.training")
    if sft["distributed"] == "fsdp" and gpus < 2:
        raise SnakeskillsError(
            "config key sft.distributed is 'fsdp', which shards the model across GPUs, but the sft job has "
            f"{gpus} GPU(s); set sft.gpus to 2 or more, or use ddp"
        )
    score = sft["filters"]["score"]
    if score != "symbolic_correct" and config["judge"]["llm"] is None:
        raise SnakeskillsError(
            f"config key sft.filters.score is {score!r}, which needs the LLM judge's verdicts, but judge.llm "
            "is not set; set judge.llm or use sft.filters.score: symbolic_correct"
        )
    code_benchmarks = [name for name in config["train_benchmarks"] if is_code_benchmark(config, name)]
    if score != "symbolic_correct" and code_benchmarks:
        raise SnakeskillsError(
            f"config key sft.filters.score is {score!r}, but train benchmark {code_benchmarks[0]!r} is a code "
            "benchmark, whose answers the LLM judge does not read (its tests decide); use sft.filters.score: "
            "symbolic_correct"
        )


def check_model_paths(config: dict) -> None:
    """Local model folders must exist before anything is scheduled (no hub downloads at run time)."""
    paths = {}
    if not config["model"]["build_tiny"]:
        paths["model.path"] = config["model"]["path"]
    served_sections = [("judge.llm", config["judge"]["llm"]), ("teacher", config["teacher"])]
    synthesis = config["synthesis"]
    if synthesis is not None and synthesis["writer"] == "own":
        served_sections.append(("synthesis", synthesis))
    for key, served in served_sections:
        if served is not None and backend_spec(served["generation"]).needs_local_model:
            paths[f"{key}.model.path"] = served["model"]["path"]
    for key, path in paths.items():
        if not path or not Path(path).is_dir():
            raise SnakeskillsError(
                f"config key {key}: {path!r} is not a folder; give a local Hugging Face checkpoint folder "
                "(download it first, e.g. `hf download <repo> --local-dir <folder>`)"
            )
        problem = checkpoint_folder_problem(Path(path))
        if problem:
            raise SnakeskillsError(f"config key {key}: {path!r} {problem}")


# the files a tokenizer loads from: a fast tokenizer's tokenizer.json, a SentencePiece model, or a slow BPE or
# WordPiece vocabulary; custom tokenizer code (tokenization_*.py, trust_remote_code) loads its own files
_SENTENCEPIECE_FILES = ("tokenizer.model", "spiece.model", "sentencepiece.bpe.model")
_VOCABULARY_FILES = (("vocab.json", "merges.txt"), ("vocab.txt",), ("tokenizer.tiktoken",))


def checkpoint_folder_problem(folder: Path) -> str | None:
    """What keeps a local checkpoint folder from loading (its ``config.json`` or a tokenizer missing), as the
    rest of a sentence after the folder's name; ``None`` when it has both. Checked from file names alone, so the
    plan stays fast and a model's first job does not fail on transformers' tokenizer error."""
    names = {path.name for path in folder.iterdir()}
    if "config.json" not in names:
        return "has no config.json: it is not a Hugging Face checkpoint folder (save it with save_pretrained)"
    if "tokenizer.json" in names or any(name.startswith("tokenization_") for name in names):
        return None
    if any(all(name in names for name in group) for group in _VOCABULARY_FILES):
        return None
    sentencepiece = [name for name in _SENTENCEPIECE_FILES if name in names]
    if sentencepiece:
        if importlib.util.find_spec("sentencepiece") is None:
            return (
                f"has only the SentencePiece tokenizer {sentencepiece[0]}, which needs the sentencepiece package: "
                "`pip install sentencepiece`, or save the tokenizer with tokenizer.json "
                "(AutoTokenizer.from_pretrained(...).save_pretrained(folder) where sentencepiece is installed)"
            )
        return None
    return (
        "has no tokenizer files (tokenizer.json, tokenizer.model, or vocab.json with merges.txt); save the "
        "tokenizer into it (AutoTokenizer.from_pretrained(<its source>).save_pretrained(folder))"
    )


def check_results_dir(path: Path) -> None:
    """The results folder must be creatable and writable before any job runs (nothing half-written)."""
    existing = path
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        raise SnakeskillsError(f"config key results_dir: cannot create {str(path)!r}: {str(existing)!r} is a file")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise SnakeskillsError(
            f"config key results_dir: {str(existing)!r} is not writable, so {str(path)!r} cannot be created"
        )


# ---------------------------------------------------------------- GPUs


def training_gpus(config: dict, gpus_available: bool) -> int:
    """GPUs of the sft job: sft.gpus, else one where the job's node has GPUs and the run is not set to CPU
    (hf generation on device cpu), else none."""
    sft, generation = config["sft"], config["generation"]
    if sft["gpus"] is not None:
        return sft["gpus"]
    if generation["backend"] == "hf" and generation["device"] == "cpu":
        return 0
    return 1 if gpus_available else 0


def check_devices(config: dict) -> None:
    """For a run whose jobs have no GPU (a local run on a machine without one): the first config key that names a
    GPU device (an hf section's ``device: cuda`` or ``cuda:N``, ``sft.gpus`` above 0) stops the plan, since every
    job it decides could only fail once it runs."""
    for key, section in generation_sections(config).items():
        if section["backend"] == "hf" and section["device"].startswith("cuda"):
            raise SnakeskillsError(
                f"config key {key}.device is {section['device']!r}, but this machine has no GPU and the run is "
                "local (no cluster executor, no sbatch): use auto or cpu, or run where there are GPUs"
            )
    if config["sft"]["gpus"]:
        raise SnakeskillsError(
            f"config key sft.gpus is {config['sft']['gpus']}, but this machine has no GPU and the run is local "
            "(no cluster executor, no sbatch): set it to null or 0, or run where there are GPUs"
        )


def training_processes(config: dict, gpus_available: bool) -> int:
    """Training processes of the sft job: sft.processes, else one per GPU it has (one on CPU)."""
    return config["sft"]["processes"] or max(training_gpus(config, gpus_available), 1)


# ---------------------------------------------------------------- layout


CHUNK = "{model}/{benchmark}/{split}/rs{seed}/chunk{chunk}-of-{num_chunks}.jsonl"

# the splits of round r's synthesis: the writer's sources, the new problems the solver answers, the labelled split
_SYNTHESIS_SPLIT = re.compile(r"^synth-round(\d+)(-sources|-problems|)$")


def synthesis_split(round_number: int, part: str = "") -> str:
    """The name of a synthesis split of round ``round_number``: part "sources", "problems" or "" (labelled)."""
    return f"synth-round{round_number}" + (f"-{part}" if part else "")


def synthesis_split_part(split: str) -> str | None:
    """ "sources", "problems" or "" (the labelled split) for a synthesis split's name, ``None`` for any other."""
    match = _SYNTHESIS_SPLIT.match(split)
    return match.group(2).lstrip("-") if match else None


@dataclass(frozen=True)
class Layout:
    """Every file the workflow writes, as a pattern of wildcards; ``under(results)`` puts them in one results
    folder (the defaults here are relative to it)."""

    prepared: str = "data/{benchmark}/{split}.jsonl"
    # a full checkpoint: the built tiny base model or a round's full fine-tune (sft.method full)
    checkpoint: str = "models/{model}/checkpoint"
    adapter: str = "models/{model}/adapter"
    merged_model: str = "models/{model}/merged"
    generation_settings: str = "settings/generate/{model}/{benchmark}/{split}.json"
    llm_judge_settings: str = "settings/llm_judge.json"
    generated: str = f"generate/{CHUNK}"
    judged_chunk: str = f"judge/{CHUNK}"
    llm_judged_chunk: str = f"judge-llm/{CHUNK}"
    judged: str = "judge/{model}/{benchmark}/{split}/output-rs{seed}.jsonl"
    metrics: str = "metrics/{model}/{benchmark}/{split}/metrics.json"
    metrics_table: str = "metrics/{model}/{benchmark}/{split}/metrics.txt"
    sft_data: str = "sft/{model}/data.jsonl"
    sft_stats: str = "sft/{model}/stats.json"
    sft_alpaca: str = "sft/{model}/alpaca.json"
    sft_dataset_info: str = "sft/{model}/dataset_info.json"
    # problem synthesis, per round and train benchmark: the writer's sources, the parsed and filtered new problems,
    # the labelled split, and what was dropped and why
    synthesis_sources: str = "data/{benchmark}/synth-round{round}-sources.jsonl"
    synthesis_problems: str = "data/{benchmark}/synth-round{round}-problems.jsonl"
    # with synthesis.decontamination.llm_check: the problems the n-gram check kept, and the LLM judge's verdicts
    synthesis_candidates: str = "synthesis/round{round}/{benchmark}/candidates.jsonl"
    synthesis_llm_checked: str = "synthesis/round{round}/{benchmark}/llm-check.jsonl"
    synthesis_llm_check_stats: str = "synthesis/round{round}/{benchmark}/llm-check.json"
    contamination_check_settings: str = "settings/contamination_check.json"
    synthesized: str = "data/{benchmark}/synth-round{round}.jsonl"
    synthesis_dropped: str = "synthesis/round{round}/{benchmark}/dropped.jsonl"
    synthesis_filter_stats: str = "synthesis/round{round}/{benchmark}/filter.json"
    synthesis_judged: str = "synthesis/round{round}/{benchmark}/judged.jsonl"
    synthesis_label_stats: str = "synthesis/round{round}/{benchmark}/label.json"
    synthesis_funnel: str = "synthesis/funnel.json"
    synthesis_funnel_table: str = "synthesis/funnel.txt"
    summary: str = "eval/summary.json"
    summary_table: str = "eval/summary.txt"
    plot: str = "report/{plot}.png"

    @classmethod
    def under(cls, results: str | Path) -> Layout:
        return cls(**{field.name: str(Path(results) / field.default) for field in fields(cls)})


# ---------------------------------------------------------------- the plan


class Plan:
    """The decisions of one run, made from its validated and checked config."""

    def __init__(self, config: dict, layout: Layout):
        self.config = config
        self.layout = layout
        self.base_model = config["model"]["name"]
        self.tuned_models = [f"round{r}" for r in range(1, config["rounds"] + 1)]
        self.models = [self.base_model, *self.tuned_models]
        teacher = config["teacher"]
        self.teacher = teacher["name"] if teacher is not None else None
        self.evaluated_teacher = self.teacher if teacher is not None and teacher["evaluate"] else None
        synthesis = config["synthesis"]
        self.synthesis = synthesis
        self.writer = synthesis["name"] if synthesis is not None and synthesis["writer"] == "own" else None
        # models that are sampled but never trained, each from its own config section (model, generation, prompt)
        self.served_models = [name for name in (self.teacher, self.writer) if name is not None]
        # the models compared on the eval split, in table order: the student before and after each round, the teacher
        self.eval_models = self.models + ([self.evaluated_teacher] if self.evaluated_teacher else [])
        self.benchmarks = list(config["benchmarks"])
        self.sft_method = config["sft"]["method"]
        # what a round's SFT writes: an adapter on the base model (lora) or a full checkpoint (full)
        self.sft_output = layout.adapter if self.sft_method == "lora" else layout.checkpoint

    # ---- models and rounds

    def parent_model(self, model: str) -> str:
        """The model ``model`` was trained after: the base model for round1, else the previous round."""
        round_number = int(model.removeprefix("round"))
        return self.base_model if round_number == 1 else f"round{round_number - 1}"

    def sft_data_models(self, model: str) -> list[str]:
        """Models whose judged train generations feed ``model``'s SFT data (sft.rounds_data, teacher.later_rounds).

        replace: the previous round's only; accumulate: the base model's and every earlier round's. With a
        teacher, the teacher takes the base model's place: round1 learns from it, later rounds from it, the
        student's own rounds, or both (teacher.later_rounds).
        """
        student = self.models[: self.models.index(model)]
        if self.config["sft"]["rounds_data"] == "replace":
            student = student[-1:]
        if self.teacher is None:
            return student
        student = [name for name in student if name != self.base_model]
        later_rounds = self.config["teacher"]["later_rounds"]
        if not student or later_rounds == "teacher":
            return [self.teacher]
        return student if later_rounds == "student" else [self.teacher, *student]

    def train_sampled_models(self) -> list[str]:
        """Every model that samples the train split: those whose generations feed some round's SFT data, and those
        whose failures seed problem synthesis."""
        feeding = [source for model in self.tuned_models for source, _, _ in self.sft_judged_runs(model)]
        return list(dict.fromkeys([*feeding, *self.failure_feedback_models()]))

    def seeds(self, model: str, split: str) -> list[int]:
        """Random seeds a model samples a split with: train_num_seeds (teacher.train_num_seeds for the teacher)
        on the train split; synthesis.sources.new_per_problem on a writer's sources and synthesis.label.num_samples
        on new problems (and their labelled split, whose judged samples are the solver's); num_seeds on any other."""
        config = self.config
        part = synthesis_split_part(split)
        if part is not None:
            section, key = ("sources", "new_per_problem") if part == "sources" else ("label", "num_samples")
            return list(range(self.synthesis[section][key]))
        if split != config["train_split"]:
            return list(range(config["num_seeds"]))
        section = config["teacher"] if model == self.teacher else config
        return list(range(section["train_num_seeds"]))

    # ---- what a model generates with

    def base_model_folder(self) -> str:
        """The base checkpoint folder: the built tiny model or model.path."""
        if self.config["model"]["build_tiny"]:
            return self.layout.checkpoint.format(model=self.base_model)
        return self.config["model"]["path"]

    def base_model_inputs(self) -> list[str]:
        """Files Snakemake must produce before the base model can load (none for a local checkpoint)."""
        return [self.layout.checkpoint.format(model=self.base_model)] if self.config["model"]["build_tiny"] else []

    def tiny_model_prompt(self) -> dict:
        """The prompt the tiny model bootstraps with: the student's, with its bootstrap benchmark's question."""
        benchmark = self.config["tiny_model"]["bootstrap_benchmark"]
        return benchmark_prompt(self.config["prompt"], self.config["benchmarks"][benchmark])

    def sampling_section(self, model: str) -> dict:
        """The config section that says how ``model`` samples (model, prompt, generation): the teacher's own, an
        own synthesis writer's (solving with synthesis.label.prompt), or the student's (every other model)."""
        if model == self.teacher:
            return self.config["teacher"]
        if model == self.writer:
            synthesis = self.synthesis
            return {
                "model": synthesis["model"],
                "generation": synthesis["generation"],
                "prompt": synthesis["label"]["prompt"],
            }
        return self.config

    def job_generation(self, model: str, split: str) -> dict:
        """The generation section ``model``'s generate jobs on ``split`` run with: the model's own, with
        synthesis.sampling in place of its sampling where a teacher or student writer writes new problems (a
        synthesis sources split)."""
        generation = self.sampling_section(model)["generation"]
        if synthesis_split_part(split) == "sources" and self.synthesis["sampling"] is not None:
            return {**generation, "sampling": self.synthesis["sampling"]}
        return generation

    def generation_job(self, model: str, benchmark: str, split: str) -> dict:
        """What ``model``'s generate jobs on ``benchmark``'s ``split`` run with: model, generation
        (``job_generation``) and prompt sections. Writing new problems (a synthesis sources split) uses
        synthesis.prompt; answering, the model's prompt with the benchmark's question (``benchmark_prompt``)."""
        section = self.sampling_section(model)
        if synthesis_split_part(split) == "sources":
            prompt = self.synthesis["prompt"]
        else:
            prompt = benchmark_prompt(section["prompt"], self.config["benchmarks"][benchmark])
        return {"model": section["model"], "generation": self.job_generation(model, split), "prompt": prompt}

    def generation_model_path(self, model: str) -> str | None:
        """The checkpoint a model generates with: a full fine-tune's own (sft.method full), else the base model;
        a served model's own (teacher.model.path, synthesis.model.path; none for an openai server)."""
        if model in self.served_models:
            return self.sampling_section(model)["model"]["path"]
        if model != self.base_model and self.sft_method == "full":
            return self.layout.checkpoint.format(model=model)
        return self.base_model_folder()

    def generation_adapter_path(self, model: str) -> str | None:
        """The LoRA adapter a tuned round generates with (sft.method lora); none for the base model, the teacher,
        or full fine-tunes."""
        if model == self.base_model or model in self.served_models or self.sft_method == "full":
            return None
        return self.layout.adapter.format(model=model)

    def generation_model_inputs(self, model: str) -> list[str]:
        """The files a model's generation loads: base model, base + adapter (lora) or the round's checkpoint
        (full); none for a served model (a local folder or a server)."""
        if model in self.served_models:
            return []
        if model != self.base_model and self.sft_method == "full":
            return [self.layout.checkpoint.format(model=model)]
        adapter = self.generation_adapter_path(model)
        return self.base_model_inputs() + ([] if adapter is None else [adapter])

    def sft_init(self, model: str) -> list[str]:
        """What ``model``'s training continues from (sft.init continue, from round 2 on): the previous round's
        adapter (lora) or checkpoint (full); none otherwise (training starts from the base model)."""
        if self.config["sft"]["init"] == "base" or self.parent_model(model) == self.base_model:
            return []
        return [self.sft_output.format(model=self.parent_model(model))]

    def sft_training_config(self, gpus_available: bool) -> dict:
        """The sft settings that decide how a round is trained (data choice and filters act through its input).

        The processes count too: each process draws its own share of every batch, so the weights differ."""
        sft = self.config["sft"]
        keys = ("method", "seed", "lora", "training") if self.sft_method == "lora" else ("method", "seed", "training")
        return {
            **{key: sft[key] for key in keys},
            "processes": training_processes(self.config, gpus_available),
            "distributed": sft["distributed"],
        }

    # ---- jobs: GPUs and envs

    def generation_gpus(self, model: str, split: str, gpus_available: bool) -> int:
        """GPUs of one of ``model``'s generate jobs (its backend's; none for a teacher behind an openai server)."""
        generation = self.job_generation(model, split)
        return backend_spec(generation).job_gpus(generation, gpus_available)

    def generation_env(self, model: str, split: str) -> str:
        """The conda env of ``model``'s generate jobs: its backend's (the teacher's may differ from the student's)."""
        return backend_spec(self.job_generation(model, split)).conda_env

    def llm_judge_generation(self) -> dict:
        """The LLM judge's generation section (judge.llm.generation); the student's when there is no LLM judge
        (its rule then plans no job, but still names an env)."""
        llm = self.config["judge"]["llm"]
        return llm["generation"] if llm is not None else self.config["generation"]

    def llm_judge_gpus(self, gpus_available: bool) -> int:
        generation = self.llm_judge_generation()
        return backend_spec(generation).job_gpus(generation, gpus_available)

    def llm_judge_env(self) -> str:
        return backend_spec(self.llm_judge_generation()).conda_env

    # ---- which files each step reads

    def sft_judged_runs(self, model: str) -> list[tuple[str, str, int]]:
        """(model, benchmark, seed) of every judged train-split seed file ``model``'s SFT data is made from (none
        with synthesis.sft_data only)."""
        if self.synthesis is not None and self.synthesis["sft_data"] == "only":
            return []
        split = self.config["train_split"]
        return [
            (source, benchmark, seed)
            for source in self.sft_data_models(model)
            for benchmark in self.config["train_benchmarks"]
            for seed in self.seeds(source, split)
        ]

    def sft_synthesis_rounds(self, model: str) -> list[int]:
        """The rounds whose synthesized problems feed ``model``'s SFT: its own (sft.rounds_data replace), or every
        round up to it (accumulate); none without synthesis."""
        if self.synthesis is None:
            return []
        round_number = int(model.removeprefix("round"))
        return [round_number] if self.config["sft"]["rounds_data"] == "replace" else list(range(1, round_number + 1))

    def sft_judged_sources(self, model: str) -> list[tuple[str, str, str]]:
        """(source, benchmark, judged file) of everything ``model``'s SFT data is filtered from: each train-split
        seed file with the model that wrote it, and the solver's samples of each synthesized split, as
        "synthesized"."""
        split = self.config["train_split"]
        sources = [
            (source, benchmark, self.layout.judged.format(model=source, benchmark=benchmark, split=split, seed=seed))
            for source, benchmark, seed in self.sft_judged_runs(model)
        ]
        sources += [
            ("synthesized", benchmark, self.layout.synthesis_judged.format(round=round_number, benchmark=benchmark))
            for round_number in self.sft_synthesis_rounds(model)
            for benchmark in self.config["train_benchmarks"]
        ]
        return sources

    def sft_judged_files(self, model: str) -> list[str]:
        return [path for _, _, path in self.sft_judged_sources(model)]

    def sft_prompts(self, model: str) -> list[dict]:
        """The prompt section of each of ``model``'s SFT sources (``sft_judged_sources``): the student's, with the
        source benchmark's question, so that an example is what the student is asked on that benchmark."""
        return [
            benchmark_prompt(self.config["prompt"], self.config["benchmarks"][benchmark])
            for _, benchmark, _ in self.sft_judged_sources(model)
        ]

    # ---- problem synthesis

    def synthesis_writer(self, round_number: int) -> str:
        """Who writes round ``round_number``'s new problems: the own writer, the teacher, or the student before the
        round (synthesis.writer)."""
        writer = self.synthesis["writer"]
        if writer == "own":
            return self.writer
        return self.teacher if writer == "teacher" else self.parent_model(f"round{round_number}")

    def synthesis_solver(self, round_number: int) -> str:
        """Who answers round ``round_number``'s new problems (synthesis.label.solver)."""
        solver = self.synthesis["label"]["solver"]
        if solver == "writer":
            return self.synthesis_writer(round_number)
        return self.teacher if solver == "teacher" else self.parent_model(f"round{round_number}")

    def synthesis_funnel_tables(self) -> list[str]:
        """The funnel table the comparison text ends with (none without synthesis)."""
        return [self.layout.synthesis_funnel_table] if self.synthesis else []

    def synthesis_exact_answer(self, benchmark: str) -> str | None:
        """How a benchmark checks a synthesized problem's label itself: "arithmetic" for the synthetic skill (a
        parsed a+b has an exact answer), else ``None``."""
        return "arithmetic" if self.config["benchmarks"][benchmark]["source"] == "synthetic" else None

    def synthesis_runs(self) -> list[tuple[int, str]]:
        """(round, train benchmark) of every synthesis, in funnel order."""
        return [(r, b) for r in self.synthesis_rounds() for b in self.config["train_benchmarks"]]

    def synthesis_rounds(self) -> list[int]:
        return [] if self.synthesis is None else list(range(1, self.config["rounds"] + 1))

    def failure_feedback_models(self) -> list[str]:
        """Models whose judged train samples choose synthesis sources (synthesis.sources.problems failed): the
        model before each round."""
        if self.synthesis is None or self.synthesis["sources"]["problems"] != "failed":
            return []
        return [self.parent_model(f"round{round_number}") for round_number in self.synthesis_rounds()]

    def synthesis_feedback_files(self, round_number: int, benchmark: str) -> list[str]:
        """The judged train samples that decide which problems round ``round_number``'s writer starts from: the
        previous model's (none for synthesis.sources.problems all)."""
        if self.synthesis["sources"]["problems"] != "failed":
            return []
        model, split = self.parent_model(f"round{round_number}"), self.config["train_split"]
        return [
            self.layout.judged.format(model=model, benchmark=benchmark, split=split, seed=seed)
            for seed in self.seeds(model, split)
        ]

    def generated_files(self, model: str, benchmark: str, split: str) -> list[str]:
        """Every generated chunk file of ``model`` on ``split`` (all seeds and chunks)."""
        num_chunks = self.config["num_chunks"]
        return [
            self.layout.generated.format(
                model=model, benchmark=benchmark, split=split, seed=seed, chunk=chunk, num_chunks=num_chunks
            )
            for seed in self.seeds(model, split)
            for chunk in range(num_chunks)
        ]

    def synthesis_writer_files(self, round_number: int, benchmark: str) -> list[str]:
        split = synthesis_split(round_number, "sources")
        return self.generated_files(self.synthesis_writer(round_number), benchmark, split)

    def synthesis_solver_files(self, round_number: int, benchmark: str) -> list[str]:
        split = synthesis_split(round_number, "problems")
        return self.generated_files(self.synthesis_solver(round_number), benchmark, split)

    def synthesis_reference_files(self) -> dict[str, list[str]]:
        """The prepared splits new problems are checked against: every train benchmark's train split (copies) and
        every benchmark's eval split (contamination)."""
        config = self.config
        return {
            "train": [
                self.layout.prepared.format(benchmark=benchmark, split=config["train_split"])
                for benchmark in config["train_benchmarks"]
            ],
            "eval": [
                self.layout.prepared.format(benchmark=benchmark, split=config["eval_split"])
                for benchmark in self.benchmarks
            ],
        }

    def synthesis_llm_check(self) -> bool:
        """Whether a model checks the new problems against their most similar eval problems."""
        return self.synthesis is not None and self.synthesis["decontamination"]["llm_check"] is not None

    def contamination_checker(self) -> dict | None:
        """The model and generation section (judge.llm's or the teacher's) of the LLM contamination check."""
        if not self.synthesis_llm_check():
            return None
        checker = self.synthesis["decontamination"]["llm_check"]
        section = self.config["judge"]["llm"] if checker == "judge" else self.config["teacher"]
        return {"model": section["model"], "generation": section["generation"]}

    def contamination_check_gpus(self, gpus_available: bool) -> int:
        generation = self.contamination_checker()["generation"]
        return backend_spec(generation).job_gpus(generation, gpus_available)

    def contamination_check_env(self) -> str:
        checker = self.contamination_checker()
        return backend_spec(checker["generation"] if checker else self.config["generation"]).conda_env

    def synthesis_filtered(self) -> str:
        """What the parse, filter and n-gram step writes: the problems the solver answers, or, with the LLM check,
        the candidates that check reads."""
        return self.layout.synthesis_candidates if self.synthesis_llm_check() else self.layout.synthesis_problems

    def synthesis_stats_files(self) -> dict[str, list[str]]:
        """The filter (and LLM check) and label counts of every round and train benchmark, and each round's SFT
        stats: the funnel."""
        runs = self.synthesis_runs()
        llm_checked = runs if self.synthesis_llm_check() else []
        return {
            "filter": [self.layout.synthesis_filter_stats.format(round=r, benchmark=b) for r, b in runs],
            "llm_check": [self.layout.synthesis_llm_check_stats.format(round=r, benchmark=b) for r, b in llm_checked],
            "label": [self.layout.synthesis_label_stats.format(round=r, benchmark=b) for r, b in runs],
            "sft": [self.layout.sft_stats.format(model=f"round{r}") for r in self.synthesis_rounds()],
        }

    def eval_runs(self) -> list[tuple[str, str]]:
        """(model, benchmark) pairs compared on the eval split, in table order."""
        return [(model, benchmark) for model in self.eval_models for benchmark in self.benchmarks]

    def eval_judged_runs(self) -> list[tuple[str, str, int]]:
        """(model, benchmark, seed) of every judged seed file on the eval split, in plot order."""
        split = self.config["eval_split"]
        return [(model, benchmark, seed) for model, benchmark in self.eval_runs() for seed in self.seeds(model, split)]

    def eval_metrics_files(self) -> list[str]:
        split = self.config["eval_split"]
        return [self.layout.metrics.format(model=m, benchmark=b, split=split) for m, b in self.eval_runs()]

    def eval_judged_files(self) -> list[str]:
        split = self.config["eval_split"]
        return [
            self.layout.judged.format(model=m, benchmark=b, split=split, seed=seed)
            for m, b, seed in self.eval_judged_runs()
        ]

    def targets(self, summary_files: list[str], plot_files: list[str]) -> list[str]:
        """What a plain ``snakemake`` builds: the comparison, the train metrics, the plots, the tuned models
        (adapters or checkpoints: a rerun always leaves them in place) and merged models (sft.merge)."""
        config = self.config
        train_metrics = [
            self.layout.metrics.format(model=model, benchmark=benchmark, split=config["train_split"])
            for model in self.train_sampled_models()
            for benchmark in config["train_benchmarks"]
        ]
        tuned = [self.sft_output.format(model=model) for model in self.tuned_models]
        merged = (
            [self.layout.merged_model.format(model=model) for model in self.tuned_models]
            if self.sft_method == "lora" and config["sft"]["merge"]
            else []
        )
        funnel = [self.layout.synthesis_funnel, self.layout.synthesis_funnel_table] if self.synthesis else []
        return [*summary_files, *train_metrics, *plot_files, *tuned, *merged, *funnel]
