"""The summarize, eval and report stages (rules/summarize.smk, eval.smk, report.smk): metrics of one benchmark's
judged seeds, the comparison of every model (paired intervals, named metrics, training costs, warnings) and the
report's plots."""
