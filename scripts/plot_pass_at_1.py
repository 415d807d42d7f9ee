from snakeskills.io import read_json
from snakeskills.job import script_logging
from snakeskills.results.report import describe_pass_at_1, plot_pass_at_1

with script_logging(snakemake.log[0]) as logger:
    summary = read_json(snakemake.input.summary)
    plot_pass_at_1(summary, snakemake.output.plot)
    logger.info("pass@1 by round:\n%s", describe_pass_at_1(summary))
