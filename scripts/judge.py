from snakeskills.io import iter_jsonl, write_jsonl
from snakeskills.judge import judge_record
from snakeskills.workflow import script_logging

with script_logging(snakemake.log[0]) as logger:
    judge = snakemake.params.judge
    rows = write_jsonl(
        snakemake.output[0],
        (
            judge_record(record, method=judge["extraction"], regex=judge["regex"])
            for record in iter_jsonl(snakemake.input.generations)
        ),
    )
    logger.info("judged %d rows", rows)
