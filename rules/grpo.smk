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
        model=TUNED_MODEL_PATTERN["grpo"],
    conda:
        "../envs/judge.yaml"
    script:
        "../scripts/rl_problems.py"


# grpo.method lora writes an adapter (models/grpo-round{r}/adapter), full a checkpoint
rule grpo:
    input:
        problems=LAYOUT.rl_problems,
        model=PLAN.base_model_inputs(),
        init=training_init,
    output:
        tuned=directory(PLAN.training_output("grpo")),
    params:
        model_path=base_model_path,
        model=config["model"],
        grpo=training_settings,
        judges=grpo_judges,
        reasoning=student_reasoning,
        chat_template=config["prompt"]["chat_template"],
        chat_template_kwargs=config["prompt"]["chat_template_kwargs"],
    log:
        LOGS / "grpo/{model}.log",
    wildcard_constraints:
        model=TUNED_MODEL_PATTERN["grpo"],
    threads: workflow.cores
    resources:
        gpu=training_job_gpus,
        mem_mb=PLAN.training_resources("grpo")["mem_mb"],
        runtime=PLAN.training_resources("grpo")["runtime"],
    conda:
        "../envs/training.yaml"
    script:
        "../scripts/grpo.py"
