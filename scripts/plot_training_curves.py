from snakeskills.job import script_logging
from snakeskills.results.report import plot_training_curves, read_training_histories

with script_logging(snakemake.log[0]) as logger:
    histories = read_training_histories(list(snakemake.input), snakemake.params.models)
    plot_training_curves(histories, snakemake.params.methods, snakemake.output.plot)
    logger.info(
        "training curves of %s", ", ".join(f"{model} ({len(h)} logged steps)" for model, h in histories.items())
    )
