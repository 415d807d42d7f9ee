from snakeskills.gpus import claim_job_gpus
from snakeskills.grpo import train_grpo
from snakeskills.training import launch_training
from snakeskills.workflow import script_logging

with script_logging(snakemake.log[0]) as logger:
    claim_job_gpus(snakemake.resources.gpu)
    grpo = snakemake.params.grpo
    processes = grpo["processes"]
    arguments = {
        "method": grpo["method"],
        "base_model_path": snakemake.params.model_path,
        "problems_path": snakemake.input.problems,
        "output_dir": snakemake.output.tuned,
        "lora": grpo.get("lora"),  # the plan gives LoRA settings to grpo.method lora only
        "training": grpo["training"],
        "num_generations": grpo["num_generations"],
        "beta": grpo["beta"],
        "loss": grpo["loss"],
        "sampling": grpo["sampling"],
        "rewards": grpo["rewards"],
        "judges": snakemake.params.judges,
        "reasoning": snakemake.params.reasoning,
        "vllm_mode": grpo["vllm_mode"],
        "init_path": snakemake.input.init[0] if snakemake.input.init else None,
        "chat_template": snakemake.params.chat_template,
        "chat_template_kwargs": snakemake.params.chat_template_kwargs,
        "seed": grpo["seed"],
        "threads": max(1, snakemake.threads // processes),
        "dtype": snakemake.params.model["dtype"],
        "trust_remote_code": snakemake.params.model["trust_remote_code"],
        "distributed": grpo["distributed"],
    }
    if processes == 1:
        metrics = train_grpo(**arguments)
    else:
        metrics = launch_training("snakeskills.grpo", arguments, processes=processes, log_path=snakemake.log[0])
    logger.info("grpo done: %s", {key: value for key, value in metrics.items() if key != "log_history"})
