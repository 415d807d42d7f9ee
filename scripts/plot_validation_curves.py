from snakeskills.io import read_json
from snakeskills.job import script_logging
from snakeskills.results.report import plot_validation_curves, read_training_histories

with script_logging(snakemake.log[0]) as logger:
    histories = read_training_histories(list(snakemake.input.tuned), snakemake.params.models)
    plot_validation_curves(
        read_json(snakemake.input.summary), histories, snakemake.params.methods, snakemake.output.plot
    )
    logger.info("validation curves of %s", ", ".join(snakemake.params.models))
