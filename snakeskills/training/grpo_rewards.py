"""GRPO's rewards: the terms a completion earns (``grpo.rewards``), each one reward function of TRL's
``GRPOTrainer``, all read from one judging of the batch by the benchmark's own rule-based judge; the completions the
correct term rewarded, counted with the extraction route that credited them; and the refusal of a batch whose tool
mask TRL handed to the reward functions instead of taking it."""

from __future__ import annotations

import json

from snakeskills.errors import SnakeskillsError
from snakeskills.generation.model_job import text_fields
from snakeskills.judging.extraction_routes import EXTRACTION_ROUTE, ROUTES
from snakeskills.settings.judging import RuleJudge
from snakeskills.training import trl_names

# the reward terms, in the order their weights are given to the trainer (grpo.rewards)
REWARD_TERMS = ("correct", "answer_format", "length", "tool_calls", "tool_seconds", "tool_cost", "tool_preference")
# the terms whose config value is a table of weights by tool, not one weight: the trainer weighs them by 1
TOOL_TABLE_TERMS = ("tool_preference",)
# the key of the tool rollouts' mask (0 on the tools' tokens) that TRL's GRPOTrainer takes as its tool mask, out of
# what it hands the reward functions (rollouts.BackendRollouts writes it)
TRL_TOOL_MASK = "env_mask"
# the log_history keys of the completions the correct term rewarded, and of those credited by a fallback extraction
# (by route: CREDITED_BY_FALLBACK + "/<route>"), counted at each logged step over every process
CREDITED, CREDITED_BY_FALLBACK = "judge/credited", "judge/fallback_credited"


class JudgeRewards:
    """The reward terms of a batch of completions, from one judging of each completion: ``correct`` (1 when the
    benchmark's judge says correct), ``answer_format`` (1 when it reads an answer), ``length`` (the completion's
    tokens as a share of ``max_new_tokens``). ``judges``: each benchmark's judge section; ``reasoning``: the
    student's parse_reasoning settings (the judge reads the answer after the thinking, as for generated samples)."""

    def __init__(
        self,
        judges: dict[str, dict | RuleJudge],
        reasoning: dict,
        max_new_tokens: int,
        num_workers: int,
        tool_preference: dict[str, float] | None = None,
    ):
        self.judges = {name: RuleJudge.from_dict(judge, f"judge of {name}") for name, judge in judges.items()}
        self.reasoning = reasoning
        self.tool_preference = tool_preference or {}
        self.max_new_tokens, self.num_workers = max_new_tokens, num_workers
        # the last batch's completions (held, so that no other list can take their identity) and verdicts
        self._batch: tuple[list[str], list[dict]] | None = None
        # the extraction route of each completion the correct term rewarded since ``take_credited``
        self.credited_routes: list[str | None] = []

    def take_credited(self) -> list[str | None]:
        """The routes of the completions the correct term rewarded since the last call."""
        routes, self.credited_routes = self.credited_routes, []
        return routes

    def judged(self, completions: list[str], rows: list[str], spans: list | None = None) -> list[dict]:
        """The batch's records judged (once per batch: every term reads the same verdicts). With tools,
        ``completions`` are the rollouts' transcripts and ``spans`` their tool outputs' (the judge reads the answer
        after the last)."""
        from snakeskills.judging.judge import judge_records

        if self._batch is not None and self._batch[0] is completions:
            return self._batch[1]
        records = [
            {**json.loads(row), **text_fields(completion, "generation", self.reasoning)}
            for completion, row in zip(completions, rows, strict=True)
        ]
        if spans is not None:
            for record, row_spans in zip(records, spans, strict=True):
                record["tool_output_spans"] = row_spans
        judged: list[dict | None] = [None] * len(records)
        for benchmark, judge in self.judges.items():
            indices = [index for index, record in enumerate(records) if record["benchmark"] == benchmark]
            if indices:
                verdicts = judge_records([records[i] for i in indices], judge, num_workers=self.num_workers)
                for index, record in zip(indices, verdicts, strict=True):
                    judged[index] = record
        missing = [records[i]["benchmark"] for i, record in enumerate(judged) if record is None]
        if missing:
            raise SnakeskillsError(f"no judge for benchmark {missing[0]!r} of a GRPO problem")
        self._batch = (completions, judged)
        return judged

    def functions(self) -> list:
        """One reward function per term (TRL logs each as rewards/<name>). Each refuses a batch whose extras hold the
        rollouts' tool mask (``TRL_TOOL_MASK``): TRL hands the reward functions only what it did not take, so its
        tool mask did not reach the loss."""

        def judged(completions, row, transcript=None, tool_output_spans=None, **_):
            if transcript is not None:  # tool rollouts: TRL's decoded completions hold the tool outputs unmarked
                return self.judged(transcript, row, tool_output_spans)
            return self.judged(completions, row)

        def correct(prompts, completions, completion_ids, row, **extra):
            records = judged(completions, row, **extra)
            self.credited_routes += [record.get(EXTRACTION_ROUTE) for record in records if record["symbolic_correct"]]
            return [float(record["symbolic_correct"]) for record in records]

        def answer_format(prompts, completions, completion_ids, row, **extra):
            return [float(record["predicted_answer"] is not None) for record in judged(completions, row, **extra)]

        def length(prompts, completions, completion_ids, row, model_tokens=None, **_):
            if model_tokens is not None:  # tool rollouts: the model's own tokens, not the tools' outputs
                return [tokens / self.max_new_tokens for tokens in model_tokens]
            return [len(ids) / self.max_new_tokens for ids in completion_ids]

        def tool_calls(prompts, completions, completion_ids, row, tool_calls=None, **_):
            return [float(calls) for calls in tool_calls] if tool_calls is not None else [0.0] * len(completions)

        def tool_seconds(prompts, completions, completion_ids, row, tool_seconds=None, **_):
            return [float(time) for time in tool_seconds] if tool_seconds is not None else [0.0] * len(completions)

        def tool_cost(prompts, completions, completion_ids, row, tool_cost=None, **_):
            return [float(cost) for cost in tool_cost] if tool_cost is not None else [0.0] * len(completions)

        def tool_preference(prompts, completions, completion_ids, row, tool_call_log=None, **_):
            if tool_call_log is None:
                return [0.0] * len(completions)
            return [sum(self.tool_preference.get(call["tool"], 0.0) for call in log) for log in tool_call_log]

        terms = [correct, answer_format, length, tool_calls, tool_seconds, tool_cost, tool_preference]
        return [without_tool_mask(term) for term in terms]


def without_tool_mask(term):
    """``term`` (a reward function), refusing a call that holds the rollouts' tool mask among its extras."""
    import functools

    @functools.wraps(term)
    def reward(*arguments, **keywords):
        if TRL_TOOL_MASK in keywords:
            raise SnakeskillsError(
                f"{trl_names.installed()} handed the tool rollouts' {TRL_TOOL_MASK!r} to the reward functions instead "
                "of taking it as its tool mask: the tools' tokens would be trained on; install the TRL that "
                "pyproject.toml pins (python3 -m pip install -e .)"
            )
        return term(*arguments, **keywords)

    return reward


def credited_counts_of(log_history: list[dict]) -> dict:
    """A GRPO run's completions rewarded as correct, as ``extraction_routes.credited_counts`` counts a round's
    credited examples (``credited``, ``fallback_credited``, ``fallback_credited_by_route``), summed over its logged
    steps (a resumed run's history holds the steps before its checkpoint); empty where no step counted them."""
    steps = [entry for entry in log_history if CREDITED in entry]
    if not steps:
        return {}
    totals = {route: sum(int(entry.get(f"{CREDITED_BY_FALLBACK}/{route}", 0)) for entry in steps) for route in ROUTES}
    return {
        "credited": sum(int(entry[CREDITED]) for entry in steps),
        "fallback_credited": sum(int(entry[CREDITED_BY_FALLBACK]) for entry in steps),
        "fallback_credited_by_route": {route: total for route, total in totals.items() if total},
    }


def reward_weights(rewards: dict, term: str) -> list[float]:
    """The weights a term's config value holds: its one weight, or a table's (``TOOL_TABLE_TERMS``) by tool."""
    if term in TOOL_TABLE_TERMS:
        return [float(weight) for weight in (rewards.get(term) or {}).values()]
    return [float(rewards.get(term) or 0)]


def reward_weight(rewards: dict, term: str) -> float:
    """The trainer's weight of a term: its config value, or 1 for a table by tool (whose weights the term holds)."""
    return 1.0 if term in TOOL_TABLE_TERMS else float(rewards[term])
