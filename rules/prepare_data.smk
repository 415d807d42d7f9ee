rule prepare_data:
    output:
        PREPARED,
    params:
        spec=lambda wildcards: config["benchmarks"][wildcards.benchmark],
    log:
        LOGS / "prepare_data/{benchmark}/{split}.log",
    conda:
        "../envs/data.yaml"
    script:
        "../scripts/prepare_data.py"
