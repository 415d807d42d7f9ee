"""Learning curves: a round whose method sets ``<method>.training.eval_every_steps`` is trained in segments, one job
each, every segment resuming the one before from its trainer state; each segment's weights are a model of their own
(``<round>-step<N>``, ``TrainingMethod.checkpoint_model_name``) that the ordinary generate/judge/summarize jobs
evaluate on ``validation_split``. The round's output model is then chosen among them (``<method>.select``): its last
step's, or the best on validation. Here: which steps a round stops at, and the checks of the keys."""

from __future__ import annotations

from snakeskills.errors import SnakeskillsError
from snakeskills.training.methods import TRAINING_METHODS, checkpoint_model_parts

SELECT = ("last", "best_validation")


def evaluated_steps(config: dict, method: str) -> list[int]:
    """The optimizer steps at which ``method``'s rounds are evaluated on the validation split, ascending, the last
    one the round's last step (``training.max_steps``); none without ``training.eval_every_steps``."""
    section = config.get(method)
    if section is None or "training" not in section:  # a missing section: check_methods says so
        return []
    training = section["training"]
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
        if (config.get(method) or {}).get("select") == "best_validation" and method not in evaluating:
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


class CurvesPlan:
    """The run's learning curves: which rounds train in segments, each segment's checkpoint and what it resumes, what
    each round's output model is chosen from, and the evaluations on the validation split a curve reads."""

    def __init__(self, config: dict, plan):  # plan: the run's Plan, which holds this
        self.plan = plan
        # the optimizer steps each method's rounds are evaluated at (none: one training job per round)
        self.evaluated_steps = {method: evaluated_steps(config, method) for method in config["methods"]}
        self.validation_split: str | None = config["validation_split"]

    def segmented(self, method: str) -> bool:
        """Whether ``method``'s rounds train in segments whose checkpoints are evaluated on the validation split."""
        return bool(self.evaluated_steps.get(method))

    def round_checkpoints(self, model: str) -> list[str]:
        """A tuned round's checkpoints, by step (none where its method evaluates none)."""
        method, round_number = self.plan.tuned_parts(model)
        entry = TRAINING_METHODS[method]
        return [entry.checkpoint_model_name(round_number, step) for step in self.evaluated_steps[method]]

    def validated_rounds(self) -> list[str]:
        """The rounds trained in segments, whose checkpoints are evaluated on the validation split."""
        return [model for model in self.plan.tuned_models if self.segmented(self.plan.tuned_parts(model)[0])]

    def checkpoint_models(self) -> list[str]:
        """Every round's checkpoints, round by round in ``tuned_models`` order."""
        return [checkpoint for model in self.plan.tuned_models for checkpoint in self.round_checkpoints(model)]

    @staticmethod
    def checkpoint_round(checkpoint: str) -> str:
        """The round a checkpoint belongs to (sft-round1 for sft-round1-step40)."""
        method, round_number, _ = checkpoint_model_parts(checkpoint)
        return TRAINING_METHODS[method].tuned_model_name(round_number)

    @staticmethod
    def checkpoint_step(checkpoint: str) -> int:
        return checkpoint_model_parts(checkpoint)[2]

    def segment_resume(self, checkpoint: str) -> list[str]:
        """What a training segment resumes: the previous checkpoint's trainer state (none for the first)."""
        checkpoints = self.round_checkpoints(self.checkpoint_round(checkpoint))
        index = checkpoints.index(checkpoint)
        return [self.plan.layout.trainer_state.format(model=checkpoints[index - 1])] if index else []

    def validation_problem_files(self, model: str) -> list[str]:
        """Each benchmark's problems.jsonl of a checkpoint on the validation split, in benchmark order."""
        return [
            self.plan.layout.problem_scores.format(model=model, benchmark=benchmark, split=self.validation_split)
            for benchmark in self.plan.benchmarks
        ]

    def selection_inputs(self, model: str) -> dict[str, list[str]]:
        """What a segmented round's output is chosen from: its checkpoints' weights and, to choose the best on
        validation (<method>.select), their validation scores (so that select last waits for no evaluation)."""
        checkpoints = self.round_checkpoints(model)
        training = self.plan.training_for(model)
        inputs = {"checkpoints": [training.output.format(model=checkpoint) for checkpoint in checkpoints]}
        if training.section["select"] == "best_validation":
            inputs["validation"] = [
                path for checkpoint in checkpoints for path in self.validation_problem_files(checkpoint)
            ]
        return inputs

    def validation_runs(self) -> list[tuple[str, str, int, str]]:
        """(round, model, step, benchmark) of every evaluation on the validation split a learning curve reads, in
        ``validation_targets`` order: each segmented round's starting model as step 0 (the base model, or the
        previous round's output model), then its checkpoints."""
        return [
            (model, evaluated, step, benchmark)
            for model in self.validated_rounds()
            for evaluated, step in [
                (self.plan.parent_model(model), 0),
                *((checkpoint, self.checkpoint_step(checkpoint)) for checkpoint in self.round_checkpoints(model)),
            ]
            for benchmark in self.plan.benchmarks
        ]

    def reused_by_content(self, model: str) -> bool:
        """Whether ``model``'s generate jobs reuse an earlier run's rows when its weights are the same bytes
        (``generation/reuse.py``): a round's checkpoint, and the output model of a round trained in segments (a copy
        of one)."""
        return checkpoint_model_parts(model) is not None or model in self.validated_rounds()

    def validation_job_logs(self, model: str) -> list[str]:
        """The logs of the generate and judge jobs that evaluate a segmented round's checkpoints on the validation
        split (their seconds are the round's evaluation cost)."""
        split, chunks = self.validation_split, self.plan.config["num_chunks"]
        rules = ["generate", "judge"] + (["llm_judge"] if self.plan.config["judge"]["llm"] is not None else [])
        return [
            self.plan.layout.chunk_log(rule).format(
                model=checkpoint, benchmark=benchmark, split=split, seed=seed, chunk=chunk, num_chunks=chunks
            )
            for checkpoint in self.round_checkpoints(model)
            for benchmark in self.plan.benchmarks
            for seed in self.plan.seeds(checkpoint, split)
            for chunk in range(chunks)
            for rule in rules
        ]

    def validation_targets(self) -> list[str]:
        """Each problems.jsonl on the validation split a learning curve reads, in ``validation_runs`` order (a
        model shared by several curves, the base model, appears once per curve)."""
        return [
            self.plan.layout.problem_scores.format(model=evaluated, benchmark=benchmark, split=self.validation_split)
            for _, evaluated, _, benchmark in self.validation_runs()
        ]

    def selection_files(self) -> list[str]:
        """The selection.json of every segmented round (which step its output model is)."""
        return [self.plan.layout.selection.format(model=model) for model in self.validated_rounds()]
