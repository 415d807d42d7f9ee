"""What a benchmark's rule-based judge reads (``plan.sections.benchmark_judge``): how the answer is extracted, and
by kind of benchmark the equivalence and the limits a comparison or a program runs under. A key a kind does not
use is absent (None), so that changing it reruns none of that kind's judge jobs."""

from __future__ import annotations

from dataclasses import dataclass

from snakeskills.settings.section import Section, optional


@dataclass(frozen=True)
class RuleJudge(Section):
    extraction: str
    regex: str | None = optional()
    equivalence: str | None = optional()
    timeout_seconds: float | None = optional()
    memory_limit_mb: int | None = optional()
    sandbox: str | None = optional()
