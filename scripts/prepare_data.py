from snakeskills.data.prepare import prepare_split
from snakeskills.io import write_jsonl
from snakeskills.job import script_logging

with script_logging(snakemake.log[0]) as logger:
    records = prepare_split(
        snakemake.wildcards.benchmark, snakemake.params.spec, snakemake.wildcards.split, threads=snakemake.threads
    )
    write_jsonl(snakemake.output[0], records)
    logger.info("prepared %d rows into %s", len(records), snakemake.output[0])
