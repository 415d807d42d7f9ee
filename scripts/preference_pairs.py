from snakeskills.job import script_logging
from snakeskills.results.run_warnings import training_data_fallback_warnings
from snakeskills.training.preference_pairs import write_pairwise_exports, write_preference_pairs

with script_logging(snakemake.log[0]) as logger:
    counts = write_preference_pairs(
        list(snakemake.input),
        snakemake.params.benchmarks,
        snakemake.params.prompts,
        snakemake.params.pairs,
        snakemake.params.pass_rate,
        snakemake.output.pairs,
        snakemake.output.stats,
    )
    write_pairwise_exports(
        snakemake.output.pairs,
        pairwise_path=snakemake.output.pairwise,
        dataset_info_path=snakemake.output.dataset_info,
        dataset_name=snakemake.params.dataset_name,
    )
    logger.info("%d DPO pairs from %d problems", counts["pairs"], counts["problems_paired"])
    # the threshold is read from the config, not params: changing it does not remake the pairs
    for line in training_data_fallback_warnings(snakemake.wildcards.model, "dpo", counts, snakemake.config["warnings"]):
        logger.warning(line)
