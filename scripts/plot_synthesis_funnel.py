from snakeskills.io import read_json
from snakeskills.report import plot_synthesis_funnel
from snakeskills.workflow import script_logging

with script_logging(snakemake.log[0]):
    plot_synthesis_funnel(read_json(snakemake.input.funnel), snakemake.output.plot)
