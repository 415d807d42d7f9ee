from snakeskills.io import read_json
from snakeskills.job import script_logging
from snakeskills.results.run_warnings import metrics_warnings
from snakeskills.results.summarize import write_benchmark_summary

with script_logging(snakemake.log[0]) as logger:
    benchmark = snakemake.wildcards.benchmark
    table = write_benchmark_summary(
        benchmark,
        list(snakemake.input),
        snakemake.params.metrics,
        metrics_path=snakemake.output.metrics,
        table_path=snakemake.output.table,
        problems_path=snakemake.output.problems,
    )
    logger.info("\n%s", table)
    # the thresholds are read from the config, not params: changing one reruns eval only
    metrics = read_json(snakemake.output.metrics)[benchmark]
    model, split = snakemake.wildcards.model, snakemake.wildcards.split
    for line in metrics_warnings(model, benchmark, split, metrics, snakemake.config["warnings"]):
        logger.warning(line)
