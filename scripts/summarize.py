from snakeskills.io import read_json
from snakeskills.job import script_logging
from snakeskills.judging.extraction_routes import ROUTES_METRIC
from snakeskills.results.run_warnings import metrics_fallback_warnings, metrics_warnings
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
    summary = read_json(snakemake.output.metrics)
    model, split, thresholds = snakemake.wildcards.model, snakemake.wildcards.split, snakemake.config["warnings"]
    teacher = snakemake.config["teacher"]
    is_teacher = teacher is not None and model == teacher["name"]
    for line in metrics_warnings(model, benchmark, split, summary[benchmark], thresholds, teacher=is_teacher):
        logger.warning(line)
    routes, own_judge = summary.get(f"{benchmark}/{ROUTES_METRIC}"), snakemake.config["benchmarks"][benchmark]["judge"]
    for line in metrics_fallback_warnings(model, benchmark, split, routes, thresholds, own_judge):
        logger.warning(line)
