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
        filters=sft_filters(),
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
        init=training_init,
    output:
        tuned=directory(PLAN.training_output("sft")),
    params:
        model_path=base_model_path,
        model=config["model"],
        sft=training_settings,
        chat_template=config["prompt"]["chat_template"],
        chat_template_kwargs=config["prompt"]["chat_template_kwargs"],
    log:
        LOGS / "sft/{model}.log",
    wildcard_constraints:
        model=TUNED_MODEL_PATTERN["sft"],
    threads: workflow.cores
    resources:
        gpu=training_job_gpus,
        mem_mb=PLAN.training_resources("sft")["mem_mb"],
        runtime=PLAN.training_resources("sft")["runtime"],
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
