from snakeskills.job import script_logging
from snakeskills.results.report import plot_generation_lengths, read_generation_lengths

with script_logging(snakemake.log[0]) as logger:
    lengths = read_generation_lengths(list(snakemake.input), snakemake.params.runs)
    plot_generation_lengths(lengths, snakemake.output.plot)
    logger.info("plotted %d generations of %d (model, benchmark) pairs", sum(map(len, lengths.values())), len(lengths))
