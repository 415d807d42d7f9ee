# The settings a model's generate jobs on one split read (snakeskills.plan.run.Plan.generation_settings).
rule generation_settings:
    input:
        split=LAYOUT.prepared,
        model=lambda w: PLAN.generation_model_inputs(w.model),
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
        LAYOUT.chunk_log("generate"),
    threads: 1
    resources:
        gpu=lambda w: PLAN.generation_gpus(w.model, w.split, gpus_available(), local_run=local_run()),
        # one at a time in a SLURM group job, whose GPUs they share (profiles/slurm: generate_slot=1)
        generate_slot=1,
        mem_mb=lambda w: PLAN.generation_resources(w.model, w.split)["mem_mb"],
        runtime=lambda w: PLAN.generation_resources(w.model, w.split)["runtime"],
    conda:
        lambda w: PLAN.generation_env(w.model, w.split)
    shell:
        "\"$SNAKESKILLS_JOB_PYTHON\" -m snakeskills.cli generate --wildcards {wildcards:q} --settings {input:q}"
        " --threads {threads} --gpus {resources.gpu} --output {output:q} --log {log:q}"
