from snakeskills.job import script_logging
from snakeskills.synthesis.problems import write_problems

with script_logging(snakemake.log[0]):
    write_problems(
        list(snakemake.input.generated),
        train_paths=list(snakemake.input.train),
        eval_paths=list(snakemake.input.eval),
        output_path=snakemake.output.problems,
        dropped_path=snakemake.output.dropped,
        stats_path=snakemake.output.stats,
        filter_config=snakemake.params.filter,
        decontamination=snakemake.params.decontamination,
        id_prefix=snakemake.params.id_prefix,
        writer=snakemake.params.writer,
        round_number=int(snakemake.wildcards.round),
    )
