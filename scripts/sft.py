from snakeskills.gpus import claim_job_gpus
from snakeskills.sft import train_lora
from snakeskills.workflow import script_logging

with script_logging(snakemake.log[0]) as logger:
    claim_job_gpus(snakemake.resources.gpu)
    sft = snakemake.params.sft
    metrics = train_lora(
        base_model_path=snakemake.params.model_path,
        sft_data_path=snakemake.input.data,
        output_dir=snakemake.output.adapter,
        lora=sft["lora"],
        training=sft["training"],
        init_adapter_path=snakemake.input.init_adapter[0] if snakemake.input.init_adapter else None,
        chat_template=snakemake.params.chat_template,
        seed=sft["seed"],
        threads=snakemake.threads,
        trust_remote_code=snakemake.params.model["trust_remote_code"],
    )
    logger.info("sft done: %s", metrics)
