# One training rule per method the run lists (config key methods; snakeskills/training/methods.py is the table),
# named after it: round r trains on its data rule's output (sft_data, preference_pairs, kto_samples, rl_problems)
# with the method's trainer. <method>.method lora writes an adapter (models/<round>/adapter), full a checkpoint.
# With <method>.training.eval_every_steps the rule trains a round in segments instead, one job per checkpoint
# (models/<round>-step<N>, each resuming the previous one's trainer state), evaluated on validation_split by the
# ordinary generate/judge/summarize jobs; select_<method> then makes the round's output from one of them
# (<method>.select: last, or best_validation). snakeskills/plan/validation.py has the plan.
for method in PLAN.methods:
    segmented = PLAN.curves.segmented(method)

    rule:
        name:
            method
        input:
            data=lambda w: PLAN.training_data(w.model),  # the method's data rule's output
            model=PLAN.base_model_inputs(),
            init=lambda w: PLAN.training_init(w.model),  # init continue: the same method's previous round's output
            resume=lambda w: PLAN.curves.segment_resume(w.model) if segmented_model(w.model) else [],
        output:
            tuned=directory(PLAN.training_output(method)),
            **({"state": temp(directory(LAYOUT.trainer_state))} if segmented else {}),
        params:
            method=method,
            model_path=lambda w: PLAN.base_model_folder(),
            model=config["model"],
            settings=training_settings,
            judging=training_judging,
            chat_template=config["prompt"]["chat_template"],
            chat_template_kwargs=config["prompt"]["chat_template_kwargs"],
            # a segment: the step it stops at (a round trained in one job has no such param)
            **({"stop_at_step": lambda w: PLAN.curves.checkpoint_step(w.model)} if segmented else {}),
        log:
            LOGS / f"{method}/{{model}}.log",
        wildcard_constraints:
            model=(
                TRAINING_METHODS[method].checkpoint_model_pattern
                if segmented
                else TRAINING_METHODS[method].tuned_model_pattern
            ),
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

    if segmented:

        rule:
            name:
                f"select_{method}"
            input:
                unpack(lambda w: PLAN.curves.selection_inputs(w.model)),
            output:
                tuned=directory(PLAN.training_output(method)),
                selection=LAYOUT.selection,
            params:
                select=config[method]["select"],
                steps=lambda w: [PLAN.curves.checkpoint_step(c) for c in PLAN.curves.round_checkpoints(w.model)],
                benchmarks=PLAN.benchmarks,
            log:
                LOGS / f"select_{method}/{{model}}.log",
            wildcard_constraints:
                model=TRAINING_METHODS[method].tuned_model_pattern,
            conda:
                "../envs/judge.yaml"
            script:
                "../scripts/select_checkpoint.py"
