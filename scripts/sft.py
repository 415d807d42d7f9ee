from snakeskills.gpus import claim_job_gpus
from snakeskills.sft import train_sft
from snakeskills.workflow import script_logging

with script_logging(snakemake.log[0]) as logger:
    claim_job_gpus(snakemake.resources.gpu)
    sft = snakemake.params.sft
    metrics = train_sft(
        method=sft["method"],
        base_model_path=snakemake.params.model_path,
        sft_data_path=snakemake.input.data,
        output_dir=snakemake.output.tuned,
        lora=sft["lora"] if sft["method"] == "lora" else None,
        training=sft["training"],
        init_path=snakemake.input.init[0] if snakemake.input.init else None,
        chat_template=snakemake.params.chat_template,
        seed=sft["seed"],
        threads=snakemake.threads,
        trust_remote_code=snakemake.params.model["trust_remote_code"],
    )
    logger.info("sft done: %s", metrics)
