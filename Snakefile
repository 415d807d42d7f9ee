# snakeskills: prepare_data -> generate (chunk x seed) -> judge -> summarize -> sft -> eval
# `snakemake -c all` runs the embedded default (config/config.yaml) end to end.


configfile: "config/config.yaml"


include: "rules/common.smk"
include: "rules/prepare_data.smk"
include: "rules/model.smk"
include: "rules/generate.smk"
include: "rules/judge.smk"
include: "rules/summarize.smk"
include: "rules/sft.smk"
include: "rules/eval.smk"


rule all:
    input:
        all_targets(),
    default_target: True


onsuccess:
    print_comparison()
