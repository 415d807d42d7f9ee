from snakeskills.io import write_json, write_text
from snakeskills.metrics import format_table
from snakeskills.summarize import summarize_benchmark
from snakeskills.workflow import script_logging

with script_logging(snakemake.log[0]) as logger:
    benchmark = snakemake.wildcards.benchmark
    metrics = summarize_benchmark(benchmark, list(snakemake.input))
    write_json(snakemake.output.metrics, metrics)
    table = format_table(benchmark, metrics[benchmark])
    write_text(snakemake.output.table, table)
    logger.info("\n%s", table)
