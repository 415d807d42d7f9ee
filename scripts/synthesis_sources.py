from snakeskills.synthesis import write_sources
from snakeskills.workflow import script_logging

with script_logging(snakemake.log[0]):
    write_sources(
        snakemake.input.train,
        list(snakemake.input.judged),
        snakemake.output[0],
        sources=snakemake.params.sources,
        seed=snakemake.params.seed,
    )
