"""The plan: config checks and every decision the workflow's DAG is built from, as plain functions and objects
testable without Snakemake (tests/unit/test_plan.py). ``rules/common.smk`` calls them; mistakes raise
``SnakeskillsError`` naming the config key, before any job runs. One module per concept:

- ``config``: loading the config: presets, the JSON schema and its defaults, a violation in one or two lines;
- ``sections``: what the config's sections mean for one benchmark (its prompt, its judge settings);
- ``checks``: cross-key checks the schema cannot express (``values``: checks of one value, shared);
- ``folders``: what must exist on disk first (local model folders, a writable results folder);
- ``resources``: the training job's GPUs and processes;
- ``layout``: every file the workflow writes, and the synthesized splits' names;
- ``run``: ``Plan``, one run's decisions; each optional feature its own plan object, absent when off: ``teacher``,
  ``synthesis``, ``training`` (one ``TrainingPlan`` per method in ``methods``, from ``training.methods``);
- ``reference``: docs/configuration.md, written from the schema."""
