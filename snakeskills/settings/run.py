"""The typed sections of one run, built once from the schema-filled config."""

from __future__ import annotations

from dataclasses import dataclass

from snakeskills.settings.generation import Generation
from snakeskills.settings.models import Model
from snakeskills.settings.tools import Tools
from snakeskills.settings.training import TrainingRun


@dataclass(frozen=True)
class RunSettings:
    """The typed sections; the plan reads the others from the config as the schema filled them."""

    model: Model
    training: TrainingRun
    tools: Tools | None
    # every generation section by its config key: the student's, the LLM judge's, the teacher's, a synthesis
    # writer's, each model tool's
    generations: dict[str, Generation]
    # the teacher answers with the run's tools (teacher.tools)
    teacher_tools: bool = False

    @property
    def model_tools(self) -> dict:
        """The models as tools (``tools.models``), by name; none without tools."""
        return dict(self.tools.models) if self.tools is not None else {}

    @classmethod
    def from_config(cls, config: dict) -> RunSettings:
        tools = None if config["tools"] is None else Tools.from_dict(config["tools"], "tools")
        sections = {"generation": config["generation"]}
        if config["judge"]["llm"] is not None:
            sections["judge.llm.generation"] = config["judge"]["llm"]["generation"]
        if config["teacher"] is not None:
            sections["teacher.generation"] = config["teacher"]["generation"]
        synthesis = config["synthesis"]
        if synthesis is not None and synthesis["writer"] == "own" and synthesis["generation"] is not None:
            sections["synthesis.generation"] = synthesis["generation"]
        generations = {key: Generation.from_dict(section, key) for key, section in sections.items()}
        for name, model in (tools.models if tools is not None else {}).items():
            generations[f"tools.models.{name}.generation"] = model.generation
        return cls(
            model=Model.from_dict(config["model"], "model"),
            training=TrainingRun.from_dict(config["training"], "training"),
            tools=tools,
            generations=generations,
            teacher_tools=config["teacher"] is not None and config["teacher"]["tools"],
        )
