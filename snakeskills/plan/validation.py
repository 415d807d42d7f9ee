"""Learning curves: a round whose method sets ``<method>.training.eval_every_steps`` is trained in segments, one job
each, every segment resuming the one before from its trainer state; each segment's weights are a model of their own
(``<round>-step<N>``, ``TrainingMethod.checkpoint_model_name``) that the ordinary generate/judge/summarize jobs
evaluate on ``validation_split``. The round's output model is then chosen among them (``<method>.select``): its last
step's, or the best on validation. Here: which steps a round stops at, and the checks of the keys."""

from __future__ import annotations

from snakeskills.errors import SnakeskillsError

SELECT = ("last", "best_validation")


def evaluated_steps(config: dict, method: str) -> list[int]:
    """The optimizer steps at which ``method``'s rounds are evaluated on the validation split, ascending, the last
    one the round's last step (``training.max_steps``); none without ``training.eval_every_steps``."""
    training = config[method]["training"]
    every = training.get("eval_every_steps") or 0
    if not every:
        return []
    max_steps = training.get("max_steps")
    key = f"{method}.training.eval_every_steps"
    if max_steps is None:
        raise SnakeskillsError(
            f"config key {key} is set, but {method}.training.max_steps is not: the checkpoints to evaluate are planned "
            f"before the round's data exists, so the round needs a known number of optimizer steps; set "
            f"{method}.training.max_steps"
        )
    if isinstance(every, int):
        steps = list(range(every, max_steps, every))
    else:
        beyond = [step for step in every if step > max_steps]
        if beyond:
            raise SnakeskillsError(
                f"config key {key} lists step {beyond[0]}, past the round's last step ({method}.training.max_steps "
                f"{max_steps})"
            )
        steps = sorted(step for step in every if step < max_steps)
    return [*steps, max_steps]


def check_validation(config: dict) -> None:
    """The validation keys: a method that evaluates checkpoints needs ``validation_split``, which must be neither
    the test split (``eval_split``) nor ``train_split``; ``select: best_validation`` needs checkpoints to choose
    from."""
    evaluating = [method for method in config["methods"] if evaluated_steps(config, method)]
    for method in config["methods"]:
        if config[method]["select"] == "best_validation" and method not in evaluating:
            raise SnakeskillsError(
                f"config key {method}.select is best_validation, but {method}.training.eval_every_steps is not set: "
                f"there are no checkpoints to choose from; set it (with {method}.training.max_steps) or select last"
            )
    split = config["validation_split"]
    if not evaluating:
        return
    if split is None:
        raise SnakeskillsError(
            f"config key {evaluating[0]}.training.eval_every_steps is set, but validation_split is not: name the "
            "held-out split the checkpoints are evaluated on (every benchmark needs it)"
        )
    if split == config["eval_split"]:
        raise SnakeskillsError(
            f"config key validation_split is {split!r}, the test split (eval_split): a model chosen on the test split "
            "would be reported on the very problems it was chosen on, and its test figure would be biased upward; "
            "name a held-out split of its own (e.g. validation)"
        )
    if split == config["train_split"]:
        raise SnakeskillsError(
            f"config key validation_split is {split!r}, the train split (train_split): the checkpoints would be "
            "measured on the problems they are trained on; name a held-out split"
        )
