from snakeskills.io import write_json
from snakeskills.workflow import script_logging

with script_logging(snakemake.log[0]) as logger:
    settings = dict(snakemake.params.items())
    write_json(snakemake.output[0], settings)
    logger.info("wrote %s", snakemake.output[0])
