from snakeskills.summarize import write_benchmark_summary
from snakeskills.workflow import script_logging

with script_logging(snakemake.log[0]) as logger:
    table = write_benchmark_summary(
        snakemake.wildcards.benchmark,
        list(snakemake.input),
        snakemake.params.metrics,
        metrics_path=snakemake.output.metrics,
        table_path=snakemake.output.table,
        problems_path=snakemake.output.problems,
    )
    logger.info("\n%s", table)
