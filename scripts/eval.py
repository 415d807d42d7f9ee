from snakeskills.summarize import write_comparison
from snakeskills.workflow import script_logging

with script_logging(snakemake.log[0]) as logger:
    table = write_comparison(
        runs=snakemake.params.runs,
        metrics_paths=list(snakemake.input.metrics),
        problem_paths=list(snakemake.input.problems),
        funnel_paths=list(snakemake.input.funnel),
        built_models=list(snakemake.input.built_models),
        sft_stats=dict(zip(snakemake.params.rounds, snakemake.input.sft_stats, strict=True)),
        training=snakemake.params.training,
        thresholds=snakemake.params.warnings,
        base_model=snakemake.params.base_model,
        teacher=snakemake.params.teacher,
        summary_path=snakemake.output.summary,
        table_path=snakemake.output.table,
        flips_path=snakemake.output.flips,
    )
    logger.info("\n%s", table)
