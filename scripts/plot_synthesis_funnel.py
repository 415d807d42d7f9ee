from snakeskills.io import read_json
from snakeskills.job import script_logging
from snakeskills.results.report import plot_synthesis_funnel

with script_logging(snakemake.log[0]):
    plot_synthesis_funnel(read_json(snakemake.input.funnel), snakemake.output.plot)
