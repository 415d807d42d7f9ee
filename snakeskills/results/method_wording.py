"""The words the report and the warnings use for each training method, by its name in ``training.methods``
(``TRAINING_METHODS``): what its records column in the cost table holds (``RECORDS_MEANING``) and how to get more
training data (``MORE_DATA``); the methods table keeps only the facts."""

from __future__ import annotations

# how each records column counts, after what it holds: the records drawn, not those in the round's data
TRAINED_SHARE = (
    "the distinct ones the trainer drew: all of the round's data once it made a whole pass over it; for a fraction "
    "of a pass (num_epochs below 1, or max_steps ending it first) that fraction of them, to within a batch (the "
    "trainer's epoch x the data's records); its stats.json counts the data"
)

# what a method's records column holds, explained under the cost table (methods that keep no records: none)
RECORDS_MEANING = {
    "sft": f"judged-correct answers SFT trained on, each with its prompt; {TRAINED_SHARE}",
    "dpo": f"(correct, incorrect) answer pairs of one prompt DPO trained on; {TRAINED_SHARE}",
    "kto": "judged answers KTO trained on, each with its prompt, desirable when correct and undesirable when "
    f"not; {TRAINED_SHARE}",
}

# how to get more training data: the advice of a warning on too few records or problems (every config key it names
# is in config/schema.yaml: tests/unit/test_run_warnings.py)
MORE_DATA = {
    "sft": "sample more seeds per train problem (train_num_seeds; teacher.train_num_seeds where a teacher writes "
    "the data) or add train problems (train_benchmarks)",
    "dpo": "a pair needs a problem with both a correct and an incorrect sample: sample more seeds per train "
    "problem (train_num_seeds), or widen dpo.pass_rate",
    "kto": "sample more seeds per train problem (train_num_seeds), or widen kto.pass_rate",
    "grpo": "a problem needs a pass rate inside grpo.pass_rate: widen grpo.pass_rate, or sample more seeds per "
    "train problem (train_num_seeds)",
}
