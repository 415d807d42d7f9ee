from snakeskills.io import concatenate_jsonl
from snakeskills.job import script_logging

with script_logging(snakemake.log[0]) as logger:
    rows = concatenate_jsonl(list(snakemake.input), snakemake.output[0])
    logger.info("merged %d chunks, %d rows", len(snakemake.input), rows)
