from snakeskills.sft import write_sft_dataset
from snakeskills.workflow import script_logging

with script_logging(snakemake.log[0]) as logger:
    counts = write_sft_dataset(
        list(snakemake.input),
        snakemake.params.prompt,
        snakemake.params.filters,
        snakemake.output.data,
        snakemake.output.stats,
    )
    logger.info("kept %d SFT examples", counts["kept"])
