rule summarize:
    input:
        judged_seed_files,
    output:
        metrics=METRICS,
        table=METRICS_TABLE,
    log:
        LOGS / "summarize/{model}/{benchmark}/{split}.log",
    conda:
        "../envs/judge.yaml"
    script:
        "../scripts/summarize.py"
