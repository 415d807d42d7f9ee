from snakeskills.dpo import train_dpo
from snakeskills.gpus import claim_job_gpus
from snakeskills.training import launch_training
from snakeskills.workflow import script_logging

with script_logging(snakemake.log[0]) as logger:
    claim_job_gpus(snakemake.resources.gpu)
    dpo = snakemake.params.dpo
    processes = dpo["processes"]
    arguments = {
        "method": dpo["method"],
        "base_model_path": snakemake.params.model_path,
        "pairs_path": snakemake.input.pairs,
        "output_dir": snakemake.output.tuned,
        "lora": dpo.get("lora"),  # the plan gives LoRA settings to dpo.method lora only
        "training": dpo["training"],
        "beta": dpo["beta"],
        "loss": dpo["loss"],
        "nll_weight": dpo["nll_weight"],
        "init_path": snakemake.input.init[0] if snakemake.input.init else None,
        "chat_template": snakemake.params.chat_template,
        "chat_template_kwargs": snakemake.params.chat_template_kwargs,
        "seed": dpo["seed"],
        "threads": max(1, snakemake.threads // processes),
        "dtype": snakemake.params.model["dtype"],
        "trust_remote_code": snakemake.params.model["trust_remote_code"],
        "distributed": dpo["distributed"],
    }
    if processes == 1:
        metrics = train_dpo(**arguments)
    else:
        metrics = launch_training("snakeskills.dpo", arguments, processes=processes, log_path=snakemake.log[0])
    logger.info("dpo done: %s", {key: value for key, value in metrics.items() if key != "log_history"})
