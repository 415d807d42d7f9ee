from snakeskills.synthesis_funnel import write_funnel
from snakeskills.workflow import script_logging

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
