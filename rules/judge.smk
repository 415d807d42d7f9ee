rule judge:
    input:
        generations=GENERATED,
        done=GENERATED_DONE,
    output:
        JUDGED_CHUNK,
    params:
        judge=config["judge"],
    log:
        LOGS / "judge/{model}/{benchmark}/{split}/rs{seed}/chunk{chunk}-of-{num_chunks}.log",
    conda:
        "../envs/judge.yaml"
    script:
        "../scripts/judge.py"


rule merge_judged:
    input:
        judged_chunks,
    output:
        JUDGED,
    log:
        LOGS / "merge_judged/{model}/{benchmark}/{split}/output-rs{seed}.log",
    conda:
        "../envs/judge.yaml"
    script:
        "../scripts/merge_judged.py"
