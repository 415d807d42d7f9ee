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
        problems=SYNTHESIS_PROBLEMS,
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


rule synthesis_label:
    input:
        problems=SYNTHESIS_PROBLEMS,
        solved=synthesis_solver_files,
    output:
        labelled=SYNTHESIZED,
        judged=SYNTHESIS_JUDGED,
        stats=SYNTHESIS_LABEL_STATS,
    params:
        judge=rule_judge_config(),
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
