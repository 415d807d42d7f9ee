"""The teacher (config key ``teacher``): a stronger model whose judged train samples the student learns from. Its
plan object exists only when the config names a teacher."""

from __future__ import annotations

from snakeskills.errors import SnakeskillsError
from snakeskills.plan.values import check_model_name
from snakeskills.settings.run import RunSettings


def check_teacher(config: dict, settings: RunSettings) -> None:
    """The teacher's name must be its own: not a tuned round's, not the student's; teacher.tools needs tools."""
    teacher = config["teacher"]
    check_model_name(teacher["name"], "teacher.name")
    if settings.teacher_tools and settings.tools is None:
        raise SnakeskillsError(
            "config key teacher.tools is true, but the run has no tools (tools is null); give a tools section or "
            "set teacher.tools: false"
        )
    if teacher["name"] == config["model"]["name"]:
        raise SnakeskillsError(
            f"config keys teacher.name and model.name are both {teacher['name']!r}: teacher and student would "
            "share results paths; rename one"
        )


class TeacherPlan:
    """Who the teacher is and which rounds learn from it."""

    def __init__(self, teacher: dict, tools: bool = False):
        self.section = teacher  # model, prompt, generation: how the teacher samples
        self.name: str = teacher["name"]
        self.evaluated = teacher["evaluate"]
        self.train_num_seeds: int = teacher["train_num_seeds"]
        self.tools = tools  # answers with the run's tools section (teacher.tools)

    def sft_data_models(self, student_models: list[str]) -> list[str]:
        """The models whose samples a round learns from, given the student's own (its earlier rounds, the base
        model left out): the teacher alone for round 1, then the teacher, the student's rounds, or both
        (teacher.later_rounds)."""
        later_rounds = self.section["later_rounds"]
        if not student_models or later_rounds == "teacher":
            return [self.name]
        return student_models if later_rounds == "student" else [self.name, *student_models]
