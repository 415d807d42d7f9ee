"""What a job reads from its settings file, written by the plan from the typed sections (``to_dict``) and read back
by the job with ``from_json``."""

from __future__ import annotations

from dataclasses import dataclass

from snakeskills.settings.generation import Generation
from snakeskills.settings.section import Section, optional
from snakeskills.settings.tools import Price, ServedModel, Tools


@dataclass(frozen=True)
class GenerationJob(Section):
    """A model's generate jobs on one split: the prepared split, the model and where its weights are, its generation
    section, its resolved prompt, whether a chunk may be empty (a synthesis split's), its tools, its price (a
    model tool answering alone), and whether a finished job's rows are reused by content (a round's checkpoint)."""

    split: str
    model: dict
    model_path: str | None
    adapter_path: str | None
    generation: Generation
    prompt: dict
    allow_empty_chunk: bool
    tools: Tools | None
    price: Price | None
    # a round's checkpoint (plan/validation.py): a rerun that reaches the same weights reuses its rows
    # (generation/reuse.py); absent for every other model
    reuse_by_content: bool | None = optional()


@dataclass(frozen=True)
class LLMJudge(Section):
    """A judging model: judge.llm (model, its prompt, generation), or the LLM contamination check's checker (judge.llm's
    or the teacher's model and generation, without a prompt of its own: the check's is the job's)."""

    SCHEMA = "#/properties/judge/properties/llm/then"

    model: ServedModel
    generation: Generation
    prompt: dict | None = optional()


@dataclass(frozen=True)
class LLMJudgeJob(Section):
    """An LLM judge's (or contamination checker's) jobs: judge.llm (or the checker) and the resolved prompt."""

    llm: LLMJudge
    prompt: dict
