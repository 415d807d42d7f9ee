rule build_tiny_model:
    input:
        unpack(tiny_model_inputs),
    output:
        checkpoint=directory(CHECKPOINT),
    params:
        tiny_model=config.get("tiny_model"),
        prompt=TINY_MODEL_PROMPT,
    log:
        LOGS / "build_tiny_model/{model}.log",
    wildcard_constraints:
        model=re.escape(BASE_MODEL),
    threads: workflow.cores
    conda:
        "../envs/training.yaml"
    script:
        "../scripts/build_tiny_model.py"
