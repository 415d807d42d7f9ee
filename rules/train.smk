# One training rule per method the run lists (config key methods; snakeskills/training/methods.py is the table),
# named after it: round r trains on its data rule's output (sft_data, preference_pairs, kto_samples, rl_problems)
# with the method's trainer. <method>.method lora writes an adapter (models/<round>/adapter), full a checkpoint.
for method in PLAN.methods:

    rule:
        name:
            method
        input:
            data=getattr(LAYOUT, TRAINING_METHODS[method].data),  # the method's data rule's output
            model=PLAN.base_model_inputs(),
            init=lambda w: PLAN.training_init(w.model),  # init continue: the same method's previous round's output
        output:
            tuned=directory(PLAN.training_output(method)),
        params:
            method=method,
            model_path=lambda w: PLAN.base_model_folder(),
            model=config["model"],
            settings=training_settings,
            judging=training_judging,
            chat_template=config["prompt"]["chat_template"],
            chat_template_kwargs=config["prompt"]["chat_template_kwargs"],
        log:
            LOGS / f"{method}/{{model}}.log",
        wildcard_constraints:
            model=TRAINING_METHODS[method].tuned_model_pattern,
        threads: workflow.cores
        resources:
            gpu=training_job_gpus,
            mem_mb=PLAN.training_resources(method)["mem_mb"],
            runtime=PLAN.training_resources(method)["runtime"],
            **TRAINING_NODES,
        conda:
            "../envs/training.yaml"
        script:
            "../scripts/train.py"
