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
