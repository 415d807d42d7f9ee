# Problem synthesis (config key synthesis; snakeskills/synthesis.py): before round r, a writer writes new problems
# from train problems, which are parsed, filtered and decontaminated, answered by a solver through the generate
# rule, and labelled by majority vote into data/{benchmark}/synth-round{r}.jsonl.


rule synthesis_sources:
    input:
        train=synthesis_train_split,
        judged=synthesis_feedback_files,
    output:
        SYNTHESIS_SOURCES,
    params:
        sources=config["synthesis"]["sources"] if config["synthesis"] else None,
        seed=config["synthesis"]["seed"] if config["synthesis"] else None,
    log:
        LOGS / "synthesis/round{round}/{benchmark}/sources.log",
    conda:
        "../envs/judge.yaml"
    script:
        "../scripts/synthesis_sources.py"


rule synthesis_problems:
    input:
        generated=synthesis_writer_files,
        train=SYNTHESIS_REFERENCES["train"],
        eval=SYNTHESIS_REFERENCES["eval"],
    output:
        problems=SYNTHESIS_FILTERED,
        dropped=SYNTHESIS_DROPPED,
        stats=SYNTHESIS_FILTER_STATS,
    params:
        filter=config["synthesis"]["filter"] if config["synthesis"] else None,
        decontamination=config["synthesis"]["decontamination"] if config["synthesis"] else None,
        writer=synthesis_writer,
    log:
        LOGS / "synthesis/round{round}/{benchmark}/problems.log",
    conda:
        "../envs/judge.yaml"
    script:
        "../scripts/synthesis_problems.py"


if PLAN.synthesis_llm_check():

    localrules:
        contamination_check_settings,

    rule contamination_check_settings:
        output:
            CONTAMINATION_CHECK_SETTINGS,
        params:
            llm=PLAN.contamination_checker(),
            prompt=CONTAMINATION_PROMPT,
        log:
            LOGS / "settings/contamination_check.log",
        conda:
            "../envs/data.yaml"
        script:
            "../scripts/write_settings.py"

    # the checker (judge.llm or the teacher) reads each problem the n-gram check kept beside its most similar eval
    # problem (shell: as llm_judge, a model-loading job run by snakeskills.cli)
    rule synthesis_llm_check:
        input:
            settings=CONTAMINATION_CHECK_SETTINGS,
            candidates=SYNTHESIS_CANDIDATES,
            eval=SYNTHESIS_REFERENCES["eval"],
        output:
            problems=SYNTHESIS_PROBLEMS,
            checked=SYNTHESIS_LLM_CHECKED,
            stats=SYNTHESIS_LLM_CHECK_STATS,
        log:
            LOGS / "synthesis/round{round}/{benchmark}/llm-check.log",
        threads: 1
        resources:
            gpu=contamination_check_gpus,
        conda:
            CONTAMINATION_CHECK_ENV
        shell:
            "\"$SNAKESKILLS_JOB_PYTHON\" -m snakeskills.cli llm-contamination-check --settings {input.settings:q}"
            " --threads {threads} --gpus {resources.gpu} --candidates {input.candidates:q} --eval {input.eval:q}"
            " --output {output.problems:q} --checked {output.checked:q} --stats {output.stats:q} --log {log:q}"


rule synthesis_label:
    input:
        problems=SYNTHESIS_PROBLEMS,
        solved=synthesis_solver_files,
    output:
        labelled=SYNTHESIZED,
        judged=SYNTHESIS_JUDGED,
        stats=SYNTHESIS_LABEL_STATS,
    params:
        judge=rule_judge_config,
        min_agreement=config["synthesis"]["label"]["min_agreement"] if config["synthesis"] else None,
        exact_answer=synthesis_exact_answer,
        solver=synthesis_solver,
    log:
        LOGS / "synthesis/round{round}/{benchmark}/label.log",
    threads: judge_threads()
    conda:
        "../envs/judge.yaml"
    script:
        "../scripts/synthesis_label.py"


rule synthesis_funnel:
    input:
        filter=SYNTHESIS_STATS["filter"],
        label=SYNTHESIS_STATS["label"],
        sft=SYNTHESIS_STATS["sft"],
        llm_check=SYNTHESIS_STATS["llm_check"],
    output:
        funnel=SYNTHESIS_FUNNEL,
        table=SYNTHESIS_FUNNEL_TABLE,
    params:
        runs=SYNTHESIS_RUNS,
        rounds=PLAN.synthesis_rounds(),
    log:
        LOGS / "synthesis/funnel.log",
    conda:
        "../envs/judge.yaml"
    script:
        "../scripts/synthesis_funnel.py"
