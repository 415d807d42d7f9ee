from snakeskills.io import read_jsonl
from snakeskills.job import script_logging
from snakeskills.plan.training import with_save_timer
from snakeskills.settings.models import TinyModel
from snakeskills.training.tiny_bootstrap import build_and_bootstrap

with script_logging(snakemake.log[0]) as logger:
    tiny = TinyModel.from_dict(snakemake.params.tiny_model, "tiny_model")
    metrics = build_and_bootstrap(
        bootstrap_records=read_jsonl(snakemake.input.bootstrap),
        validation_records=read_jsonl(snakemake.input.validation),
        prompt_config=snakemake.params.prompt,
        completion_template=tiny.completion,
        output_dir=snakemake.output.checkpoint,
        architecture=tiny.architecture,
        training=with_save_timer(tiny.training, snakemake.config, "tiny_model"),
        stop_at_accuracy=tiny.stop_at_accuracy,
        check_every_steps=tiny.check_every_steps,
        seed=tiny.seed,
        threads=snakemake.threads,
        tool_completion=tiny.tool_completion,
        tool_share=tiny.tool_share or 0.0,
        tools=tiny.tools,
    )
    logger.info("bootstrap done: %s", metrics)
