from snakeskills.job import script_logging
from snakeskills.training.rl_problems import write_rl_problems

with script_logging(snakemake.log[0]) as logger:
    counts = write_rl_problems(
        list(snakemake.input),
        snakemake.params.benchmarks,
        snakemake.params.prompts,
        snakemake.params.pass_rate,
        snakemake.output.problems,
        snakemake.output.stats,
    )
    logger.info("GRPO problems: %s", counts)
