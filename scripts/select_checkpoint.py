from snakeskills.job import script_logging
from snakeskills.results.validation_curves import select_checkpoint

with script_logging(snakemake.log[0]) as logger:
    selection = select_checkpoint(
        checkpoints=list(snakemake.input.checkpoints),
        steps=snakemake.params.steps,
        select=snakemake.params.select,
        validation=list(snakemake.input.get("validation", [])),
        benchmarks=snakemake.params.benchmarks,
        output_dir=snakemake.output.tuned,
        selection_path=snakemake.output.selection,
    )
    logger.info(
        "%s: the output model is step %d of %d (select %s; validation mean pass@1 by step: %s)",
        snakemake.wildcards.model,
        selection["selected_step"],
        selection["last_step"],
        selection["select"],
        selection["validation_mean_pass@1"],
    )
