from snakeskills.job import script_logging
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
