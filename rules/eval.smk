rule eval:
    input:
        metrics=PLAN.eval_metrics_files(),
        problems=PLAN.eval_problem_score_files(),
        funnel=PLAN.funnel_tables(),
        built_models=PLAN.base_model_inputs(),
        sft_stats=PLAN.sft_stats_files(),
        tuned=PLAN.training_outputs(),
        training_data=[PLAN.training_data_stats(model) for model in PLAN.tuned_models],
        # each checkpoint's scores on the validation split, and which step each segmented round's output model is
        validation=PLAN.curves.validation_targets(),
        selections=PLAN.curves.selection_files(),
    output:
        summary=LAYOUT.summary,
        table=LAYOUT.summary_table,
        warnings=LAYOUT.warnings,
        flips=report(
            LAYOUT.flips,
            caption="../report/flips.rst",
            category="Evaluation",
            labels={"table": "problems that flipped"},
        ),
    params:
        runs=PLAN.eval_runs(),
        base_model=PLAN.base_model,
        teacher=PLAN.evaluated_teacher,
        rounds=PLAN.method_models("sft"),
        tuned_models={model: PLAN.tuned_parts(model) for model in PLAN.tuned_models},
        method_pairs=PLAN.method_comparisons(),
        sections={method: config[method] for method in config["methods"]},
        warnings=config["warnings"],
        benchmark_judges={name: spec["judge"] for name, spec in config["benchmarks"].items()},
        cost_references=PLAN.cost_references(),
        validation_runs=PLAN.curves.validation_runs(),
        selected_rounds=PLAN.curves.validated_rounds(),
        validation_logs={model: PLAN.curves.validation_job_logs(model) for model in PLAN.curves.validated_rounds()},
    log:
        LOGS / "eval/summary.log",
    conda:
        "../envs/judge.yaml"
    script:
        "../scripts/eval.py"
