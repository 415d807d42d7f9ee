# The embedded default's base model (model.build_tiny): a tiny Llama bootstrapped on its benchmark's problems.
rule build_tiny_model:
    input:
        **PLAN.tiny_model_inputs(),
    output:
        checkpoint=directory(LAYOUT.checkpoint),
    params:
        tiny_model=PLAN.tiny_model_settings(),
        prompt=resolve_prompt(PLAN.tiny_model_prompt()),
    log:
        LOGS / "build_tiny_model/{model}.log",
    wildcard_constraints:
        model=re.escape(PLAN.base_model),
    threads: workflow.cores
    conda:
        "../envs/training.yaml"
    script:
        "../scripts/build_tiny_model.py"
