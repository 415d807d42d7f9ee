from snakeskills.gpus import claim_job_gpus
from snakeskills.sft import launch_sft, train_sft
from snakeskills.workflow import script_logging

with script_logging(snakemake.log[0]) as logger:
    gpus = claim_job_gpus(snakemake.resources.gpu)
    sft = snakemake.params.sft
    processes = sft["processes"]
    arguments = {
        "method": sft["method"],
        "base_model_path": snakemake.params.model_path,
        "sft_data_path": snakemake.input.data,
        "output_dir": snakemake.output.tuned,
        "lora": sft.get("lora"),  # the plan gives LoRA settings to sft.method lora only
        "training": sft["training"],
        "init_path": snakemake.input.init[0] if snakemake.input.init else None,
        "chat_template": snakemake.params.chat_template,
        "chat_template_kwargs": snakemake.params.chat_template_kwargs,
        "seed": sft["seed"],
        "threads": max(1, snakemake.threads // processes),
        "dtype": snakemake.params.model["dtype"],
        "trust_remote_code": snakemake.params.model["trust_remote_code"],
        "distributed": sft["distributed"],
    }
    if processes == 1:
        metrics = train_sft(**arguments)
    else:
        metrics = launch_sft(arguments, processes=processes, on_cpu=not gpus, log_path=snakemake.log[0])
    logger.info("sft done: %s", {key: value for key, value in metrics.items() if key != "log_history"})
