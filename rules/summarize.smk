rule summarize:
    input:
        lambda w: PLAN.judged_seed_files(w.model, w.benchmark, w.split),
    output:
        metrics=LAYOUT.metrics,
        table=LAYOUT.metrics_table,
        problems=LAYOUT.problem_scores,
    params:
        metrics=lambda w: benchmark_metrics(config, w.benchmark),
    log:
        LOGS / "summarize/{model}/{benchmark}/{split}.log",
    conda:
        "../envs/judge.yaml"
    script:
        "../scripts/summarize.py"
