rule summarize:
    input:
        judged_seed_files,
    output:
        metrics=LAYOUT.metrics,
        table=LAYOUT.metrics_table,
    params:
        metrics=named_metrics,
    log:
        LOGS / "summarize/{model}/{benchmark}/{split}.log",
    conda:
        "../envs/judge.yaml"
    script:
        "../scripts/summarize.py"
