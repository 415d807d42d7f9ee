# Problem synthesis (config key synthesis; snakeskills/synthesis/problems.py), included when synthesis is on: before round r,
# a writer writes new problems from train problems, which are parsed, filtered and decontaminated, answered by a
# solver through the generate rule, and labelled by majority vote into the split LAYOUT.synthesized. What each step
# reads and runs with is SYNTHESIS's (snakeskills.plan.synthesis.SynthesisPlan).


localrules:
    synthesis_funnel,
    plot_synthesis_funnel,


rule synthesis_sources:
    input:
        train=lambda w: LAYOUT.prepared.format(benchmark=w.benchmark, split=config["train_split"]),
        judged=lambda w: SYNTHESIS.feedback_files(int(w.round), w.benchmark),
    output:
        LAYOUT.synthesis_sources,
    params:
        sources=SYNTHESIS.section["sources"],
        seed=SYNTHESIS.section["seed"],
    log:
        LOGS / "synthesis/round{round}/{benchmark}/sources.log",
    conda:
        "../envs/judge.yaml"
    script:
        "../scripts/synthesis_sources.py"


rule synthesis_problems:
    input:
        generated=lambda w: SYNTHESIS.writer_files(int(w.round), w.benchmark),
        train=SYNTHESIS.train_references,
        eval=SYNTHESIS.eval_references,
    output:
        problems=SYNTHESIS.filtered,
        dropped=LAYOUT.synthesis_dropped,
        stats=LAYOUT.synthesis_filter_stats,
    params:
        filter=SYNTHESIS.section["filter"],
        decontamination=SYNTHESIS.section["decontamination"],
        writer=lambda w: SYNTHESIS.writer(int(w.round)),
        id_prefix=lambda w: SYNTHESIS.split_name(int(w.round)),
    log:
        LOGS / "synthesis/round{round}/{benchmark}/problems.log",
    conda:
        "../envs/judge.yaml"
    script:
        "../scripts/synthesis_problems.py"


if SYNTHESIS.llm_check:

    localrules:
        contamination_check_settings,

    rule contamination_check_settings:
        output:
            LAYOUT.contamination_check_settings,
        params:
            settings=SYNTHESIS.contamination_check_settings(),
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
            settings=LAYOUT.contamination_check_settings,
            candidates=LAYOUT.synthesis_candidates,
            eval=SYNTHESIS.eval_references,
        output:
            problems=LAYOUT.synthesis_problems,
            checked=LAYOUT.synthesis_llm_checked,
            stats=LAYOUT.synthesis_llm_check_stats,
        log:
            LOGS / "synthesis/round{round}/{benchmark}/llm-check.log",
        threads: 1
        resources:
            gpu=lambda w: SYNTHESIS.contamination_check_gpus(gpus_available(), local_run=local_run()),
            mem_mb=SYNTHESIS.contamination_check_resources()["mem_mb"],
            runtime=SYNTHESIS.contamination_check_resources()["runtime"],
        conda:
            SYNTHESIS.contamination_check_env()
        shell:
            "\"$SNAKESKILLS_JOB_PYTHON\" -m snakeskills.cli llm-contamination-check --settings {input.settings:q}"
            " --threads {threads} --gpus {resources.gpu} --candidates {input.candidates:q} --eval {input.eval:q}"
            " --output {output.problems:q} --checked {output.checked:q} --stats {output.stats:q} --log {log:q}"


rule synthesis_label:
    input:
        problems=LAYOUT.synthesis_problems,
        solved=lambda w: SYNTHESIS.solver_files(int(w.round), w.benchmark),
    output:
        labelled=LAYOUT.synthesized,
        judged=LAYOUT.synthesis_judged,
        stats=LAYOUT.synthesis_label_stats,
    params:
        judge=rule_judge_config,
        min_agreement=SYNTHESIS.section["label"]["min_agreement"],
        exact_answer=lambda w: SYNTHESIS.exact_answer(w.benchmark),
        solver=lambda w: SYNTHESIS.solver(int(w.round)),
        chunks_per_seed=config["num_chunks"],
    log:
        LOGS / "synthesis/round{round}/{benchmark}/label.log",
    threads: judge_threads()
    conda:
        "../envs/judge.yaml"
    script:
        "../scripts/synthesis_label.py"


rule synthesis_funnel:
    input:
        **SYNTHESIS.stats_files(),
    output:
        funnel=LAYOUT.synthesis_funnel,
        table=LAYOUT.synthesis_funnel_table,
    params:
        runs=SYNTHESIS.runs,
        rounds=SYNTHESIS.rounds,
    log:
        LOGS / "synthesis/funnel.log",
    conda:
        "../envs/judge.yaml"
    script:
        "../scripts/synthesis_funnel.py"


rule plot_synthesis_funnel:
    input:
        funnel=LAYOUT.synthesis_funnel,
    output:
        plot=report(
            LAYOUT.plot.format(plot="synthesis_funnel"),
            caption="../report/synthesis_funnel.rst",
            category="SFT data",
            labels={"plot": "synthesized problems per round"},
        ),
    log:
        LOGS / "report/synthesis_funnel.log",
    conda:
        "../envs/report.yaml"
    script:
        "../scripts/plot_synthesis_funnel.py"
