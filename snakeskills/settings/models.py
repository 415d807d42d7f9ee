"""The student model (``model``) and the model a run builds itself: the embedded default's tiny model
(``tiny_model``)."""

from __future__ import annotations

from dataclasses import dataclass

from snakeskills.settings.section import Section, optional
from snakeskills.settings.tools import Tools
from snakeskills.settings.training import Trainer


@dataclass(frozen=True)
class Model(Section):
    """The student: its name in results, whether the run builds it (the tiny model), its checkpoint folder."""

    SCHEMA = "#/properties/model"

    name: str
    build_tiny: bool
    path: str | None
    trust_remote_code: bool
    dtype: str


@dataclass(frozen=True)
class TinyModel(Section):
    """The ``tiny_model`` section as its build job reads it: without ``training.checkpoint_minutes`` (read from the
    config), and with the run's tools where its bootstrap shows the tool protocol (``tool_share``)."""

    SCHEMA = "#/properties/tiny_model"

    seed: int
    architecture: dict
    bootstrap_benchmark: str
    bootstrap_split: str
    validation_split: str
    stop_at_accuracy: float
    check_every_steps: int
    completion: str
    training: Trainer
    tool_completion: str | list[str] | None = optional()
    tool_share: float | None = optional()
    tools: Tools | None = optional()
