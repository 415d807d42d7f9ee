from snakeskills.workflow import script_logging, write_job_settings

with script_logging(snakemake.log[0]) as logger:
    settings = dict(snakemake.params.items())
    write_job_settings(snakemake.output[0], settings)
    logger.info("wrote %s", snakemake.output[0])
