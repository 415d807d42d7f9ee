from snakeskills.job import script_logging
from snakeskills.results.run_warnings import sft_warnings, training_data_fallback_warnings
from snakeskills.training.sft_data import write_sft_dataset, write_sft_exports

with script_logging(snakemake.log[0]) as logger:
    counts = write_sft_dataset(
        list(snakemake.input),
        snakemake.params.sources,
        snakemake.params.prompts,
        snakemake.params.filters,
        snakemake.output.data,
        snakemake.output.stats,
    )
    write_sft_exports(
        snakemake.output.data,
        alpaca_path=snakemake.output.alpaca,
        dataset_info_path=snakemake.output.dataset_info,
        dataset_name=snakemake.params.dataset_name,
    )
    logger.info("kept %d SFT examples", counts["kept"])
    # the thresholds and training settings are read from the config, not params: changing one reruns eval only
    training, thresholds = snakemake.config["sft"]["training"], snakemake.config["warnings"]
    for line in sft_warnings(snakemake.wildcards.model, counts, training, thresholds):
        logger.warning(line)
    for line in training_data_fallback_warnings(snakemake.wildcards.model, "sft", counts, thresholds):
        logger.warning(line)
