"""The eval rule's comparison of every model: the table of each model's headline metrics on the eval split, each tuned
model's paired gain over the base model (``paired_bootstrap``), each model's tool use in a run with tools
(``tool_metrics``), each model's accuracy against its price in a run with prices (``cost_metrics``), rounds of
different methods compared (``method_comparison``), named metrics side by side, the training costs, the synthesis
funnel and the run's warnings; written as eval/summary.json and eval/summary.txt."""

from __future__ import annotations

from pathlib import Path

from snakeskills.errors import SnakeskillsError
from snakeskills.io import read_json, write_json, write_text
from snakeskills.judging.extraction_routes import ROUTES_METRIC
from snakeskills.results.cost_metrics import (
    ACCURACY_COST,
    accuracy_cost_table,
    cost_blocks,
    is_accuracy_cost_entry,
    is_cost_block,
)
from snakeskills.results.method_comparison import PAIRED_GAIN_OVER, TRAINING_COST, compare_methods, format_costs
from snakeskills.results.metrics import (
    FINISH_REASON_SHARES,
    aligned_rows,
    format_value,
    headline_modes,
)
from snakeskills.results.named_metrics import is_named_metric, metric_lines
from snakeskills.results.paired_bootstrap import FLIPS_HEADER, PAIRED_GAIN, compare_accuracy_cost
from snakeskills.results.paired_bootstrap import compare as compare_paired
from snakeskills.results.paired_bootstrap import describe as describe_paired
from snakeskills.results.run_warnings import (
    WARNING,
    format_warnings,
    metrics_fallback_warnings,
    metrics_warnings,
    sft_warnings,
    training_data_fallback_warnings,
    training_warnings,
)
from snakeskills.results.tool_metrics import is_tool_block, tool_use_table
from snakeskills.results.validation_curves import add_validation_curves, curve_table


def comparison_rows(summary: dict[str, dict]) -> list[list[str]]:
    """Rows of (model, benchmark, headline modes...) for a ``{model: {benchmark: metrics}}`` summary."""
    rows = []
    header = None
    for model, benchmarks in summary.items():
        for benchmark, metrics in benchmark_entries(benchmarks).items():
            modes = headline_modes(metrics)
            # the LLM judge's verdict, when it ran, beside the symbolic one (headline mode only)
            judged = ["judge_correct"] if "judge_correct" in metrics[modes[0]] else []
            shares = [metric for metric in FINISH_REASON_SHARES.values() if metric in metrics[modes[0]]]
            if header is None:
                header = ["model", "benchmark", "num_entries", *modes, *(f"{modes[0]} judge" for _ in judged), *shares]
            rows.append(
                [model, benchmark, str(metrics[modes[0]]["num_entries"])]
                + [format_value(metrics[mode], "symbolic_correct") for mode in modes]
                + [format_value(metrics[modes[0]], metric) for metric in [*judged, *shares]]
            )
    return [header, *rows]


def format_comparison(summary: dict[str, dict], base_model: str, teacher: str | None = None) -> str:
    """The eval table, then each model's gain over the base model (with its paired confidence interval and flips
    where the summary has them: ``paired.PAIRED_GAIN``); with a ``teacher`` in the summary, also the share of the
    teacher's lead over the base model that each tuned round closed. Where models called tools, their tool use
    (``tool_metrics.tool_use_table``) follows, where samples had prices each model's accuracy against its price
    (``cost_metrics.accuracy_cost_table``), then the named metrics."""
    rows = comparison_rows(summary)
    lines = aligned_rows(rows, rule_under_header=True)
    gains = []
    for model, benchmarks in summary.items():
        if model == base_model:
            continue
        for benchmark, metrics in benchmark_entries(benchmarks).items():
            mode = headline_modes(metrics)[0]
            base_score = summary[base_model][benchmark][mode]["symbolic_correct"]
            delta = metrics[mode]["symbolic_correct"] - base_score
            gain = f"{model} vs {base_model} on {benchmark}: {mode} symbolic_correct {delta:+.2f} points"
            if teacher is not None and model != teacher:
                lead = summary[teacher][benchmark][mode]["symbolic_correct"] - base_score
                if lead > 0:
                    gain += f" ({100 * delta / lead:.0f}% of the teacher's {lead:+.2f})"
            paired = benchmarks.get(f"{benchmark}/{PAIRED_GAIN}")
            gains.append(gain + (f"\n  {describe_paired(model, paired)}" if paired else ""))
    title = "symbolic_correct by model (eval split); 'judge' columns: the LLM judge's judge_correct"
    if not any(cell.endswith(" judge") for cell in rows[0]):
        title = "symbolic_correct by model (eval split)"
    text = "\n".join([title, *lines, "", *gains]) + "\n"
    tools, costs = tool_use_table(summary), accuracy_cost_table(summary)
    text += ("\n" + tools if tools else "") + ("\n" + costs if costs else "")
    return text + format_named_comparison(summary)


def benchmark_entries(entries: dict) -> dict:
    """A model's summary entries that are benchmarks' eval modes (its named metrics left out)."""
    return {name: metrics for name, metrics in entries.items() if not is_named_metric(name)}


def format_named_comparison(summary: dict[str, dict]) -> str:
    """Each named metric (``"<benchmark>/<name>"``) as a table: one row per leaf of its value, one column per
    model that has it; empty when no model has one. The paired gains, training costs, tool use and prices have
    tables of their own."""
    keys = [
        key
        for key in dict.fromkeys(key for entries in summary.values() for key in entries if is_named_metric(key))
        if not key.endswith(f"/{PAIRED_GAIN}")
        and f"/{PAIRED_GAIN_OVER}/" not in key
        and key != TRAINING_COST
        and not any(
            check(key, entries[key])
            for entries in summary.values()
            if key in entries
            for check in (is_tool_block, is_cost_block, is_accuracy_cost_entry)
        )
    ]
    blocks = []
    for key in keys:
        models = [model for model, entries in summary.items() if key in entries]
        values = {model: dict(metric_lines(summary[model][key])) for model in models}
        paths = list(dict.fromkeys(path for model in models for path in values[model]))
        rows = [[key, *models]] + [[path, *(values[model].get(path, "") for model in models)] for path in paths]
        blocks.append("\n".join(aligned_rows(rows, rule_under_header=True)) + "\n")
    return "".join("\n" + block for block in blocks)


def write_comparison(
    *,
    runs,
    metrics_paths,
    problem_paths,
    funnel_paths=(),
    built_models=(),
    base_model: str,
    teacher: str | None,
    summary_path,
    table_path,
    warnings_path=None,
    flips_path,
    sft_stats=None,
    sections=None,
    thresholds=None,
    method_pairs=(),
    training_costs=None,
    training_data=None,
    benchmark_judges=None,
    cost_references=(),
    validation_curves=None,
    selections=None,
) -> str:
    """Collect per-(model, benchmark) metrics into ``{model: {benchmark: {eval_mode: {metric}}}}``, with each model's
    paired comparison against the base model (the teacher's lead too) under ``"<benchmark>/paired_gain"`` and every
    problem's flip in
    ``flips_path`` (``problem_paths``: each run's problems.jsonl). The table ends with the synthesis funnel
    (``funnel_paths``) and the run's warnings: bootstraps below target (``built_models``: checkpoint folders) and,
    given ``thresholds`` (config ``warnings``), the rest of ``gather_warnings`` (``sft_stats``: {round: stats.json};
    ``sections``: {method: config section}). ``method_pairs`` ((model, other) rounds of the same number) are compared
    paired too, ``training_costs`` ({model: cost}) go under ``"training/cost"``, and where samples had prices, accuracy
    against price paired with each of ``cost_references`` under
    ``"<benchmark>/accuracy_cost"`` (``add_accuracy_cost``). ``validation_curves`` ({round: its checkpoints' validation
    scores}) and ``selections`` ({round: its selection.json}) go under each round and into a table
    (``validation_curves``)."""

    summary: dict[str, dict] = {}
    problems = {}
    for (model, benchmark), path, problems_path in zip(runs, metrics_paths, problem_paths, strict=True):
        metrics = read_json(path)
        if benchmark not in metrics:
            raise SnakeskillsError(f"{path}: has no entry for benchmark {benchmark!r}")
        entries = summary.setdefault(model, {})
        entries[benchmark] = metrics[benchmark]
        entries.update((key, value) for key, value in metrics.items() if is_named_metric(key))
        problems[model, benchmark] = problems_path
    flips = [list(FLIPS_HEADER)]
    for model, benchmark in runs:  # the tuned rounds, the baselines, the teacher (its lead), the models as tools
        if model == base_model:
            continue
        entry, rows = compare_paired(
            model, base_model, benchmark, problems[base_model, benchmark], problems[model, benchmark]
        )
        summary[model][f"{benchmark}/{PAIRED_GAIN}"] = entry
        flips += rows
    write_text(flips_path, "".join("\t".join(map(str, row)) + "\n" for row in flips))
    add_accuracy_cost(summary, runs, problems, cost_references)
    benchmarks = list(dict.fromkeys(benchmark for _, benchmark in runs))
    method_lines = compare_methods(list(method_pairs), benchmarks, problems, summary)
    for model, cost in (training_costs or {}).items():
        summary[model][TRAINING_COST] = cost
    table = format_comparison(summary, base_model, teacher)
    if method_lines:
        table += "\ntraining methods compared (rounds of the same number, paired over the same problems)\n"
        table += "\n".join(method_lines) + "\n"
    table += format_costs(training_costs or {})
    add_validation_curves(summary, validation_curves or {}, selections or {})
    table += curve_table(validation_curves or {}, selections or {})
    for path in funnel_paths:
        table += "\n" + Path(path).read_text(encoding="utf-8")
    warnings = gather_warnings(
        runs=runs,
        summary=summary,
        built_models=built_models,
        thresholds=thresholds,
        sft_stats=sft_stats or {},
        sections=sections or {},
        training_costs=training_costs or {},
        training_data=training_data or {},
        benchmark_judges=benchmark_judges or {},
        teacher=teacher,
    )
    table += format_warnings(warnings)
    write_json(summary_path, summary)
    write_text(table_path, table)
    if warnings_path is not None:  # the report shows them (results/samples.py)
        write_json(warnings_path, [line.removeprefix(WARNING) for line in warnings])
    return table


def add_accuracy_cost(
    summary: dict[str, dict], runs, problems: dict[tuple[str, str], str | Path], cost_references
) -> None:
    """On each benchmark where some model's samples had prices (a ``"<benchmark>/cost"`` block): each model's
    headline pass@1 (``symbolic_correct``), its mean price per problem (the block's ``cost_per_sample``; 0 without a
    block) and, against each model of ``cost_references`` other than itself, the paired difference of both
    (``paired_bootstrap.compare_accuracy_cost``, over ``problems``: {(model, benchmark): problems.jsonl}), stored in
    ``summary[model]`` under ``"<benchmark>/accuracy_cost"`` as ``{"accuracy", "cost_per_problem", "vs": {reference:
    {"accuracy", "cost"}}}``. Nothing is stored where no samples had prices."""
    priced = {benchmark for model, benchmark in runs if benchmark in cost_blocks(summary[model])}
    for model, benchmark in runs:
        if benchmark not in priced:
            continue
        key = f"{benchmark}/{ACCURACY_COST}"
        if key in summary[model]:
            raise SnakeskillsError(
                f"config key metrics.{ACCURACY_COST} (or benchmarks.{benchmark}.metrics.{ACCURACY_COST}): the eval "
                "writes each model's accuracy against its price under that name; rename the metric"
            )
        versus = {}
        for reference in cost_references:
            if reference == model:
                continue
            if (reference, benchmark) not in problems:
                raise SnakeskillsError(
                    f"accuracy against cost: reference model {reference!r} has no eval run on benchmark {benchmark!r}"
                )
            versus[reference] = compare_accuracy_cost(problems[reference, benchmark], problems[model, benchmark])
        metrics, block = summary[model][benchmark], cost_blocks(summary[model]).get(benchmark)
        summary[model][key] = {
            "accuracy": metrics[headline_modes(metrics)[0]]["symbolic_correct"],
            "cost_per_problem": 0.0 if block is None else block["cost_per_sample"],
            "vs": versus,
        }


def gather_warnings(
    *,
    runs,
    summary: dict,
    built_models,
    thresholds: dict | None,
    sft_stats: dict,
    sections: dict,
    training_costs: dict,
    teacher: str | None,
    training_data: dict,
    benchmark_judges: dict,
) -> list[str]:
    """The comparison's warnings, one source after another (``run_warnings``): each built tiny model whose bootstrap
    missed its target; given ``thresholds``, each SFT round's data (``sft_stats``, read with sft.training), each
    other round's training cost (read with its method's section, ``sections``) and each model's truncated or
    unanswered share on each benchmark, each round's credited examples (``training_data``: {round: (method, its data's
    stats.json, or a trainer's training_metrics.json whose steps counted them: GRPO's)}) and each model's correct
    verdicts (``benchmark_judges``: {benchmark: its own judge section}) resting on a fallback extraction. A new source adds its lines here."""
    from snakeskills.training.tiny_bootstrap import BOOTSTRAP_METRICS_FILE, bootstrap_miss

    warnings = []
    for folder in built_models:
        miss = bootstrap_miss(read_json(Path(folder) / BOOTSTRAP_METRICS_FILE))
        if miss:
            warnings.append(f"{miss} ({folder})")
    if thresholds is None:
        return warnings
    for model, path in sft_stats.items():
        warnings += sft_warnings(model, read_json(path), sections["sft"]["training"], thresholds)
    for model, cost in training_costs.items():
        if model not in sft_stats:  # an sft round's warning reads its data's stats (above)
            stats = read_json(training_data[model][1]) if model in training_data else None
            warnings += training_warnings(model, cost, sections[cost["method"]], thresholds, stats)
    for model, benchmark in runs:
        metrics = summary[model][benchmark]
        warnings += metrics_warnings(model, benchmark, "eval split", metrics, thresholds, teacher=model == teacher)
        routes, own_judge = summary[model].get(f"{benchmark}/{ROUTES_METRIC}"), benchmark_judges.get(benchmark, {})
        warnings += metrics_fallback_warnings(model, benchmark, "eval split", routes, thresholds, own_judge)
    for model, (method, path) in training_data.items():
        counts = read_json(path)
        if "log_history" in counts:  # a trainer's metrics (GRPO): the counts its logged steps add up to
            from snakeskills.training.grpo_rewards import credited_counts_of

            counts = credited_counts_of(counts["log_history"])
        warnings += training_data_fallback_warnings(model, method, counts, thresholds)
    return warnings
