# kto: every judged train sample of the previous model, desirable when judged correct and undesirable when not;
# the kto rule (rules/train.smk) trains on them with TRL's KTOTrainer.
rule kto_samples:
    input:
        previous_model_train_files,
    output:
        samples=LAYOUT.kto_samples,
        stats=LAYOUT.kto_stats,
    params:
        benchmarks=previous_model_train_benchmarks,
        prompts=previous_model_train_prompts,
        samples=config["kto"]["samples"],
        pass_rate=config["kto"]["pass_rate"],
    log:
        LOGS / "kto_samples/{model}.log",
    wildcard_constraints:
        model=TRAINING_METHODS["kto"].tuned_model_pattern,
    conda:
        "../envs/judge.yaml"
    script:
        "../scripts/kto_samples.py"
