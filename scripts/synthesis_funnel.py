from snakeskills.job import script_logging
from snakeskills.synthesis.funnel import write_funnel

with script_logging(snakemake.log[0]) as logger:
    rows = write_funnel(
        list(snakemake.input.filter),
        list(snakemake.input.label),
        list(snakemake.input.sft),
        list(snakemake.input.llm_check),
        runs=[tuple(run) for run in snakemake.params.runs],
        rounds=snakemake.params.rounds,
        output_path=snakemake.output.funnel,
        table_path=snakemake.output.table,
    )
    logger.info("funnel: %s", rows)
