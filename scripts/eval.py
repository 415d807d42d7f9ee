from snakeskills.io import read_json
from snakeskills.job import script_logging
from snakeskills.results.comparison import write_comparison
from snakeskills.results.method_comparison import training_cost
from snakeskills.results.validation_curves import evaluation_seconds, round_curves
from snakeskills.training.methods import training_method

with script_logging(snakemake.log[0]) as logger:
    tuned = snakemake.params.tuned_models  # {model: (method, round)}
    costs = {
        model: training_cost(method, round_number, folder, stats)
        for (model, (method, round_number)), folder, stats in zip(
            tuned.items(), snakemake.input.tuned, snakemake.input.training_data, strict=True
        )
    }
    for model, logs in snakemake.params.validation_logs.items():  # what evaluating its checkpoints cost
        costs[model]["validation_seconds"] = evaluation_seconds(logs)
    table = write_comparison(
        runs=snakemake.params.runs,
        metrics_paths=list(snakemake.input.metrics),
        problem_paths=list(snakemake.input.problems),
        funnel_paths=list(snakemake.input.funnel),
        built_models=list(snakemake.input.built_models),
        sft_stats=dict(zip(snakemake.params.rounds, snakemake.input.sft_stats, strict=True)),
        sections=snakemake.params.sections,
        thresholds=snakemake.params.warnings,
        base_model=snakemake.params.base_model,
        teacher=snakemake.params.teacher,
        summary_path=snakemake.output.summary,
        table_path=snakemake.output.table,
        warnings_path=snakemake.output.warnings,
        flips_path=snakemake.output.flips,
        method_pairs=snakemake.params.method_pairs,
        training_costs=costs,
        # the credited examples of the rounds whose data keeps them (SFT examples, DPO's chosen, KTO's desirable),
        # and of those whose trainer counts them (GRPO's completions rewarded as correct: its training metrics)
        training_data={
            model: (
                method,
                f"{folder}/training_metrics.json" if training_method(method).samples_while_training else stats,
            )
            for (model, (method, _)), folder, stats in zip(
                tuned.items(), snakemake.input.tuned, snakemake.input.training_data, strict=True
            )
            if training_method(method).credited
        },
        benchmark_judges=snakemake.params.benchmark_judges,
        # the models each model's accuracy and price are paired with, where samples had prices
        cost_references=snakemake.params.cost_references,
        validation_curves=round_curves(snakemake.params.validation_runs, list(snakemake.input.validation)),
        selections={
            model: read_json(path)
            for model, path in zip(snakemake.params.selected_rounds, snakemake.input.selections, strict=True)
        },
    )
    logger.info("\n%s", table)
