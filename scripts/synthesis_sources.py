from snakeskills.job import script_logging
from snakeskills.synthesis.problems import write_sources

with script_logging(snakemake.log[0]):
    write_sources(
        snakemake.input.train,
        list(snakemake.input.judged),
        snakemake.output[0],
        sources=snakemake.params.sources,
        seed=snakemake.params.seed,
    )
