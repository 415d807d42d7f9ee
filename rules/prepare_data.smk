rule prepare_data:
    input:
        lambda w: local_source_files(config["benchmarks"][w.benchmark], w.split),
    output:
        LAYOUT.prepared,
    params:
        # what decides a benchmark's prepared rows: its spec without how it is asked and judged
        spec=lambda w: preparing_spec(config["benchmarks"][w.benchmark]),
    log:
        LOGS / "prepare_data/{benchmark}/{split}.log",
    # a code benchmark's preparing runs its reference solutions, as many at a time as a judge job; others: 1
    threads: lambda w: judge_threads() if is_code_benchmark(config, w.benchmark) else 1
    wildcard_constraints:
        split=PREPARED_SPLIT,  # synthesized splits are made by rules/synthesis.smk
    conda:
        "../envs/data.yaml"
    script:
        "../scripts/prepare_data.py"
