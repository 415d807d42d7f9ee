"""What the config's sections mean for one benchmark or model: the prompt a benchmark is asked with, the judge
settings its answers are judged with, and every generation section in use."""

from __future__ import annotations

from snakeskills.judging.extractors import MULTICHOICE
from snakeskills.plan.validation import evaluated_steps


def required_splits(config: dict) -> dict[str, list[tuple[str, str]]]:
    """The splits the run prepares, by benchmark, each with the config key that asks for it: every benchmark's
    eval split, the train benchmarks' train split, the tiny model's bootstrap and validation splits."""
    required = {name: [(config["eval_split"], "eval_split")] for name in config["benchmarks"]}
    for name in config["train_benchmarks"]:
        required[name].append((config["train_split"], "train_split"))
    if config["model"]["build_tiny"]:
        tiny = config["tiny_model"]
        for key in ("bootstrap_split", "validation_split"):
            required[tiny["bootstrap_benchmark"]].append((tiny[key], f"tiny_model.{key}"))
    if any(evaluated_steps(config, method) for method in config["methods"]) and config["validation_split"]:
        for name in config["benchmarks"]:  # each round's checkpoints are evaluated on every benchmark
            required[name].append((config["validation_split"], "validation_split"))
    return required


ASKED_PROMPT_KEYS = ("template", "system", "user", "num_few_shot")
JUDGE_RULE_KEYS = ("extraction", "regex", "equivalence", "timeout_seconds", "memory_limit_mb", "sandbox")


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
    if settings["extraction"] in MULTICHOICE:
        return {"extraction": settings["extraction"], "regex": settings["regex"]}
    if settings["extraction"] == "code":
        return {key: settings[key] for key in ("extraction", "timeout_seconds", "memory_limit_mb", "sandbox")}
    return {key: value for key, value in settings.items() if key != "sandbox"}


def is_code_benchmark(config: dict, benchmark: str) -> bool:
    """Whether a benchmark's answers are programs judged by their tests (benchmarks.<name>.code)."""
    return config["benchmarks"][benchmark]["code"] is not None


def llm_judged(config: dict, benchmark: str) -> bool:
    """Whether the LLM judge (judge.llm) reads a benchmark's answers: every benchmark's but a code benchmark's,
    whose tests decide."""
    return config["judge"]["llm"] is not None and not is_code_benchmark(config, benchmark)


def benchmark_metrics(config: dict, benchmark: str) -> dict[str, dict]:
    """The named metrics summarize computes for one benchmark: ``metrics``' and the benchmark's own (the same name
    replaces one of ``metrics``; null drops it), each as ``{function, options, key}``: the function's name, its
    keyword arguments (the spec's other keys) and the config key it is set at (for messages)."""
    own = config["benchmarks"][benchmark]["metrics"]
    chosen = {
        **{name: (spec, f"metrics.{name}") for name, spec in config["metrics"].items()},
        **{name: (spec, f"benchmarks.{benchmark}.metrics.{name}") for name, spec in own.items()},
    }
    return {
        name: {
            "function": spec["function"],
            "options": {key: value for key, value in spec.items() if key != "function"},
            "key": key,
        }
        for name, (spec, key) in chosen.items()
        if spec is not None
    }
