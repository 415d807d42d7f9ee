rule sft_data:
    input:
        lambda w: PLAN.sft_judged_files(w.model),
    output:
        data=LAYOUT.sft_data,
        stats=LAYOUT.sft_stats,
        alpaca=LAYOUT.sft_alpaca,
        dataset_info=LAYOUT.sft_dataset_info,
    params:
        # each source's resolved prompt, in sft_judged_files' order (the student's, with its benchmark's question)
        prompts=lambda w: [resolve_prompt(prompt) for prompt in PLAN.sft_prompts(w.model)],
        filters=sft_filters(),
        sources=lambda w: [source for source, _, _ in PLAN.sft_judged_sources(w.model)],
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
        # a params function: the base checkpoint folder written into params as a string fails --lint
        model_path=lambda w: PLAN.base_model_folder(),
        model=config["model"],
    log:
        LOGS / "merge_adapter/{model}.log",
    conda:
        "../envs/training.yaml"
    script:
        "../scripts/merge_adapter.py"
