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
        model=TRAINING_METHODS["dpo"].tuned_model_pattern,
    conda:
        "../envs/judge.yaml"
    script:
        "../scripts/preference_pairs.py"
