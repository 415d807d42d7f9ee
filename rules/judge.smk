# shell: rules for the per-chunk jobs, as generate (rules/generate.smk); the rule-based judge's few
# settings go as one quoted JSON argument (a JobSettings param, also the params rerun trigger).
rule judge:
    input:
        LAYOUT.generated,
    output:
        LAYOUT.judged_chunk,
    params:
        judge=rule_judge_config,
    log:
        LAYOUT.chunk_log("judge"),
    threads: judge_threads()
    conda:
        "../envs/judge.yaml"
    shell:
        "\"$SNAKESKILLS_JOB_PYTHON\" -m snakeskills.cli judge --settings-json {params.judge:q} --threads {threads}"
        " --input {input:q} --output {output:q} --log {log:q}"


rule llm_judge_settings:
    output:
        LAYOUT.llm_judge_settings,
    params:
        settings=PLAN.llm_judge_settings(),
    log:
        LOGS / "settings/llm_judge.log",
    conda:
        "../envs/data.yaml"
    script:
        "../scripts/write_settings.py"


rule llm_judge:
    input:
        settings=LAYOUT.llm_judge_settings,
        judged=LAYOUT.judged_chunk,
    output:
        LAYOUT.llm_judged_chunk,
    log:
        LAYOUT.chunk_log("llm_judge"),
    threads: 1
    resources:
        gpu=lambda w: PLAN.llm_judge_gpus(gpus_available(), local_run=local_run()),
        mem_mb=PLAN.llm_judge_resources()["mem_mb"],
        runtime=PLAN.llm_judge_resources()["runtime"],
    conda:
        PLAN.llm_judge_env()
    shell:
        "\"$SNAKESKILLS_JOB_PYTHON\" -m snakeskills.cli llm-judge --settings {input.settings:q} --threads {threads}"
        " --gpus {resources.gpu} --input {input.judged:q} --output {output:q} --log {log:q}"


# chunks merged into one seed file: LLM-judged ones where the LLM judge reads the benchmark
rule merge_judged:
    input:
        lambda w: PLAN.judged_chunks(w.model, w.benchmark, w.split, w.seed),
    output:
        LAYOUT.judged,
    log:
        LOGS / "merge_judged/{model}/{benchmark}/{split}/output-rs{seed}.log",
    conda:
        "../envs/judge.yaml"
    script:
        "../scripts/merge_judged.py"
