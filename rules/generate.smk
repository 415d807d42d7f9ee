rule generation_settings:
    input:
        split=PREPARED,
        model=generation_model_inputs,
    output:
        GENERATION_SETTINGS,
    params:
        split=lambda wildcards, input: input.split,
        model=generation_model_config,
        model_path=generation_model_path,
        adapter_path=generation_adapter_path,
        generation=generation_config,
        prompt=generation_prompt,
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
        GENERATION_SETTINGS,
    output:
        GENERATED,
    log:
        LOGS / "generate/{model}/{benchmark}/{split}/rs{seed}/chunk{chunk}-of-{num_chunks}.log",
    threads: 1
    resources:
        gpu=generation_job_gpus,
    conda:
        generation_job_env
    shell:
        "\"$SNAKESKILLS_JOB_PYTHON\" -m snakeskills.cli generate --wildcards {wildcards:q} --settings {input:q}"
        " --threads {threads} --gpus {resources.gpu} --output {output:q} --log {log:q}"
