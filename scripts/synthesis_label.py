from snakeskills.job import script_logging
from snakeskills.settings.judging import RuleJudge
from snakeskills.synthesis.majority_labels import exact_answer_function, write_labels

with script_logging(snakemake.log[0]):
    write_labels(
        snakemake.input.problems,
        list(snakemake.input.solved),
        labelled_path=snakemake.output.labelled,
        judged_path=snakemake.output.judged,
        stats_path=snakemake.output.stats,
        judge=RuleJudge.from_dict(snakemake.params.judge, "judge"),
        min_agreement=snakemake.params.min_agreement,
        num_workers=snakemake.threads,
        exact_answer=exact_answer_function(snakemake.params.exact_answer),
        solver=snakemake.params.solver,
        chunks_per_seed=snakemake.params.chunks_per_seed,
    )
