rule prepare_data:
    input:
        benchmark_source_files,
    output:
        LAYOUT.prepared,
    params:
        spec=benchmark_preparing_spec,
    log:
        LOGS / "prepare_data/{benchmark}/{split}.log",
    threads: prepare_data_threads
    wildcard_constraints:
        split=PREPARED_SPLIT,  # synthesized splits are made by rules/synthesis.smk
    conda:
        "../envs/data.yaml"
    script:
        "../scripts/prepare_data.py"
