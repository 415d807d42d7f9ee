from snakeskills.io import read_json
from snakeskills.job import script_logging
from snakeskills.results.report import gain_points, plot_gains

with script_logging(snakemake.log[0]) as logger:
    summary = read_json(snakemake.input.summary)
    plot_gains(summary, snakemake.output.plot)
    for model, benchmark, entry in gain_points(summary):
        logger.info(
            "%s on %s: %+.2f points, %d%% CI [%+.2f, %+.2f]",
            model,
            benchmark,
            entry["gain"],
            round(100 * entry["confidence"]),
            entry["ci_low"],
            entry["ci_high"],
        )
