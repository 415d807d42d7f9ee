"""Tool use of one model on one benchmark, from its judged records of a run with tools (``snakeskills.tools.loop``
writes the fields): how often it calls, whether calling samples are more often right than one-turn ones, and how the
calls went. Summarize writes ``"<benchmark>/tools"`` to ``metrics.json`` (``tool_metrics``) and two lines to
``metrics.txt``; the comparison tables it (``tool_use_table``), the report plots it (``report.plot_tool_use``).
Records without the fields give no block anywhere.

Record fields read, summed over a benchmark's samples (seeds pooled):

- ``code_rounds_executed``: the sample's tool calls (NeMo-Skills' name);
- ``tool_errors``: calls that raised or failed (a timeout is not an error);
- ``num_code_timeouts``: calls killed at the time limit;
- ``code_execution_time``: seconds the calls took;
- ``tool_call_over_limit``: a call past ``tools.max_calls`` was tried (not run; the sample ended);
- ``symbolic_correct``: the verdict.

A missing or null field counts as none; a total no record has a field for is null."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from snakeskills.results.metrics import aligned_rows

# metrics.json's key of a benchmark's tool use: "<benchmark>/tools"
TOOLS_METRIC = "tools"
# the judged record's fields
TOOL_CALLS, TOOL_ERRORS, TOOL_TIMEOUTS = "code_rounds_executed", "tool_errors", "num_code_timeouts"
TOOL_SECONDS, OVER_LIMIT, VERDICT = "code_execution_time", "tool_call_over_limit", "symbolic_correct"


def tool_metrics(records: Iterable[Mapping]) -> dict | None:
    """A benchmark's tool use over its judged ``records`` (every seed's), or None where no record says how many calls
    it made (``code_rounds_executed``). Percentages are 0-100; a share or accuracy over no samples (no call made, or
    every sample called) is null:

    - ``samples``: the records; ``tool_calls``: their calls; ``calls_per_sample``: calls / samples;
    - ``share_calling``: percent of the samples that made at least one call;
    - ``accuracy_with_call``, ``accuracy_without_call``: percent ``symbolic_correct`` of the samples that called
      and of those that did not;
    - ``tool_errors`` and ``error_share`` (percent of the calls), ``timeouts`` and ``timeout_share`` (likewise);
    - ``seconds_per_sample``: tool seconds / samples;
    - ``samples_over_limit``: samples that tried a call past the limit."""
    records = list(records)
    if not any(record.get(TOOL_CALLS) is not None for record in records):
        return None
    samples = len(records)
    calling = [record for record in records if _number(record, TOOL_CALLS) > 0]
    silent = [record for record in records if _number(record, TOOL_CALLS) == 0]
    calls = sum(_number(record, TOOL_CALLS) for record in records)
    errors, timeouts = _total(records, TOOL_ERRORS), _total(records, TOOL_TIMEOUTS)
    seconds, over_limit = _total(records, TOOL_SECONDS), _total(records, OVER_LIMIT)
    return {
        "samples": samples,
        "tool_calls": int(calls),
        "calls_per_sample": calls / samples,
        "share_calling": _percent(len(calling), samples),
        "accuracy_with_call": _accuracy(calling),
        "accuracy_without_call": _accuracy(silent),
        "tool_errors": None if errors is None else int(errors),
        "error_share": None if errors is None else _percent(errors, calls),
        "timeouts": None if timeouts is None else int(timeouts),
        "timeout_share": None if timeouts is None else _percent(timeouts, calls),
        "seconds_per_sample": None if seconds is None else seconds / samples,
        "samples_over_limit": None if over_limit is None else int(over_limit),
    }


def _number(record: Mapping, field: str) -> float:
    """A record's count or seconds in ``field`` (a boolean counts 1 or 0); 0 where it has none."""
    value = record.get(field)
    return 0 if value is None else value


def _total(records: list[Mapping], field: str) -> float | None:
    """``field`` summed over the records, or None where no record has it."""
    if all(record.get(field) is None for record in records):
        return None
    return sum(_number(record, field) for record in records)


def _percent(part: float, whole: float) -> float | None:
    return 100.0 * part / whole if whole else None


def _accuracy(records: list[Mapping]) -> float | None:
    return _percent(sum(bool(record[VERDICT]) for record in records), len(records))


def _share(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}%"


def _count(count: int | None, share: float | None) -> str:
    """A count and its share of the calls, ``2 (11.1%)``; ``-`` where the records had no such field."""
    if count is None:
        return "-"
    return str(count) if share is None else f"{count} ({share:.1f}%)"


def format_tool_metrics(block: dict) -> str:
    """metrics.txt's lines of a ``tool_metrics`` block."""
    seconds, over_limit = block["seconds_per_sample"], block["samples_over_limit"]
    return (
        f"tool use: {block['calls_per_sample']:.2f} calls per sample ({block['tool_calls']} calls), "
        f"{_share(block['share_calling'])} of {block['samples']} samples call a tool; {VERDICT} with a call "
        f"{_share(block['accuracy_with_call'])}, without {_share(block['accuracy_without_call'])}\n"
        f"tool calls failed: {_count(block['tool_errors'], block['error_share'])}, timed out: "
        f"{_count(block['timeouts'], block['timeout_share'])}; tool seconds per sample: {_seconds(seconds)}; "
        f"samples stopped at the call limit: {'-' if over_limit is None else over_limit}\n"
    )


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def is_tool_block(key: str, value) -> bool:
    """Whether a summary entry is a benchmark's tool use (``"<benchmark>/tools"`` as ``tool_metrics`` writes it), not
    a user's metric that happens to be named ``tools`` in a run without tools."""
    return key.endswith(f"/{TOOLS_METRIC}") and isinstance(value, dict) and "calls_per_sample" in value


def tool_blocks(entries: dict) -> dict[str, dict]:
    """``{benchmark: tool_metrics block}`` of one model's summary entries (metrics.json's or eval/summary.json's)."""
    return {key.removesuffix(f"/{TOOLS_METRIC}"): value for key, value in entries.items() if is_tool_block(key, value)}


TABLE_TITLE = (
    f"tool use by model (eval split): tool calls per sample, share of samples that call a tool, {VERDICT} of the\n"
    "samples with and without a call, calls that failed and that timed out (share of the calls), tool seconds per "
    "sample,\nsamples stopped at the call limit (tools.max_calls)"
)
TABLE_HEADER = [
    "model",
    "benchmark",
    "calls/sample",
    "calling",
    "correct with call",
    "correct without call",
    "failed calls",
    "timeouts",
    "tool s/sample",
    "over limit",
]


def tool_use_table(summary: dict[str, dict]) -> str:
    """The eval comparison's table of each model's tool use on each benchmark (eval/summary.json's
    ``{model: {"<benchmark>/tools": block}}``), one row per (model, benchmark) in summary order, under its title;
    empty where no model has a block (a run without tools)."""
    rows = [
        [
            model,
            benchmark,
            f"{block['calls_per_sample']:.2f}",
            _share(block["share_calling"]),
            _share(block["accuracy_with_call"]),
            _share(block["accuracy_without_call"]),
            _count(block["tool_errors"], block["error_share"]),
            _count(block["timeouts"], block["timeout_share"]),
            _seconds(block["seconds_per_sample"]),
            "-" if block["samples_over_limit"] is None else str(block["samples_over_limit"]),
        ]
        for model, entries in summary.items()
        for benchmark, block in tool_blocks(entries).items()
    ]
    if not rows:
        return ""
    return "\n".join([TABLE_TITLE, *aligned_rows([TABLE_HEADER, *rows], rule_under_header=True)]) + "\n"
