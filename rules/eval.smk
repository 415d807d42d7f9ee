rule eval:
    input:
        metrics=eval_metrics_files,
        funnel=PLAN.synthesis_funnel_tables(),
        built_models=PLAN.base_model_inputs(),
    output:
        summary=SUMMARY,
        table=SUMMARY_TABLE,
    params:
        runs=PLAN.eval_runs(),
        base_model=BASE_MODEL,
        teacher=EVALUATED_TEACHER,
    log:
        LOGS / "eval/summary.log",
    conda:
        "../envs/judge.yaml"
    script:
        "../scripts/eval.py"
