from snakeskills.io import write_json
from snakeskills.job import script_logging

with script_logging(snakemake.log[0]) as logger:
    write_json(snakemake.output[0], snakemake.params.settings)
    logger.info("wrote %s", snakemake.output[0])
