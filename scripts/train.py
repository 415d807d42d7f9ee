from snakeskills.backends.gpus import claim_job_gpus
from snakeskills.job import script_logging
from snakeskills.plan.training import with_save_timer
from snakeskills.results.run_warnings import online_reward_warnings
from snakeskills.settings.models import Model
from snakeskills.settings.training import ROUND_SETTINGS
from snakeskills.training.rounds import RoundRun, train_round, trainer_options

with script_logging(snakemake.log[0]) as logger:
    method, model = snakemake.params.method, Model.from_dict(snakemake.params.model, "model")
    job = ROUND_SETTINGS[method].from_dict(snakemake.params.settings, f"{method} round")
    if job.nodes is None:  # one node (a job across several gets its nodes' GPUs from SLURM)
        claim_job_gpus(snakemake.resources.gpu)
    run = RoundRun(
        weights=job.method,
        base_model_path=snakemake.params.model_path,
        data_path=snakemake.input.data,
        output_dir=snakemake.output.tuned,
        lora=job.lora,  # the plan gives LoRA settings to <method>.method lora only
        training=with_save_timer(job.training, snakemake.config, method),
        init_path=snakemake.input.init[0] if snakemake.input.init else None,
        chat_template=snakemake.params.chat_template,
        chat_template_kwargs=snakemake.params.chat_template_kwargs,
        seed=job.seed,
        threads=max(1, snakemake.threads // job.processes),
        dtype=model.dtype,
        trust_remote_code=model.trust_remote_code,
        processes=job.processes,
        distributed=job.distributed,
        nodes=job.nodes or 1,
        # a training segment (<method>.training.eval_every_steps): where it stops, what it resumes, where its state goes
        stop_at_step=snakemake.params.get("stop_at_step"),
        resume_state=snakemake.input.resume[0] if snakemake.input.get("resume") else None,
        state_dir=snakemake.output.get("state"),
        **(job.chat_tools or {}),
    )
    options = trainer_options(method, job, snakemake.params.judging)
    metrics = train_round(method, run, options, log_path=snakemake.log[0])
    logger.info("%s done: %s", method, {key: value for key, value in metrics.items() if key != "log_history"})
    # rewards a fallback extraction credited, as SFT, DPO and KTO warn of their data's
    history, thresholds = metrics.get("log_history"), snakemake.config["warnings"]
    for line in online_reward_warnings(snakemake.wildcards.model, method, history, thresholds):
        logger.warning(line)
