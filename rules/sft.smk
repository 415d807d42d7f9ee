rule sft_data:
    input:
        sft_judged_files,
    output:
        data=LAYOUT.sft_data,
        stats=LAYOUT.sft_stats,
        alpaca=LAYOUT.sft_alpaca,
        dataset_info=LAYOUT.sft_dataset_info,
    params:
        prompts=sft_prompts,
        filters=config["sft"]["filters"],
        sources=sft_data_sources,
        dataset_name=sft_dataset_name,
    log:
        LOGS / "sft_data/{model}.log",
    conda:
        "../envs/judge.yaml"
    script:
        "../scripts/sft_data.py"


# sft.method lora writes an adapter (models/round{r}/adapter), full a checkpoint (models/round{r}/checkpoint)
rule sft:
    input:
        data=LAYOUT.sft_data,
        model=PLAN.base_model_inputs(),
        init=sft_init,
    output:
        tuned=directory(PLAN.training.output),
    params:
        model_path=base_model_path,
        model=config["model"],
        sft=sft_training_config,
        chat_template=config["prompt"]["chat_template"],
        chat_template_kwargs=config["prompt"]["chat_template_kwargs"],
    log:
        LOGS / "sft/{model}.log",
    wildcard_constraints:
        model=r"round\d+",
    threads: workflow.cores
    resources:
        gpu=sft_gpus,
        mem_mb=PLAN.training_resources()["mem_mb"],
        runtime=PLAN.training_resources()["runtime"],
    conda:
        "../envs/training.yaml"
    script:
        "../scripts/sft.py"


rule merge_adapter:
    input:
        adapter=LAYOUT.adapter,
        model=PLAN.base_model_inputs(),
    output:
        merged=directory(LAYOUT.merged_model),
    params:
        model_path=base_model_path,
        model=config["model"],
    log:
        LOGS / "merge_adapter/{model}.log",
    conda:
        "../envs/training.yaml"
    script:
        "../scripts/merge_adapter.py"
