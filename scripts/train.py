from snakeskills.backends.gpus import claim_job_gpus
from snakeskills.job import script_logging
from snakeskills.plan.training import with_save_timer
from snakeskills.results.run_warnings import training_data_fallback_warnings
from snakeskills.training.grpo_rewards import credited_counts_of
from snakeskills.training.rounds import RoundRun, train_round, trainer_options

with script_logging(snakemake.log[0]) as logger:
    claim_job_gpus(snakemake.resources.gpu)
    method, settings = snakemake.params.method, snakemake.params.settings
    processes = settings["processes"]
    run = RoundRun(
        weights=settings["method"],
        base_model_path=snakemake.params.model_path,
        data_path=snakemake.input.data,
        output_dir=snakemake.output.tuned,
        lora=settings.get("lora"),  # the plan gives LoRA settings to <method>.method lora only
        training=with_save_timer(settings["training"], snakemake.config[method]),
        init_path=snakemake.input.init[0] if snakemake.input.init else None,
        chat_template=snakemake.params.chat_template,
        chat_template_kwargs=snakemake.params.chat_template_kwargs,
        seed=settings["seed"],
        threads=max(1, snakemake.threads // processes),
        dtype=snakemake.params.model["dtype"],
        trust_remote_code=snakemake.params.model["trust_remote_code"],
        processes=processes,
        distributed=settings["distributed"],
    )
    options = trainer_options(method, settings, snakemake.params.judging)
    metrics = train_round(method, run, options, log_path=snakemake.log[0])
    logger.info("%s done: %s", method, {key: value for key, value in metrics.items() if key != "log_history"})
    if method == "grpo":  # rewards a fallback extraction credited, as SFT/DPO/KTO warn of their data's
        counts = credited_counts_of(metrics.get("log_history") or [])
        for line in training_data_fallback_warnings(
            snakemake.wildcards.model, method, counts, snakemake.config["warnings"]
        ):
            logger.warning(line)
