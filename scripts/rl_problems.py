from snakeskills.training_problems import write_rl_problems
from snakeskills.workflow import script_logging

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
