from snakeskills.io import read_jsonl
from snakeskills.job import script_logging
from snakeskills.plan.training import with_save_timer
from snakeskills.training.tiny_model import build_and_bootstrap

with script_logging(snakemake.log[0]) as logger:
    tiny = snakemake.params.tiny_model
    metrics = build_and_bootstrap(
        bootstrap_records=read_jsonl(snakemake.input.bootstrap),
        validation_records=read_jsonl(snakemake.input.validation),
        prompt_config=snakemake.params.prompt,
        completion_template=tiny["completion"],
        output_dir=snakemake.output.checkpoint,
        architecture=tiny["architecture"],
        training=with_save_timer(tiny["training"], snakemake.config["tiny_model"]),
        stop_at_accuracy=tiny["stop_at_accuracy"],
        check_every_steps=tiny["check_every_steps"],
        seed=tiny["seed"],
        threads=snakemake.threads,
        tool_completion=tiny.get("tool_completion"),
        tool_share=tiny.get("tool_share", 0.0),
        tools=tiny.get("tools"),
    )
    logger.info("bootstrap done: %s", metrics)
