# Plots for `snakemake --report report.html`; captions in report/*.rst say what each one shows.


rule plot_pass_at_1:
    input:
        summary=SUMMARY,
    output:
        plot=report(
            PLOT.format(plot="pass_at_1"),
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


rule plot_pass_at_k:
    input:
        summary=SUMMARY,
    output:
        plot=report(
            PLOT.format(plot="pass_at_k"),
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
        eval_judged_files,
    output:
        plot=report(
            PLOT.format(plot="generation_lengths"),
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
        sft_stats_files,
    output:
        plot=report(
            PLOT.format(plot="sft_examples"),
            caption="../report/sft_examples.rst",
            category="SFT data",
            labels={"plot": "SFT examples per round"},
        ),
    params:
        rounds=TUNED_MODELS,
    log:
        LOGS / "report/sft_examples.log",
    conda:
        "../envs/report.yaml"
    script:
        "../scripts/plot_sft_examples.py"


rule plot_synthesis_funnel:
    input:
        funnel=SYNTHESIS_FUNNEL,
    output:
        plot=report(
            PLOT.format(plot="synthesis_funnel"),
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
