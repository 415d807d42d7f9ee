from snakeskills.io import read_json
from snakeskills.job import script_logging
from snakeskills.results.samples import choose_samples, labelled_files, write_samples_html

# the choice is samples.PER_VERDICT of each verdict, drawn with samples.CHOICE_SEED, as `snakeskills samples` draws
with script_logging(snakemake.log[0]) as logger:
    files = labelled_files(list(snakemake.input.judged), snakemake.params.runs, snakemake.params.split)
    groups = choose_samples(files)
    write_samples_html(groups, snakemake.output.samples, warnings=read_json(snakemake.input.warnings))
    logger.info("%d samples of %d (model, benchmark) pairs", sum(len(group.samples) for group in groups), len(groups))
