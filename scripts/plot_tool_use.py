from snakeskills.io import read_json
from snakeskills.job import script_logging
from snakeskills.results.report import plot_tool_use, tool_use_points

with script_logging(snakemake.log[0]) as logger:
    summary = read_json(snakemake.input.summary)
    plot_tool_use(summary, snakemake.output.plot)
    for benchmark, models in tool_use_points(summary).items():
        for model, block in models:
            logger.info(
                "%s on %s: %.2f calls per sample, %s of samples call a tool; correct with a call %s, without %s",
                model,
                benchmark,
                block["calls_per_sample"],
                *(
                    "-" if block[key] is None else f"{block[key]:.1f}%"
                    for key in ("share_calling", "accuracy_with_call", "accuracy_without_call")
                ),
            )
