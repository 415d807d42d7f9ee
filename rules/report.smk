# Plots and samples for `snakemake --report report.html`; captions in report/*.rst say what each one shows.


rule plot_pass_at_1:
    input:
        summary=LAYOUT.summary,
    output:
        plot=report(
            LAYOUT.plot.format(plot="pass_at_1"),
            caption="../report/pass_at_1.rst",
            category="Evaluation",
            labels={"plot": "pass@1 by round"},
        ),
    log:
        LOGS / "report/pass_at_1.log",
    conda:
        "../envs/report.yaml"
    script:
        "../scripts/plot_pass_at_1.py"


rule plot_gains:
    input:
        summary=LAYOUT.summary,
    output:
        plot=report(
            LAYOUT.plot.format(plot="gains"),
            caption="../report/gains.rst",
            category="Evaluation",
            labels={"plot": "gain over the base model"},
        ),
    log:
        LOGS / "report/gains.log",
    conda:
        "../envs/report.yaml"
    script:
        "../scripts/plot_gains.py"


rule plot_pass_at_k:
    input:
        summary=LAYOUT.summary,
    output:
        plot=report(
            LAYOUT.plot.format(plot="pass_at_k"),
            caption="../report/pass_at_k.rst",
            category="Evaluation",
            labels={"plot": "pass@k and majority@k"},
        ),
    log:
        LOGS / "report/pass_at_k.log",
    conda:
        "../envs/report.yaml"
    script:
        "../scripts/plot_pass_at_k.py"


rule plot_generation_lengths:
    input:
        PLAN.eval_judged_files(),
    output:
        plot=report(
            LAYOUT.plot.format(plot="generation_lengths"),
            caption="../report/generation_lengths.rst",
            category="Generations",
            labels={"plot": "generation lengths"},
        ),
    params:
        runs=PLAN.eval_judged_runs(),
    log:
        LOGS / "report/generation_lengths.log",
    conda:
        "../envs/report.yaml"
    script:
        "../scripts/plot_generation_lengths.py"


rule plot_sft_examples:
    input:
        PLAN.sft_stats_files(),
    output:
        plot=report(
            LAYOUT.plot.format(plot="sft_examples"),
            caption="../report/sft_examples.rst",
            category="SFT data",
            labels={"plot": "SFT examples per round"},
        ),
    params:
        rounds=PLAN.method_models("sft"),
    log:
        LOGS / "report/sft_examples.log",
    conda:
        "../envs/report.yaml"
    script:
        "../scripts/plot_sft_examples.py"


rule plot_training_curves:
    input:
        PLAN.training_outputs(),
    output:
        plot=report(
            LAYOUT.plot.format(plot="training_curves"),
            caption="../report/training_curves.rst",
            category="Training",
            labels={"plot": "training curves"},
        ),
    params:
        models=PLAN.tuned_models,
        methods={model: PLAN.tuned_parts(model)[0] for model in PLAN.tuned_models},
    log:
        LOGS / "report/training_curves.log",
    conda:
        "../envs/report.yaml"
    script:
        "../scripts/plot_training_curves.py"


rule plot_validation_curves:
    input:
        summary=LAYOUT.summary,
        tuned=[PLAN.training_output(PLAN.tuned_parts(m)[0]).format(model=m) for m in PLAN.curves.validated_rounds()],
    output:
        plot=report(
            LAYOUT.plot.format(plot="validation_curves"),
            caption="../report/validation_curves.rst",
            category="Training",
            labels={"plot": "validation curves"},
        ),
    params:
        models=PLAN.curves.validated_rounds(),
        methods={model: PLAN.tuned_parts(model)[0] for model in PLAN.curves.validated_rounds()},
    log:
        LOGS / "report/validation_curves.log",
    conda:
        "../envs/report.yaml"
    script:
        "../scripts/plot_validation_curves.py"


rule report_samples:
    input:
        judged=PLAN.eval_judged_files(),
        warnings=LAYOUT.warnings,
    output:
        samples=report(
            LAYOUT.samples,
            caption="../report/samples.rst",
            category="Generations",
            labels={"table": "samples, correct and incorrect"},
        ),
    params:
        runs=PLAN.eval_judged_runs(),
        split=config["eval_split"],
    log:
        LOGS / "report/samples.log",
    conda:
        "../envs/report.yaml"
    script:
        "../scripts/report_samples.py"


# with tools only (the plan's report_plots then lists tool_use, and accuracy_cost where a tool has a price)
if config["tools"] is not None:

    localrules:
        plot_tool_use,
        plot_accuracy_cost,

    rule plot_tool_use:
        input:
            summary=LAYOUT.summary,
        output:
            plot=report(
                LAYOUT.plot.format(plot="tool_use"),
                caption="../report/tool_use.rst",
                category="Evaluation",
                labels={"plot": "tool use"},
            ),
        log:
            LOGS / "report/tool_use.log",
        conda:
            "../envs/report.yaml"
        script:
            "../scripts/plot_tool_use.py"

    rule plot_accuracy_cost:
        input:
            summary=LAYOUT.summary,
        output:
            plot=report(
                LAYOUT.plot.format(plot="accuracy_cost"),
                caption="../report/accuracy_cost.rst",
                category="Evaluation",
                labels={"plot": "accuracy against cost"},
            ),
        log:
            LOGS / "report/accuracy_cost.log",
        conda:
            "../envs/report.yaml"
        script:
            "../scripts/plot_accuracy_cost.py"
