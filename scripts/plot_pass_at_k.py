from snakeskills.io import read_json
from snakeskills.job import script_logging
from snakeskills.results.report import plot_pass_at_k

with script_logging(snakemake.log[0]) as logger:
    plot_pass_at_k(read_json(snakemake.input.summary), snakemake.output.plot)
    logger.info("wrote %s", snakemake.output.plot)
