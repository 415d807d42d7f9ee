rule prepare_data:
    input:
        benchmark_source_files,
    output:
        PREPARED,
    params:
        spec=benchmark_preparing_spec,
    log:
        LOGS / "prepare_data/{benchmark}/{split}.log",
    threads: prepare_data_threads
    wildcard_constraints:
        split=r"(?!synth-round\d)[A-Za-z0-9._-]+",  # synthesized splits are made by rules/synthesis.smk
    conda:
        "../envs/data.yaml"
    script:
        "../scripts/prepare_data.py"
