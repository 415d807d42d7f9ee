"""Problem synthesis (rules/synthesis.smk): new training problems from the ones a model fails (``problems``),
decontaminated (``contamination_check``), labelled by majority vote (``majority_labels``), counted step by step
(``funnel``)."""
