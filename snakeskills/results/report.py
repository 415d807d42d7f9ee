"""Plots for the Snakemake report (``snakemake --report report.html``), drawn with matplotlib.

Plain functions: each reads the pipeline's own files (``eval/summary.json``, judged seed files,
``sft/<round>/stats.json``) or the data loaded from them, and writes one PNG atomically. Figures are
built without pyplot (no global state, no display needed), so they run in any worker process.

Over 500 lines: one plot a function, all sharing the figure, colour and empty-panel helpers, so that every plot of a
report draws a model in the same colour.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

from snakeskills.errors import SnakeskillsError
from snakeskills.io import atomic_open, iter_jsonl, read_json
from snakeskills.results.cost_metrics import accuracy_cost_points, format_price, pareto_frontier
from snakeskills.results.named_metrics import is_named_metric
from snakeskills.results.paired_bootstrap import PAIRED_GAIN
from snakeskills.results.tool_metrics import tool_blocks
from snakeskills.training.methods import TRAINING_METHODS, training_method

METRIC = "symbolic_correct"
# why a judged sample did not become an SFT example (sft/<round>/stats.json keys), in stacking order
SFT_DROP_REASONS = ("outside_pass_rate", "incorrect", "truncated", "too_long", "duplicate", "over_per_problem_cap")
_PASS_AT_K = re.compile(r"^pass@(\d+)$")
_MAJORITY_AT_K = re.compile(r"^majority@(\d+)$")


def _figure(num_panels: int, *, panel_width: float = 4.8, height: float = 3.6):
    from matplotlib.figure import Figure

    figure = Figure(figsize=(panel_width * num_panels, height), layout="constrained")
    axes = figure.subplots(1, num_panels, squeeze=False)[0]
    return figure, list(axes)


def _save(figure, output_path: str | Path) -> None:
    with atomic_open(output_path, "wb") as handle:
        figure.savefig(handle, format="png", dpi=110)


def _model_colors(models: Sequence[str]) -> dict[str, str]:
    """One colour per model, the same in every plot (base first, then the rounds)."""
    from matplotlib import colormaps

    palette = colormaps["tab10"].colors
    return {model: palette[index % len(palette)] for index, model in enumerate(models)}


def _benchmarks(summary: dict) -> list[str]:
    """The benchmarks of a summary, in order (its named metrics' entries left out)."""
    names: list[str] = []
    for benchmarks in summary.values():
        names.extend(name for name in benchmarks if name not in names and not is_named_metric(name))
    return names


def _largest_k(metrics: dict) -> int:
    ks = [int(match.group(1)) for mode in metrics if (match := _PASS_AT_K.match(mode))]
    if not ks:
        raise SnakeskillsError(f"metrics have no pass@k entries (modes: {sorted(metrics)})")
    return max(ks)


def pass_at_1_points(summary: dict, benchmark: str, metric: str = METRIC) -> list[tuple[str, float, float]]:
    """(model, pass@1[avg-of-k] in percent, std across seeds in percent) per model, k the largest.

    The error is ``std_dev_across_runs`` of ``<metric>_statistics`` (a fraction, as NeMo-Skills writes
    it), the spread of the per-seed accuracies; 0 with a single seed.
    """
    points = []
    for model, benchmarks in summary.items():
        if benchmark not in benchmarks:
            continue
        metrics = benchmarks[benchmark]
        values = metrics[f"pass@1[avg-of-{_largest_k(metrics)}]"]
        statistics = values.get(f"{metric}_statistics")
        error = 100.0 * statistics["std_dev_across_runs"] if statistics else 0.0
        points.append((model, float(values[metric]), error))
    return points


def plot_pass_at_1(summary: dict, output_path: str | Path, metric: str = METRIC) -> None:
    """pass@1[avg-of-k] of each model (base, sft-round1, ...), one line per benchmark, seed std as error bars."""
    models = list(summary)
    figure, (axis,) = _figure(1, panel_width=max(4.8, 1.2 * len(models) + 2.5))
    for benchmark in _benchmarks(summary):
        points = pass_at_1_points(summary, benchmark, metric)
        positions = [models.index(model) for model, _, _ in points]
        values = [value for _, value, _ in points]
        line = axis.errorbar(
            positions, values, yerr=[error for _, _, error in points], marker="o", capsize=4, label=benchmark
        )
        for position, value in zip(positions, values, strict=True):
            axis.annotate(
                f"{value:.1f}",
                (position, value),
                textcoords="offset points",
                xytext=(10, 0),
                va="center",
                fontsize=8,
                color=line[0].get_color(),
            )
    k = _largest_k(next(iter(next(iter(summary.values())).values())))
    axis.set_xticks(range(len(models)), models)
    axis.set_xlim(-0.5, len(models) - 0.5)
    axis.set_xlabel("model (self-improvement round)")
    axis.set_ylabel(f"pass@1[avg-of-{k}] {metric} (%)")
    axis.set_title("pass@1 by round (eval split), ± std across seeds")
    axis.grid(axis="y", alpha=0.3)
    axis.legend(title="benchmark", fontsize=8)
    _save(figure, output_path)


def gain_points(summary: dict) -> list[tuple[str, str, dict]]:
    """(model, benchmark, paired entry) of every model's comparison with the base model (a teacher's too)."""
    suffix = f"/{PAIRED_GAIN}"
    return [
        (model, key.removesuffix(suffix), entry)
        for model, entries in summary.items()
        for key, entry in entries.items()
        if key.endswith(suffix)
    ]


def plot_gains(summary: dict, output_path: str | Path) -> None:
    """Each tuned model's gain over its base model per benchmark, with its paired-bootstrap interval; a dashed line
    at 0 (an interval that crosses it shows no evidence of a change)."""
    points = gain_points(summary)
    figure, (axis,) = _figure(1, panel_width=max(4.8, 0.9 * len(points) + 2.5))
    if not points:
        axis.text(0.5, 0.5, "no tuned model to compare", ha="center", va="center", transform=axis.transAxes)
        axis.set_axis_off()
        _save(figure, output_path)
        return
    colors = _model_colors(list(summary))
    for position, (model, _, entry) in enumerate(points):
        below, above = entry["gain"] - entry["ci_low"], entry["ci_high"] - entry["gain"]
        axis.errorbar([position], [entry["gain"]], yerr=[[below], [above]], marker="o", capsize=5, color=colors[model])
        axis.annotate(
            f"{entry['gain']:+.1f}", (position, entry["gain"]), textcoords="offset points", xytext=(8, 0), fontsize=8
        )
    axis.axhline(0, color="grey", linestyle="--", linewidth=1)
    axis.set_xticks(range(len(points)), [f"{model}\n{benchmark}" for model, benchmark, _ in points], fontsize=8)
    axis.set_xlim(-0.6, len(points) - 0.4)
    confidence = round(100 * points[0][2]["confidence"])
    axis.set_ylabel(f"gain over base model, {METRIC} (points)")
    axis.set_title(f"gain with its {confidence}% paired-bootstrap interval (eval split)")
    axis.grid(axis="y", alpha=0.3)
    _save(figure, output_path)


def at_k_curves(metrics: dict, metric: str = METRIC) -> dict[str, list[tuple[int, float]]]:
    """``{"pass": [(k, value)...], "majority": [(k, value)...]}`` sorted by k (majority starts at k=2)."""
    curves: dict[str, list[tuple[int, float]]] = {"pass": [], "majority": []}
    for mode, values in metrics.items():
        for name, pattern in (("pass", _PASS_AT_K), ("majority", _MAJORITY_AT_K)):
            match = pattern.match(mode)
            if match and values.get(metric) is not None:
                curves[name].append((int(match.group(1)), float(values[metric])))
    return {name: sorted(points) for name, points in curves.items()}


def plot_pass_at_k(summary: dict, output_path: str | Path, metric: str = METRIC) -> None:
    """pass@k (solid) and majority@k (dashed) against k, one panel per benchmark, one colour per model."""
    benchmarks = _benchmarks(summary)
    colors = _model_colors(list(summary))
    figure, axes = _figure(len(benchmarks))
    for axis, benchmark in zip(axes, benchmarks, strict=True):
        largest = 1
        for model, model_benchmarks in summary.items():
            if benchmark not in model_benchmarks:
                continue
            curves = at_k_curves(model_benchmarks[benchmark], metric)
            for name, style in (("pass", "-o"), ("majority", "--s")):
                if curves[name]:
                    ks, values = zip(*curves[name], strict=True)
                    largest = max(largest, *ks)
                    axis.plot(ks, values, style, color=colors[model], markersize=4, label=f"{model} {name}@k")
        axis.set_xticks(range(1, largest + 1) if largest <= 16 else None)
        axis.set_xlabel("k (samples per problem)")
        axis.set_ylabel(f"{metric} (%)")
        axis.set_title(f"{benchmark}: pass@k and majority@k")
        axis.grid(alpha=0.3)
        axis.legend(fontsize=7)
    _save(figure, output_path)


def read_generation_lengths(
    judged_paths: Sequence[str | Path], runs: Sequence[Sequence]
) -> dict[tuple[str, str], list[int]]:
    """``num_generated_tokens`` of every row, pooled over seeds: ``{(model, benchmark): [tokens...]}``.

    ``runs[i]`` starts with the (model, benchmark) of ``judged_paths[i]`` (more items, e.g. the seed, are ignored).
    """
    if len(judged_paths) != len(runs):
        raise SnakeskillsError(f"{len(judged_paths)} judged files but {len(runs)} (model, benchmark) labels")
    lengths: dict[tuple[str, str], list[int]] = {}
    for path, run in zip(judged_paths, runs, strict=True):
        tokens = lengths.setdefault((run[0], run[1]), [])
        for line_number, row in enumerate(iter_jsonl(path), start=1):
            if "num_generated_tokens" not in row:
                raise SnakeskillsError(f"{path}: row {line_number} lacks field 'num_generated_tokens'")
            tokens.append(int(row["num_generated_tokens"]))
    return lengths


def plot_generation_lengths(lengths: dict[tuple[str, str], list[int]], output_path: str | Path) -> None:
    """Histogram of generated tokens per sample, one panel per benchmark, one outline per model."""
    from matplotlib.ticker import MaxNLocator

    models = list(dict.fromkeys(model for model, _ in lengths))
    benchmarks = list(dict.fromkeys(benchmark for _, benchmark in lengths))
    colors = _model_colors(models)
    figure, axes = _figure(len(benchmarks))
    for axis, benchmark in zip(axes, benchmarks, strict=True):
        pooled = [value for (_, name), values in lengths.items() if name == benchmark for value in values]
        if not pooled:
            raise SnakeskillsError(f"no generations of benchmark {benchmark!r} to plot")
        low, high = min(pooled), max(pooled)
        width = max(1, -(-(high - low + 1) // 60))  # at most ~60 bins, each a whole number of tokens wide
        bins = [edge - 0.5 for edge in range(low, high + width + 1, width)]
        for model in models:
            values = lengths.get((model, benchmark))
            if not values:
                continue
            mean = sum(values) / len(values)
            axis.hist(
                values,
                bins=bins,
                histtype="step",
                linewidth=1.5,
                color=colors[model],
                label=f"{model} (mean {mean:.1f}, n={len(values)})",
            )
        axis.xaxis.set_major_locator(MaxNLocator(integer=True))
        axis.set_xlabel("num_generated_tokens")
        axis.set_ylabel("samples")
        axis.set_title(f"{benchmark}: generation lengths (eval split)")
        axis.grid(alpha=0.3)
        axis.legend(fontsize=7)
    _save(figure, output_path)


def read_sft_stats(stats_paths: Sequence[str | Path], models: Sequence[str]) -> dict[str, dict]:
    """``{round: stats.json}`` in round order."""
    if len(stats_paths) != len(models):
        raise SnakeskillsError(f"{len(stats_paths)} SFT stats files but {len(models)} rounds")
    return {model: read_json(path) for model, path in zip(models, stats_paths, strict=True)}


def plot_sft_examples(stats: dict[str, dict], output_path: str | Path) -> None:
    """Per round: judged train samples split into kept SFT examples and the filter that dropped the rest."""
    from matplotlib import colormaps

    rounds = list(stats)
    figure, (axis,) = _figure(1, panel_width=max(4.8, 1.1 * len(rounds) + 3.5))
    if not rounds:
        _empty(axis, "no sft rounds in this run (methods)")
        _save(figure, output_path)
        return
    positions = range(len(rounds))
    kept = [stats[model]["kept"] for model in rounds]
    # kept examples by the model that wrote them (a teacher, the base model, the student's rounds)
    sources = list(dict.fromkeys(source for model in rounds for source in stats[model]["kept_by_source"]))
    greens = colormaps["Greens"]
    bottom = [0] * len(rounds)
    for index, source in enumerate(sources):
        counts = [stats[model]["kept_by_source"].get(source, 0) for model in rounds]
        label = f"kept: by {source}" if len(sources) > 1 else "kept"
        color = greens(0.85 - 0.5 * index / max(1, len(sources) - 1))
        axis.bar(positions, counts, bottom=bottom, color=color, label=label)
        bottom = [base + count for base, count in zip(bottom, counts, strict=True)]
    bottom = list(kept)
    palette = colormaps["Greys"]
    for index, reason in enumerate(SFT_DROP_REASONS):
        counts = [stats[model].get(reason, 0) for model in rounds]
        if not any(counts):
            continue
        axis.bar(
            positions,
            counts,
            bottom=bottom,
            color=palette(0.25 + 0.6 * index / len(SFT_DROP_REASONS)),
            edgecolor="white",
            label=f"dropped: {reason}",
        )
        bottom = [base + count for base, count in zip(bottom, counts, strict=True)]
    for position, model, total in zip(positions, rounds, bottom, strict=True):
        axis.annotate(
            f"{stats[model]['kept']} kept\n{stats[model]['problems_covered']} problems",
            (position, total),
            textcoords="offset points",
            xytext=(0, 3),
            ha="center",
            fontsize=8,
        )
    axis.set_xticks(list(positions), rounds)
    axis.set_ylim(0, 1.15 * max(bottom))
    axis.set_xlabel("round (trained on)")
    axis.set_ylabel("judged train samples")
    axis.set_title("SFT examples kept per round")
    axis.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    _save(figure, output_path)


def _empty(axis, text: str) -> None:
    axis.text(0.5, 0.5, text, ha="center", va="center", transform=axis.transAxes)
    axis.set_axis_off()


def training_curve(method: str, history: list[dict]) -> tuple[str, list[tuple[int, float]]]:
    """(label, (step, value) points) of a round's logged training history (training_metrics.json's log_history):
    the first of its method's curves (``TrainingMethod.curves``: sft's loss, dpo's preference accuracy, ...) that
    its trainer logged."""
    curves = training_method(method).curves
    for key, label in curves:
        points = [(int(entry["step"]), float(entry[key])) for entry in history if key in entry and "step" in entry]
        if points:
            return label, points
    return curves[0][1], []


def read_training_histories(folders: Sequence[str | Path], models: Sequence[str]) -> dict[str, list[dict]]:
    """Each tuned model's logged history from its adapter's or checkpoint's training_metrics.json."""
    return {
        model: read_json(Path(folder) / "training_metrics.json").get("log_history", [])
        for model, folder in zip(models, folders, strict=True)
    }


def plot_training_curves(histories: dict[str, list[dict]], methods: dict[str, str], output_path: str | Path) -> None:
    """One panel per training method: each of its rounds' curve by optimizer step (``training_curve``)."""
    used = list(dict.fromkeys(methods[model] for model in histories)) or [next(iter(TRAINING_METHODS))]
    figure, axes = _figure(len(used))
    colors = _model_colors(list(histories))
    for axis, method in zip(axes, used, strict=True):
        label = training_method(method).curves[0][1]
        drawn = False
        for model, history in histories.items():
            if methods[model] != method:
                continue
            label, points = training_curve(method, history)
            if points:
                axis.plot(*zip(*points, strict=True), marker=".", color=colors[model], label=model)
                drawn = True
        if not drawn:
            _empty(axis, f"no logged {method} steps")
            continue
        axis.set_xlabel("optimizer step")
        axis.set_ylabel(label)
        axis.set_title(f"{method}: {label} by step")
        axis.legend(fontsize=7)
    _save(figure, output_path)


def plot_validation_curves(
    summary: dict, histories: dict[str, list[dict]], methods: dict[str, str], output_path: str | Path
) -> None:
    """Learning curves of the rounds trained in segments (``<method>.training.eval_every_steps``): in the first panel
    each round's mean validation pass@1 by optimizer step (step 0: the model it started from) with its 95% interval
    (one benchmark) and its output model circled (the summary's ``validation/curve`` and ``validation/selection``);
    beside it one panel per method with its rounds' training curves (``training_curve``: loss, reward, ...) on the
    same steps, the evaluated steps as faint lines."""
    from snakeskills.results.validation_curves import VALIDATION_CURVE, VALIDATION_SELECTION

    rounds = [model for model in histories if VALIDATION_CURVE in summary.get(model, {})]
    used = list(dict.fromkeys(methods[model] for model in rounds))
    figure, axes = _figure(1 + max(1, len(used)))
    left = axes[0]
    if not rounds:
        for axis in axes:
            _empty(axis, "no round evaluated on validation")
        _save(figure, output_path)
        return
    colors = _model_colors(rounds)
    for model in rounds:
        curve = summary[model][VALIDATION_CURVE]
        steps = [entry["step"] for entry in curve]
        means = [entry["mean"] for entry in curve]
        left.plot(steps, means, marker="o", color=colors[model], label=model)
        if all(len(entry["benchmarks"]) == 1 for entry in curve):
            scores = [next(iter(entry["benchmarks"].values())) for entry in curve]
            lows, highs = [score["ci_low"] for score in scores], [score["ci_high"] for score in scores]
            left.fill_between(steps, lows, highs, color=colors[model], alpha=0.15)
        selection = summary[model].get(VALIDATION_SELECTION)
        if selection is not None:
            chosen = steps.index(selection["selected_step"])
            left.scatter([steps[chosen]], [means[chosen]], s=180, facecolors="none", edgecolors=colors[model])
    left.set_xlabel("optimizer step")
    left.set_ylabel("validation pass@1 (%)")
    left.set_title("held-out accuracy (circled: output model)")
    left.legend(fontsize=7)
    for axis, method in zip(axes[1:], used, strict=True):
        label = training_method(method).curves[0][1]
        for model in rounds:
            if methods[model] != method:
                continue
            label, points = training_curve(method, histories[model])
            if points:
                axis.plot(*zip(*points, strict=True), marker=".", color=colors[model], label=model)
            for entry in summary[model][VALIDATION_CURVE]:
                axis.axvline(entry["step"], color=colors[model], alpha=0.2, linewidth=0.8)
        axis.set_xlabel("optimizer step")
        axis.set_ylabel(label)
        axis.set_title(f"{method}: {label}")
        axis.legend(fontsize=7)
    _save(figure, output_path)


def describe_pass_at_1(summary: dict) -> str:
    """The pass@1 plot's points as text, one line each, for the job log."""
    return "\n".join(
        f"{benchmark} {model}: {value:.2f} ± {error:.2f}"
        for benchmark in _benchmarks(summary)
        for model, value, error in pass_at_1_points(summary, benchmark)
    )


def plot_synthesis_funnel(rows: list[dict], output_path: str | Path) -> None:
    """Per round and train benchmark: the synthesized problems left after each step (generated, parsed, unique,
    clean of contamination, labelled), one group of bars each, with the label accuracy where it was checked."""
    from matplotlib import colormaps

    from snakeskills.synthesis.funnel import FUNNEL_STEPS

    figure, (axis,) = _figure(1, panel_width=max(4.8, 1.6 * len(rows) + 3.5))
    width = 0.8 / len(FUNNEL_STEPS)
    blues = colormaps["Blues"]
    for index, step in enumerate(FUNNEL_STEPS):
        positions = [group + (index - (len(FUNNEL_STEPS) - 1) / 2) * width for group in range(len(rows))]
        axis.bar(
            positions,
            [row[step] for row in rows],
            width,
            color=blues(0.3 + 0.6 * index / len(FUNNEL_STEPS)),
            label=step,
        )
    for group, row in enumerate(rows):
        if row["label_accuracy"] is not None:
            axis.annotate(
                f"labels {100 * row['label_accuracy']:.0f}% right",
                (group, row["generated"]),
                textcoords="offset points",
                xytext=(0, 3),
                ha="center",
                fontsize=8,
            )
    axis.set_xticks(list(range(len(rows))), [f"round{row['round']}\n{row['benchmark']}" for row in rows])
    axis.set_ylim(0, 1.15 * max([row["generated"] for row in rows] + [1]))
    axis.set_ylabel("synthesized problems")
    axis.set_title("Problem synthesis funnel")
    axis.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    _save(figure, output_path)


# the tool-use plot's bars: (tool_metrics block key, legend label), in drawing order
TOOL_USE_BARS = (
    ("share_calling", "samples that call a tool"),
    ("accuracy_with_call", f"{METRIC} with a call"),
    ("accuracy_without_call", f"{METRIC} without a call"),
)


def tool_use_points(summary: dict) -> dict[str, list[tuple[str, dict]]]:
    """``{benchmark: [(model, tool_metrics block), ...]}`` in summary order, over the models with a tool-use block
    (``"<benchmark>/tools"``, a run with tools)."""
    points: dict[str, list[tuple[str, dict]]] = {}
    for model, entries in summary.items():
        for benchmark, block in tool_blocks(entries).items():
            points.setdefault(benchmark, []).append((model, block))
    return points


def plot_tool_use(summary: dict, output_path: str | Path) -> None:
    """Per benchmark, one group of bars per model: the share of its samples that call a tool, and the accuracy of the
    samples with a call and of those without (a group with no such samples has no bar there, and says so); each
    model's calls per sample under its name."""
    from matplotlib import colormaps

    points = tool_use_points(summary)
    benchmarks = list(points) or [""]
    widest = max((len(models) for models in points.values()), default=1)
    figure, axes = _figure(len(benchmarks), panel_width=max(6.4, 1.3 * widest + 3.0))
    if not points:
        _empty(axes[0], "no tool use recorded (a run without tools)")
        _save(figure, output_path)
        return
    palette = colormaps["Set2"].colors
    width = 0.8 / len(TOOL_USE_BARS)
    for axis, benchmark in zip(axes, benchmarks, strict=True):
        models = points[benchmark]
        for index, (key, label) in enumerate(TOOL_USE_BARS):
            offset = (index - (len(TOOL_USE_BARS) - 1) / 2) * width
            legend = label  # on the first bar drawn
            for group, (_, block) in enumerate(models):
                value = block[key]
                position = group + offset
                if value is None:
                    axis.annotate(
                        "none",
                        (position, 0),
                        textcoords="offset points",
                        xytext=(0, 3),
                        ha="center",
                        fontsize=7,
                        rotation=90,
                        color="grey",
                    )
                    continue
                axis.bar(position, value, width, color=palette[index], label=legend)
                legend = None
                axis.annotate(
                    f"{value:.0f}",
                    (position, value),
                    textcoords="offset points",
                    xytext=(0, 2),
                    ha="center",
                    fontsize=7,
                )
        axis.set_xticks(
            range(len(models)),
            [f"{model}\n{block['calls_per_sample']:.2f} calls/sample" for model, block in models],
            fontsize=8,
        )
        axis.set_xlim(-0.6, len(models) - 0.4)
        axis.set_ylim(0, 112)
        axis.set_ylabel("percent")
        axis.set_title(f"{benchmark}: tool use (eval split)")
        axis.grid(axis="y", alpha=0.3)
    legend = {}  # each kind of bar once, from whichever panel drew it
    for axis in axes:
        legend.update((label, handle) for handle, label in zip(*axis.get_legend_handles_labels(), strict=True))
    labels = [label for _, label in TOOL_USE_BARS if label in legend]
    figure.legend([legend[label] for label in labels], labels, loc="outside upper center", ncols=3, fontsize=8)
    _save(figure, output_path)


def plot_accuracy_cost(summary: dict, output_path: str | Path) -> None:
    """Per benchmark, each model's pass@1 against its mean price per problem (``"<benchmark>/accuracy_cost"``, a run
    with prices), one labelled point per model with its seed std as an error bar, and the Pareto frontier (the
    models no other is both cheaper and more accurate than, ``cost_metrics.pareto_frontier``) as a step line."""
    points = accuracy_cost_points(summary)
    benchmarks = list(points) or [""]
    figure, axes = _figure(len(benchmarks), panel_width=6.4, height=4.4)
    if not points:
        _empty(axes[0], "no prices recorded (a run without priced tools)")
        _save(figure, output_path)
        return
    colors = _model_colors(list(summary))
    for axis, benchmark in zip(axes, benchmarks, strict=True):
        errors = {model: error for model, _, error in pass_at_1_points(summary, benchmark)}
        for model, price, accuracy in points[benchmark]:
            axis.errorbar(
                [price], [accuracy], yerr=[errors.get(model, 0.0)], marker="o", capsize=4, color=colors[model]
            )
            axis.annotate(
                f"{model}\n{format_price(price)}, {accuracy:.1f}%",
                (price, accuracy),
                textcoords="offset points",
                xytext=(6, 4),
                fontsize=7,
                color=colors[model],
            )
        frontier = pareto_frontier(points[benchmark])
        axis.step(
            [price for _, price, _ in frontier],
            [accuracy for _, _, accuracy in frontier],
            where="post",
            color="grey",
            linestyle="--",
            linewidth=1,
            label="Pareto frontier",
        )
        highest = max(price for _, price, _ in points[benchmark])
        axis.set_xlim(-0.05 * (highest or 1), 1.3 * (highest or 1))
        axis.set_ylim(0, 105)
        axis.set_xlabel("mean price per problem")
        axis.set_ylabel(f"pass@1 {METRIC} (%)")
        axis.set_title(f"{benchmark}: accuracy against price (eval split)")
        axis.grid(alpha=0.3)
        axis.legend(fontsize=7, loc="lower right")
    _save(figure, output_path)
