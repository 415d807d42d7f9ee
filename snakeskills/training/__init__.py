"""The training stages (rules/sft.smk, dpo.smk, kto.smk, grpo.smk, train.smk): the one table of training methods
(``methods``), what every trainer shares (``trainer``, ``checkpoints``), each method's data and trainer, and the
embedded default's tiny model bootstrap-trained (``tiny_bootstrap``), and the models trained once per machine
(``arithmetic_expert``)."""
