rule eval:
    input:
        metrics=PLAN.eval_metrics_files(),
        problems=PLAN.eval_problem_score_files(),
        funnel=PLAN.funnel_tables(),
        built_models=PLAN.base_model_inputs(),
        sft_stats=PLAN.sft_stats_files(),
    output:
        summary=LAYOUT.summary,
        table=LAYOUT.summary_table,
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
        rounds=PLAN.tuned_models,
        training=config["sft"]["training"],
        warnings=config["warnings"],
    log:
        LOGS / "eval/summary.log",
    conda:
        "../envs/judge.yaml"
    script:
        "../scripts/eval.py"
