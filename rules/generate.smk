# The settings a model's generate jobs on one split read (snakeskills.plan.run.Plan.generation_settings).
rule generation_settings:
    input:
        split=LAYOUT.prepared,
        model=generation_model_inputs,
    output:
        LAYOUT.generation_settings,
    params:
        settings=generation_settings,
    log:
        LOGS / "settings/generate/{model}/{benchmark}/{split}.log",
    conda:
        "../envs/data.yaml"
    script:
        "../scripts/write_settings.py"


# A shell: rule: the bulk of a large run's jobs, which Snakemake plans for less than script: jobs.
# Its one input, the settings file, names the prepared split and the model and carries the dependency
# on both; the command passes only paths, the job's wildcards ("name=value,...") and threads, quoted.
rule generate:
    input:
        LAYOUT.generation_settings,
    output:
        LAYOUT.generated,
    log:
        LOGS / "generate/{model}/{benchmark}/{split}/rs{seed}/chunk{chunk}-of-{num_chunks}.log",
    threads: 1
    resources:
        gpu=generation_job_gpus,
        mem_mb=generation_job_memory,
        runtime=generation_job_runtime,
    conda:
        generation_job_env
    shell:
        "\"$SNAKESKILLS_JOB_PYTHON\" -m snakeskills.cli generate --wildcards {wildcards:q} --settings {input:q}"
        " --threads {threads} --gpus {resources.gpu} --output {output:q} --log {log:q}"
