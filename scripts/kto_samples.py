from snakeskills.job import script_logging
from snakeskills.results.run_warnings import training_data_fallback_warnings
from snakeskills.training.kto_samples import write_kto_samples

with script_logging(snakemake.log[0]) as logger:
    counts = write_kto_samples(
        list(snakemake.input),
        snakemake.params.benchmarks,
        snakemake.params.prompts,
        snakemake.params.samples,
        snakemake.params.pass_rate,
        snakemake.output.samples,
        snakemake.output.stats,
    )
    logger.info(
        "%d KTO samples (%d desirable) from %d problems",
        counts["samples"],
        counts["desirable"],
        counts["problems_kept"],
    )
    # the threshold is read from the config, not params: changing it does not remake the samples
    for line in training_data_fallback_warnings(snakemake.wildcards.model, "kto", counts, snakemake.config["warnings"]):
        logger.warning(line)
