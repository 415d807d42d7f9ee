"""The generate stage (rules/generate.smk): a model job's settings and resumable output (``model_job``,
``resumable``), and one chunk x seed of samples (``generate``)."""
