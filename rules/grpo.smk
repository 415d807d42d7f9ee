# grpo: the train problems the previous model solves sometimes (grpo.pass_rate), then TRL's GRPOTrainer samples
# groups of completions of them and rewards each with the benchmark's own judge.
rule rl_problems:
    input:
        previous_model_train_files,
    output:
        problems=LAYOUT.rl_problems,
        stats=LAYOUT.rl_stats,
    params:
        benchmarks=previous_model_train_benchmarks,
        prompts=previous_model_train_prompts,
        pass_rate=config["grpo"]["pass_rate"],
    log:
        LOGS / "rl_problems/{model}.log",
    wildcard_constraints:
        model=TRAINING_METHODS["grpo"].tuned_model_pattern,
    conda:
        "../envs/judge.yaml"
    script:
        "../scripts/rl_problems.py"
