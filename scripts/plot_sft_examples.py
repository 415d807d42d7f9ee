from snakeskills.job import script_logging
from snakeskills.results.report import plot_sft_examples, read_sft_stats

with script_logging(snakemake.log[0]) as logger:
    stats = read_sft_stats(list(snakemake.input), snakemake.params.rounds)
    plot_sft_examples(stats, snakemake.output.plot)
    logger.info("SFT examples kept per round: %s", {model: counts["kept"] for model, counts in stats.items()})
