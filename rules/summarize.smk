rule summarize:
    input:
        judged_seed_files,
    output:
        metrics=LAYOUT.metrics,
        table=LAYOUT.metrics_table,
        problems=LAYOUT.problem_scores,
    params:
        metrics=named_metrics,
    log:
        LOGS / "summarize/{model}/{benchmark}/{split}.log",
    conda:
        "../envs/judge.yaml"
    script:
        "../scripts/summarize.py"
