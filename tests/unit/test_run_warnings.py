"""Warnings where a run is weak: too little training data or too few optimizer steps (the cause named: the data, or
the user's own max_steps), truncated or unanswered samples; each advice followed removes its warning, and every
config key a warning names is in the schema. Also: a job stopped by Ctrl-C."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
import yaml
from conftest import resolved_prompt, rule_judge

from snakeskills.io import write_json, write_jsonl
from snakeskills.judging.extraction_routes import credited_counts, routes_summary
from snakeskills.judging.judge import judge_records
from snakeskills.plan.config import SCHEMA, default_config, prepare_config
from snakeskills.plan.reference import resolve_node
from snakeskills.plan.sections import benchmark_judge
from snakeskills.results.method_comparison import training_cost
from snakeskills.results.method_wording import MORE_DATA, RECORDS_MEANING
from snakeskills.results.run_warnings import (
    format_warnings,
    metrics_fallback_warnings,
    metrics_warnings,
    planned_steps,
    sft_warnings,
    trained_steps,
    training_data_fallback_warnings,
    training_warnings,
)
from snakeskills.results.summarize import summarize_benchmark
from snakeskills.training.kto_samples import select_kto_samples
from snakeskills.training.methods import TRAINING_METHODS
from snakeskills.training.preference_pairs import select_pairs
from snakeskills.training.samples import group_problems, pass_rate_counts
from snakeskills.training.sft_data import select_sft_records
from snakeskills.training.tiny_bootstrap import bootstrap_miss

THRESHOLDS = default_config()["warnings"]
PROMPT = resolved_prompt(user="{problem}=")
SFT_FILTERS = default_config()["sft"]["filters"]


def config_with_every_method(**sections) -> dict:
    """The embedded default config training by every method, each section validated (the schema's defaults filled);
    ``sections`` replace keys of a method's section, e.g. ``grpo={"training": {...}}``."""
    config = default_config()
    config["methods"] = list(TRAINING_METHODS)
    training = {"num_epochs": 1, "learning_rate": 1.0e-3, "batch_size": 8, "max_length": 64}
    config["dpo"] = {"training": dict(training)}
    config["kto"] = {"training": dict(training)}
    config["grpo"] = {"training": {"num_epochs": 1, "learning_rate": 1.0e-3, "batch_size": 8}}
    for method, keys in sections.items():
        config[method].update({**keys, "training": {**config[method]["training"], **keys.get("training", {})}})
    prepare_config(config)
    return config


def test_defaults_are_in_the_schema():
    assert THRESHOLDS == {
        "min_sft_examples": 32,
        "min_sft_problems": 8,
        "min_optimizer_steps": 10,
        "max_truncated_share": 25,
        "max_no_answer_share": 25,
        "max_fallback_share": 10,
    }


def test_the_steps_are_those_trl_took():
    """What TRL's trainers took on config/examples/tiny-arithmetic-sft-dpo-kto-grpo.yaml (training_metrics.json's
    global_step): sft 2617 examples x 10 epochs / 32 -> 820; dpo 5265 pairs x 2 / 32 -> 330; kto 7821 samples x 2 /
    32 -> 490; grpo 2555 problems x 4 completions x 2 / 64 -> 318 (whole batches: 159 a pass, not 160)."""

    def section(epochs, batch, **more):
        return {"training": {"num_epochs": epochs, "batch_size": batch, "max_steps": None}, **more}

    assert planned_steps("sft", 2617, section(10, 32)) == 820
    assert planned_steps("dpo", 5265, section(2, 32)) == 330
    assert planned_steps("kto", 7821, section(2, 32)) == 490
    assert planned_steps("grpo", 2555, section(2, 64, num_generations=4)) == 318
    assert planned_steps("sft", 11, section(2.5, 4)) == 8
    capped = section(2, 64, num_generations=4)
    capped["training"]["max_steps"] = 2  # the trainer then takes max_steps, whatever num_epochs says
    assert trained_steps("grpo", 2555, capped) == 2 and trained_steps("grpo", 2, {**capped}) == 2


# ---------------------------------------------------------------- the rounds' data: more seeds, a wider pass rate


def judged_seeds(tmp_path, seeds: int, problems: int = 40) -> list:
    """The previous model's judged samples of ``problems`` train problems, ``seeds`` seed files: problem i is solved
    by the seeds below i % 4 (pass rates 0, 1/4, 1/2, 3/4 with four seeds), each text its own."""
    paths = []
    for seed in range(seeds):
        rows = []
        for index in range(problems):
            correct = seed < index % 4
            answer = str(index) if correct else str(index + seed + 1)
            rows.append(
                {
                    "id": f"p{index}",
                    "problem": f"{index}+0",
                    "expected_answer": str(index),
                    "generation": f"seed {seed} says \\boxed{{{answer}}}",
                    "predicted_answer": answer,
                    "symbolic_correct": correct,
                    "finish_reason": "stop",
                    "num_generated_tokens": 8,
                    "random_seed": seed,
                }
            )
        paths.append(tmp_path / f"seeds{seeds}-output-rs{seed}.jsonl")
        write_jsonl(paths[-1], rows)
    return paths


def trained_cost(tmp_path, method: str, stats: dict, section: dict) -> dict:
    """The cost the comparison reads for a round trained on the data ``stats`` counts: the stats.json its data rule
    writes and the training_metrics.json of a trainer taking the steps ``trained_steps`` says (the steps TRL took:
    ``test_the_steps_are_those_trl_took``)."""
    entry = TRAINING_METHODS[method]
    records = stats[entry.records.stat] if entry.records else stats[entry.problems_stat]
    folder = tmp_path / f"{method}-{len(list(tmp_path.iterdir()))}"
    write_json(folder / "stats.json", stats)
    steps = trained_steps(method, records, section)
    write_json(folder / "training_metrics.json", {"global_step": steps, "train_runtime": 1.0, "log_history": []})
    return training_cost(method, 1, folder, folder / "stats.json")


def advised(pattern: str, line: str) -> int:
    """The number a warning's advice gives (``pattern``'s group)."""
    match = re.search(pattern, line)
    assert match, (pattern, line)
    return int(match.group(1))


def test_sft_with_few_examples_advises_more_seeds_and_more_seeds_remove_the_warning(tmp_path):
    training = {"num_epochs": 1, "batch_size": 2}

    def warnings(seeds):
        paths = judged_seeds(tmp_path, seeds)
        _, stats = select_sft_records(paths, ["base"] * seeds, [PROMPT] * seeds, SFT_FILTERS)
        return sft_warnings("sft-round1", stats, training, THRESHOLDS)

    (line,) = warnings(1)
    assert line.startswith("warning: sft-round1 trains on 30 SFT examples of 30 problems (40 samples judged) in 15 ")
    assert "too few SFT examples (warnings.min_sft_examples 32): sample more seeds per train problem" in line
    assert "(train_num_seeds" in line and "few optimizer steps" not in line
    assert warnings(4) == [], "train_num_seeds 4: 60 examples of 30 problems"


def test_sft_with_few_steps_advises_epochs_and_the_advised_epochs_remove_the_warning():
    stats = {"kept": 40, "problems_covered": 20, "judged": 80}
    training = {"num_epochs": 1, "batch_size": 16}
    (line,) = sft_warnings("sft-round1", stats, training, THRESHOLDS)
    assert line.endswith(
        "in 3 optimizer steps: too few optimizer steps (warnings.min_optimizer_steps 10): num_epochs 1 over the 40 "
        "SFT examples, in batches of 16 (sft.training.batch_size), make 3: raise sft.training.num_epochs to 4"
    )
    epochs = advised(r"raise sft\.training\.num_epochs to (\d+)", line)
    assert sft_warnings("sft-round1", stats, {**training, "num_epochs": epochs}, THRESHOLDS) == []
    assert sft_warnings("sft-round1", stats, {**training, "num_epochs": 2.5}, THRESHOLDS) != [], "8 steps"


def test_dpo_with_few_pairs_advises_more_seeds_and_more_seeds_remove_the_warning(tmp_path):
    config = config_with_every_method()
    dpo = config["dpo"]

    def warnings(seeds):
        paths = judged_seeds(tmp_path, seeds)
        _, stats = select_pairs(paths, ["arithmetic"] * seeds, [PROMPT] * seeds, dpo["pairs"], dpo["pass_rate"])
        return training_warnings("dpo-round1", trained_cost(tmp_path, "dpo", stats, dpo), dpo, THRESHOLDS)

    (line,) = warnings(2)
    # two seeds: the problems solved by one of them (i % 4 = 1) give a pair each
    assert line.startswith("warning: dpo-round1 trains on 10 DPO pairs of 10 problems in 2 optimizer steps: too few")
    assert "too few DPO pairs (warnings.min_sft_examples 32): a pair needs a problem with both" in line
    assert "sample more seeds per train problem (train_num_seeds)" in line
    assert warnings(4) == [], "train_num_seeds 4: 100 pairs of 30 problems, 13 steps"


@pytest.mark.parametrize("method", ["kto", "grpo"])
def test_a_narrow_pass_rate_advises_widening_it_and_the_wider_range_removes_the_warning(tmp_path, method):
    paths = judged_seeds(tmp_path, 4, problems=20)
    benchmarks, prompts = ["arithmetic"] * 4, [PROMPT] * 4

    def warnings(pass_rate):
        keys = {"pass_rate": pass_rate, "training": {"batch_size": 4}}
        section = config_with_every_method(**{method: keys})[method]
        if method == "kto":
            _, stats = select_kto_samples(paths, benchmarks, prompts, section["samples"], pass_rate)
        else:  # what rl_problems.write_rl_problems counts
            stats = pass_rate_counts(group_problems(paths, benchmarks, prompts, "symbolic_correct"), pass_rate)
        cost = trained_cost(tmp_path, method, stats, section)
        return training_warnings(f"{method}-round1", cost, section, THRESHOLDS)

    (line,) = warnings({"min": 0.7, "max": 0.9})  # only the 5 problems solved 3 times in 4
    assert "problems (warnings.min_sft_problems 8): " in line and f"widen {method}.pass_rate" in line
    assert warnings({"min": 0.1, "max": 0.9}) == [], "15 problems"


# ---------------------------------------------------------------- optimizer steps: max_steps, or the data


def test_grpo_stopped_by_max_steps_names_the_key_and_raising_or_removing_it_removes_the_warning(tmp_path):
    """Issue 53: the user's own grpo.training.max_steps 2 ended GRPO after 2 steps; the warning said "too few
    optimizer steps" and advised more seeds or a wider pass-rate range, which change nothing."""
    paths = judged_seeds(tmp_path, 4)
    stats = pass_rate_counts(
        group_problems(paths, ["arithmetic"] * 4, [PROMPT] * 4, "symbolic_correct"), {"min": 0.1, "max": 0.9}
    )

    def warnings(max_steps):
        grpo = config_with_every_method(
            grpo={"training": {"num_epochs": 1, "learning_rate": 1e-3, "batch_size": 8, "max_steps": max_steps}}
        )["grpo"]
        return training_warnings("grpo-round1", trained_cost(tmp_path, "grpo", stats, grpo), grpo, THRESHOLDS)

    (line,) = warnings(2)
    assert line == (
        "warning: grpo-round1 trains on 30 problems in 2 optimizer steps: too few optimizer steps "
        "(warnings.min_optimizer_steps 10): grpo.training.max_steps 2 ended the training (num_epochs 1 over the 30 "
        "problems would make 15): raise it to 10, or set it to null"
    )
    assert "seeds" not in line and "pass_rate" not in line, "more data changes nothing here"
    assert warnings(advised(r"max_steps \d+ ended the training .*: raise it to (\d+)", line)) == []
    assert warnings(None) == []


def test_max_steps_under_too_little_data_advises_raising_it_not_removing_it(tmp_path):
    stats = {"problems": 40, "problems_in_pass_rate": 9, "pass_rate": {"min": 0.1, "max": 0.9}}
    grpo = config_with_every_method(
        grpo={"training": {"num_epochs": 1, "learning_rate": 1e-3, "batch_size": 8, "max_steps": 3}}
    )["grpo"]
    (line,) = training_warnings("grpo-round1", trained_cost(tmp_path, "grpo", stats, grpo), grpo, THRESHOLDS)
    assert (
        "grpo.training.max_steps 3 ended the training (null would make only 4: num_epochs 1 over the 9 problems)"
        in line
    )
    assert line.endswith("raise it to 10") and "null" not in line.rsplit(":", 1)[1]
    grpo["training"]["max_steps"] = advised(r"raise it to (\d+)", line)
    assert training_warnings("grpo-round1", trained_cost(tmp_path, "grpo", stats, grpo), grpo, THRESHOLDS) == []


@pytest.mark.parametrize(
    ("method", "stats", "batch"),
    [
        ("dpo", {"problems_paired": 30, "pairs": 40, "problems": 40, "problems_in_pass_rate": 40}, 16),
        ("kto", {"problems_kept": 30, "samples": 40, "problems": 40, "problems_in_pass_rate": 40}, 16),
        ("grpo", {"problems_in_pass_rate": 30, "problems": 40}, 32),  # 30 x 4 completions: 3 whole batches a pass
        ("grpo", {"problems_in_pass_rate": 10, "problems": 40}, 64),  # 10 x 4: not one whole batch
    ],
)
def test_few_steps_from_the_data_advise_epochs_and_following_the_advice_removes_the_warning(
    tmp_path, method, stats, batch
):
    training = {"num_epochs": 1, "learning_rate": 1e-3, "batch_size": batch}
    section = config_with_every_method(**{method: {"training": training}})[method]
    (line,) = training_warnings(f"{method}-round1", trained_cost(tmp_path, method, stats, section), section, THRESHOLDS)
    assert f"({method}.training.batch_size)" in line and "max_steps" not in line
    lower = re.search(rf"lower {method}\.training\.batch_size to (\d+) and", line)
    if lower:
        section["training"]["batch_size"] = int(lower.group(1))
    section["training"]["num_epochs"] = advised(rf"raise {method}\.training\.num_epochs to (\d+)", line)
    assert (
        training_warnings(f"{method}-round1", trained_cost(tmp_path, method, stats, section), section, THRESHOLDS) == []
    )


# ---------------------------------------------------------------- samples: truncated, unanswered


def judged_eval_seeds(tmp_path, config: dict, texts: list[str], name: str) -> list:
    """Two seeds of a model that writes ``texts`` (one a problem, a token a character), cut at the config's
    generation.sampling.max_new_tokens and judged with its judge."""
    limit = config["generation"]["sampling"]["max_new_tokens"]
    judge = rule_judge(benchmark_judge(config, "arithmetic"))
    paths = []
    for seed in range(2):
        records = [
            {
                "id": f"p{index}",
                "problem": f"{index}+0",
                "expected_answer": str(index),
                "generation": text[:limit],
                "num_generated_tokens": min(len(text), limit),
                "finish_reason": "stop" if len(text) <= limit else "length",
                "random_seed": seed,
            }
            for index, text in enumerate(texts)
        ]
        paths.append(tmp_path / f"{name}-output-rs{seed}.jsonl")
        write_jsonl(paths[-1], judge_records(records, judge, num_workers=1))
    return paths


def eval_warnings(tmp_path, config, texts, name) -> list[str]:
    metrics = summarize_benchmark("arithmetic", judged_eval_seeds(tmp_path, config, texts, name))["arithmetic"]
    return metrics_warnings("sft-round1", "arithmetic", "test", metrics, THRESHOLDS)


def test_truncated_samples_advise_raising_max_new_tokens_and_raising_it_removes_the_warning(tmp_path):
    config = default_config()
    config["judge"]["equivalence"] = "exact"
    texts = ["some thought " * (index % 4) + f"\\boxed{{{index}}}" for index in range(20)]  # 10 to 49 characters
    config["generation"]["sampling"]["max_new_tokens"] = 24
    truncated, unanswered = eval_warnings(tmp_path, config, texts, "short")
    assert truncated.startswith("warning: sft-round1 on arithmetic (test): 50.0% of samples hit max_new_tokens")
    assert "raise generation.sampling.max_new_tokens" in truncated
    # cut before their answers: the unanswered samples' warning says that the truncated ones count there too
    assert "give no answer" in unanswered and "cut at generation.sampling.max_new_tokens (above)" in unanswered
    config["generation"]["sampling"]["max_new_tokens"] *= 4
    assert eval_warnings(tmp_path, config, texts, "long") == []


def test_unanswered_samples_advise_reading_the_models_form_and_doing_so_removes_the_warning(tmp_path):
    config = default_config()
    config["judge"]["equivalence"] = "exact"
    config["generation"]["sampling"]["max_new_tokens"] = 64
    texts = ["the sum is worth mentioning.\nResult: " + ("zero" if index == 0 else "many") for index in range(20)]
    (line,) = eval_warnings(tmp_path, config, texts, "boxed")
    assert line.startswith(
        "warning: sft-round1 on arithmetic (test): 100.0% of samples give no answer the judge can read"
    )
    assert "judge.extraction regex with a judge.regex matching its answer line" in line
    assert "(benchmarks.arithmetic.judge for this benchmark alone)" in line
    config["judge"].update(extraction="regex", regex=r"(?m)^Result: (\w+)$")  # the model's own answer line
    assert eval_warnings(tmp_path, config, texts, "regex") == []


def test_the_teachers_truncated_samples_name_its_own_key():
    metrics = {
        mode: {"symbolic_correct": 5.0, "truncated": 66.0} for mode in ("pass@1[avg-of-4]", "majority@4", "pass@4")
    }
    (line,) = metrics_warnings("teacher", "arithmetic", "test", metrics, THRESHOLDS, teacher=True)
    assert "raise teacher.generation.sampling.max_new_tokens" in line
    metrics = {mode: {"symbolic_correct": 5.0, "no_answer": 66.0} for mode in metrics}
    (line,) = metrics_warnings("teacher", "arithmetic", "test", metrics, THRESHOLDS, teacher=True)
    assert "(teacher.prompt.user, teacher.prompt.template)" in line


def test_the_comparison_section_lists_every_warning_or_nothing():
    assert format_warnings([]) == ""
    section = format_warnings(["warning: a", "warning: b"])
    assert section == "\nwarnings (2):\n  a\n  b\n"


# ---------------------------------------------------------------- every key a warning names is in the schema


def every_warning(tmp_path) -> list[str]:
    """A line of every kind of warning, each branch of its advice taken."""
    sft = {"kept": 3, "problems_covered": 2, "judged": 8}
    lines = sft_warnings("sft-round1", sft, {"num_epochs": 1, "batch_size": 8}, THRESHOLDS)
    few = {
        "problems": 40,
        "problems_in_pass_rate": 2,
        "problems_paired": 2,
        "pairs": 3,
        "problems_kept": 2,
        "samples": 3,
    }
    plenty = {**few, "problems_in_pass_rate": 40}
    grpo_cases = [  # (stats, training): the data; max_steps where null makes enough steps, and where it does not
        (few, {"batch_size": 16}),
        (plenty, {"batch_size": 8, "max_steps": 2}),
        (few, {"batch_size": 8, "max_steps": 1}),
    ]
    cases = [("dpo", few, {}), ("kto", few, {}), *(("grpo", stats, training) for stats, training in grpo_cases)]
    for method, stats, training in cases:
        training = {"num_epochs": 1, "learning_rate": 1e-3, "batch_size": 8, **training}
        section = config_with_every_method(**{method: {"training": training}})[method]
        lines += training_warnings(method, trained_cost(tmp_path, method, stats, section), section, THRESHOLDS)
    modes = ("pass@1[avg-of-4]", "majority@4", "pass@4")
    metrics = {mode: {"symbolic_correct": 5.0, "no_answer": 89.0, "truncated": 66.0} for mode in modes}
    lines += metrics_warnings("base", "arithmetic", "test", metrics, THRESHOLDS)
    lines += metrics_warnings("teacher", "arithmetic", "test", metrics, THRESHOLDS, teacher=True)
    bootstrap = {"reached_target": False, "final_validation_accuracy": 0.2, "global_step": 5, "num_examples": 64}
    lines.append(bootstrap_miss({**bootstrap, "stop_at_accuracy": 0.5}))
    routes = routes_summary(["regex fallback", "regex fallback", "answer phrase", "boxed"], [True, True, True, False])
    for own_judge in ({}, {"regex": "(\\d+)", "extraction": "multichoice"}):
        lines += metrics_fallback_warnings("base", "arithmetic", "test", routes, THRESHOLDS, own_judge)
    credited = credited_counts(["regex fallback", "option value", "boxed"])
    lines += training_data_fallback_warnings("dpo-round1", "dpo", credited, THRESHOLDS)
    return lines


DOTTED = re.compile(r"(?<![\w.])[a-z_][a-z0-9_]*(?:\.[a-z0-9_]+)+")
SNAKE_CASE = re.compile(r"(?<![\w.])[a-z][a-z0-9]*(?:_[a-z0-9]+)+(?![\w.])")
FILE_SUFFIXES = (".json", ".jsonl", ".txt")
NOT_KEYS = {"e.g", "i.e"}


def named_keys(text: str) -> tuple[list[str], list[str]]:
    """The config keys ``text`` names: dotted paths (``grpo.training.max_steps``, files left out) and single
    snake_case names (``train_num_seeds``)."""
    dotted = [name for name in DOTTED.findall(text) if not name.endswith(FILE_SUFFIXES) and name not in NOT_KEYS]
    return dotted, SNAKE_CASE.findall(DOTTED.sub(" ", text))


def has_key(schema: dict, node: dict, parts: list[str]) -> bool:
    """Whether ``parts`` is a key path under ``node`` (a user's own name where the schema takes any:
    ``benchmarks.<name>``)."""
    if not parts:
        return True
    for option in resolve_node(schema, node):
        if parts[0] in option.get("properties", {}) and has_key(schema, option["properties"][parts[0]], parts[1:]):
            return True
        extra = option.get("additionalProperties")
        if isinstance(extra, dict) and has_key(schema, extra, parts[1:]):
            return True
    return False


def property_names(node) -> set[str]:
    names = set()
    if isinstance(node, dict):
        names |= set(node.get("properties", {}))
        for value in node.values():
            names |= property_names(value)
    elif isinstance(node, list):
        for value in node:
            names |= property_names(value)
    return names


def test_every_config_key_a_warning_names_is_in_the_schema(tmp_path):
    schema = yaml.safe_load(SCHEMA.read_text(encoding="utf-8"))
    known_names = property_names(schema)
    lines = every_warning(tmp_path)
    assert len(lines) >= 10
    checked = set()
    for line in lines:
        dotted, names = named_keys(line)
        for key in dotted:
            assert has_key(schema, schema, key.split(".")), f"{key!r} is not a config key: {line}"
        for name in names:
            assert name in known_names, f"{name!r} is no config key's name: {line}"
        checked |= {*dotted, *names}
    named = {
        "grpo.training.max_steps",
        "sft.training.num_epochs",
        "dpo.training.num_epochs",
        "grpo.num_generations",
        "train_num_seeds",
        "teacher.train_num_seeds",
        "kto.pass_rate",
        "generation.sampling.max_new_tokens",
        "teacher.generation.sampling.max_new_tokens",
        "teacher.prompt.user",
        "judge.regex",
        "warnings.min_optimizer_steps",
    }
    assert named <= checked, named - checked
    assert not has_key(schema, schema, ["generation", "max_new_tokens"]), "what the truncated warning named before"
    assert named_keys("see stats.json; raise grpo.training.max_steps to 10, e.g. more (train_num_seeds)") == (
        ["grpo.training.max_steps"],
        ["train_num_seeds"],
    )


def test_ctrl_c_ends_a_job_with_one_log_line_and_status_130(tmp_path):
    """A job interrupted inside ``script_logging`` (as Ctrl-C interrupts every job of the terminal) prints no
    traceback, logs what is kept and how to resume, and exits 130."""
    log = tmp_path / "job.log"
    code = (
        "from snakeskills.job import script_logging\n"
        f"with script_logging({str(log)!r}) as logger:\n"
        "    logger.info('working')\n"
        "    raise KeyboardInterrupt\n"
    )
    process = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert process.returncode == 130
    assert process.stdout == process.stderr == ""
    text = log.read_text()
    assert "Traceback" not in text
    assert "WARNING: interrupted (Ctrl-C): the job stopped; its finished work is kept" in text
    assert "run the same command again to resume" in text


def test_a_round_that_drew_a_fraction_of_its_data_is_warned_on_its_datas_records():
    """The cost table counts the records a fraction of an epoch drew (40 of 100); the warning reads the data's 100, so
    a round with enough pairs is not told to find more data."""
    cost = {"method": "dpo", "dpo_pairs": 20, "train_problems": 50, "optimizer_steps": 40}
    section = default_config()["dpo"]
    assert "too few DPO pairs" in training_warnings("dpo-round1", cost, section, THRESHOLDS)[0]
    assert training_warnings("dpo-round1", cost, section, THRESHOLDS, {"pairs": 100, "problems": 50}) == []


def test_grpo_rewards_a_fallback_credited_are_warned_of_from_its_training_metrics(tmp_path):
    """Item 12 of issue 65: a GRPO round's completions the correct term rewarded on a fallback extraction (counted in
    its training_metrics.json's steps) get the warning SFT, DPO and KTO data get."""
    from snakeskills.io import write_json
    from snakeskills.results.comparison import gather_warnings

    history = [
        {"step": 1, "judge/credited": 10, "judge/fallback_credited": 6, "judge/fallback_credited/last_number": 6},
        {"step": 2, "judge/credited": 10, "judge/fallback_credited": 4, "judge/fallback_credited/last_number": 4},
    ]
    write_json(tmp_path / "training_metrics.json", {"log_history": history})
    common = dict(runs=[], summary={}, built_models=[], sft_stats={}, sections={}, training_costs={}, teacher=None)
    lines = gather_warnings(
        **common,
        thresholds=THRESHOLDS,
        training_data={"grpo-round1": ("grpo", str(tmp_path / "training_metrics.json"))},
        benchmark_judges={},
    )
    assert len(lines) == 1 and "grpo-round1" in lines[0] and "10 of 20" in lines[0], lines


def test_every_method_has_its_words():
    """The report's words for each method (``results.method_wording``): more-data advice for every method, a records
    column's meaning for every method that keeps records."""
    assert set(MORE_DATA) == set(TRAINING_METHODS)
    assert set(RECORDS_MEANING) == {name for name, method in TRAINING_METHODS.items() if method.records is not None}
