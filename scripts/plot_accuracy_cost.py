from snakeskills.io import read_json
from snakeskills.job import script_logging
from snakeskills.results.cost_metrics import accuracy_cost_points, format_frontier, format_price, pareto_frontier
from snakeskills.results.report import plot_accuracy_cost

with script_logging(snakemake.log[0]) as logger:
    summary = read_json(snakemake.input.summary)
    plot_accuracy_cost(summary, snakemake.output.plot)
    for benchmark, models in accuracy_cost_points(summary).items():
        for model, price, accuracy in models:
            logger.info("%s on %s: pass@1 %.2f%% at %s per problem", model, benchmark, accuracy, format_price(price))
        logger.info("frontier on %s (price -> accuracy): %s", benchmark, format_frontier(pareto_frontier(models)))
