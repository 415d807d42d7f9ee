# snakeskills: prepare_data -> generate (chunk x seed) -> judge -> summarize -> sft -> eval
# `snakemake -c all` runs the embedded default (config/config.yaml) end to end.
# A config given with --configfile is the whole config: the schema's defaults fill what it leaves out,
# and the embedded default is not loaded at all (Snakemake would deep-merge a user's file on top of it).


import os


if not workflow.overwrite_configfiles:

    configfile: os.path.join(workflow.basedir, "config", "config.yaml")



report: "report/workflow.rst"


include: "rules/common.smk"
include: "rules/prepare_data.smk"


if config["model"]["build_tiny"]:

    include: "rules/model.smk"


include: "rules/generate.smk"
include: "rules/judge.smk"
include: "rules/summarize.smk"


if SYNTHESIS is not None:

    include: "rules/synthesis.smk"


include: "rules/sft.smk"


# each other training method's data rule (rules/<method>.smk), then one training rule per method
for method in config["methods"]:
    if method != "sft":

        include: f"rules/{method}.smk"


include: "rules/train.smk"
include: "rules/eval.smk"
include: "rules/report.smk"


# Cheap aggregation rules and the settings files: on a cluster (profiles/slurm) they run in the main
# Snakemake process instead of being submitted as jobs.
localrules:
    all,
    generation_settings,
    llm_judge_settings,
    merge_judged,
    eval,
    plot_pass_at_1,
    plot_gains,
    plot_pass_at_k,
    plot_generation_lengths,
    plot_sft_examples,
    plot_training_curves,
    plot_validation_curves,
    report_samples,


rule all:
    input:
        PLAN.targets(),
    default_target: True


onstart:
    forward_interruptions_to_jobs()


onsuccess:
    if Path(LAYOUT.summary_table).exists():
        print(f"\n{Path(LAYOUT.summary_table).read_text()}", flush=True)


# after a failed or interrupted run (Ctrl-C): what was kept and how to go on, below Snakemake's report
onerror:
    print(
        "\nsnakeskills: the run stopped (a failed job, or Ctrl-C). Finished jobs are kept, and so is the progress"
        " of unfinished generate and judge jobs: fix what a failed job's log says (above), then run the same"
        " command again to resume; -n shows what is left.",
        flush=True,
    )
