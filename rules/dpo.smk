# dpo: (correct, incorrect) pairs of the previous model's judged train samples, then TRL's DPOTrainer on them.
rule preference_pairs:
    input:
        previous_model_train_files,
    output:
        pairs=LAYOUT.preference_pairs,
        stats=LAYOUT.preference_stats,
        pairwise=LAYOUT.preference_pairwise,
        dataset_info=LAYOUT.preference_dataset_info,
    params:
        benchmarks=previous_model_train_benchmarks,
        prompts=previous_model_train_prompts,
        pairs=config["dpo"]["pairs"],
        pass_rate=config["dpo"]["pass_rate"],
        dataset_name=sft_dataset_name,
    log:
        LOGS / "preference_pairs/{model}.log",
    wildcard_constraints:
        model=TUNED_MODEL_PATTERN["dpo"],
    conda:
        "../envs/judge.yaml"
    script:
        "../scripts/preference_pairs.py"


# dpo.method lora writes an adapter (models/dpo-round{r}/adapter), full a checkpoint
rule dpo:
    input:
        pairs=LAYOUT.preference_pairs,
        model=PLAN.base_model_inputs(),
        init=training_init,
    output:
        tuned=directory(PLAN.training_output("dpo")),
    params:
        model_path=base_model_path,
        model=config["model"],
        dpo=training_settings,
        chat_template=config["prompt"]["chat_template"],
        chat_template_kwargs=config["prompt"]["chat_template_kwargs"],
    log:
        LOGS / "dpo/{model}.log",
    wildcard_constraints:
        model=TUNED_MODEL_PATTERN["dpo"],
    threads: workflow.cores
    resources:
        gpu=training_job_gpus,
        mem_mb=PLAN.training_resources("dpo")["mem_mb"],
        runtime=PLAN.training_resources("dpo")["runtime"],
    conda:
        "../envs/training.yaml"
    script:
        "../scripts/dpo.py"
