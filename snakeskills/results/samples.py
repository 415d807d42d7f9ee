"""A few judged samples of each model and benchmark, to read beside the metrics: the problem, the generation, the
extracted answer, the verdict and its ``extraction_route``, correct and incorrect ones; a tool-calling sample also
shows its calls (count, errors, timeouts, seconds, cost) and the tools' outputs (``tool_output_spans``) marked.

The choice is fixed by a seed: each (model, benchmark, split) and verdict draws from a ``random.Random`` seeded with
the seed and those names, so every machine and rerun shows the same samples. Distinct problems come first. Files are
read in a light pass (verdict, route, id) and then for the chosen rows only, so no eval split is held in memory.

Rendered as a standalone HTML page for the report (every text escaped: generations are untrusted) and as text for
``python3 -m snakeskills.cli samples`` (long texts cut to start and end). About 580 lines so that the report and the
command choose by the same rules; the HTML page is the part to move out if it grows."""

from __future__ import annotations

import html
import random
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from snakeskills.errors import SnakeskillsError
from snakeskills.io import atomic_open, iter_jsonl
from snakeskills.judging.extraction_routes import EXTRACTION_ROUTE, UNKNOWN, is_fallback
from snakeskills.training.samples import trained_text
from snakeskills.training.tool_masks import TOOL_OUTPUT_SPANS, checked_spans

TOOL_CALLS = "code_rounds_executed"  # tool_metrics.TOOL_CALLS (that module needs polars; this one must not)

CHOICE_SEED = 0
PER_VERDICT = 2
VERDICTS = ("correct", "incorrect")
SCORES = ("symbolic_correct", "judge_correct")
# a text longer than this is shown in the terminal as its start and its end (--full shows it whole); in the report,
# a generation longer than this sits in a <details> block
LONG_TEXT = 1200
_LONG_LINES = 30


@dataclass(frozen=True)
class JudgedFile:
    """One seed's judged file of a (model, benchmark, split)."""

    model: str
    benchmark: str
    split: str
    seed: int
    path: Path


@dataclass(frozen=True)
class Sample:
    """One judged record, where it came from (its seed file and row, counted from 1), and its verdict."""

    file: JudgedFile
    row_number: int
    record: dict
    correct: bool

    @property
    def route(self) -> str:
        return route_of(self.record)


@dataclass
class SampleGroup:
    """The samples chosen from one (model, benchmark, split): ``verdicts`` counts every row by verdict, ``matching``
    the rows the filters kept, ``routes`` every row by extraction route."""

    model: str
    benchmark: str
    split: str
    verdicts: Counter = field(default_factory=Counter)
    matching: Counter = field(default_factory=Counter)
    routes: Counter = field(default_factory=Counter)
    samples: list[Sample] = field(default_factory=list)

    @property
    def total(self) -> int:
        return sum(self.verdicts.values())

    def shown(self, verdict: str) -> int:
        return sum(1 for sample in self.samples if verdict_name(sample.correct) == verdict)


def route_of(record: dict) -> str:
    """How the record's answer was found (``extraction_route``), ``unknown`` for a record without one (as
    metrics.json counts it)."""
    route = record.get(EXTRACTION_ROUTE)
    return UNKNOWN if route is None else str(route)


def verdict_name(correct: bool) -> str:
    return VERDICTS[0] if correct else VERDICTS[1]


def is_correct(record: dict, score: str, where: str) -> bool:
    """The record's verdict under ``score`` (symbolic_correct or judge_correct); a verdict it lacks is an error
    naming ``where``."""
    if score not in record:
        source = "the LLM judge (judge.llm)" if score == "judge_correct" else "the judge stage"
        raise SnakeskillsError(f"{where}: no {score!r} field (written by {source})")
    return bool(record[score])


# ---------------------------------------------------------------- finding the judged files


def _pattern_parts(pattern: str) -> tuple[str, re.Pattern]:
    """A file pattern of wildcards (``judge/{model}/{benchmark}/{split}/output-rs{seed}.jsonl``) as a glob and as a
    regex with one group per wildcard."""
    glob = re.sub(r"\{\w+\}", "*", pattern)
    regex = ""
    for literal, name in re.findall(r"([^{]*)(?:\{(\w+)\})?", pattern):
        regex += re.escape(literal) + (rf"(?P<{name}>[^/]+)" if name else "")
    return glob, re.compile(regex + "$")


def experiment_folder(path: str | Path, pattern: str) -> Path:
    """The experiment's results folder at ``path``: ``path`` itself when it holds the judged files' folder
    (``judge/``, the pattern's first part), else its one experiment folder that does (``results`` with one
    experiment in it). No such folder, or several, is an error saying what there is."""
    path = Path(path)
    top = pattern.split("/", 1)[0]
    if not path.is_dir():
        raise SnakeskillsError(
            f"no results folder {path}: give an experiment's results folder, <results_dir>/<experiment> of its config "
            "(results/<experiment> by default)"
        )
    if (path / top).is_dir():
        return path
    experiments = sorted(child for child in path.iterdir() if (child / top).is_dir())
    if len(experiments) == 1:
        return experiments[0]
    if experiments:
        names = ", ".join(str(child) for child in experiments)
        raise SnakeskillsError(f"{path} holds the results of several experiments; name one of {names}")
    raise SnakeskillsError(
        f"{path} holds no judged samples (no {top}/ folder in it or in a folder below it): a run writes them to "
        f"<results_dir>/<experiment>/{pattern}"
    )


def find_judged_files(results: str | Path, pattern: str) -> list[JudgedFile]:
    """Every judged seed file under an experiment's results folder, ``pattern`` the layout's (``Layout.judged``,
    relative to the folder), sorted by model, benchmark, split and seed."""
    results = Path(results)
    glob, regex = _pattern_parts(pattern)
    files = []
    for path in results.glob(glob):
        match = regex.match(path.relative_to(results).as_posix())
        if match and path.is_file():
            names = match.groupdict()
            files.append(JudgedFile(names["model"], names["benchmark"], names["split"], int(names["seed"]), path))
    return sorted(files, key=lambda file: (file.model, file.benchmark, file.split, file.seed))


def labelled_files(paths: Sequence[str | Path], runs: Sequence[Sequence], split: str) -> list[JudgedFile]:
    """The judged files a rule reads, ``runs[i]`` the (model, benchmark, seed) of ``paths[i]``, all on ``split``."""
    if len(paths) != len(runs):
        raise SnakeskillsError(f"{len(paths)} judged files but {len(runs)} (model, benchmark, seed) labels")
    return [
        JudgedFile(str(model), str(benchmark), split, int(seed), Path(path))
        for path, (model, benchmark, seed) in zip(paths, runs, strict=True)
    ]


def select_files(
    files: Sequence[JudgedFile],
    *,
    models: Sequence[str] = (),
    benchmarks: Sequence[str] = (),
    splits: Sequence[str] = (),
    where: str = "the results",
) -> list[JudgedFile]:
    """The files of the named models, benchmarks and splits (none named: all of them); a name with no file is an
    error listing the names there are."""
    if not files:
        raise SnakeskillsError(f"{where} hold no judged samples yet")
    for kind, names, wanted in (
        ("model", [file.model for file in files], models),
        ("benchmark", [file.benchmark for file in files], benchmarks),
        ("split", [file.split for file in files], splits),
    ):
        there = list(dict.fromkeys(names))
        unknown = [name for name in wanted if name not in there]
        if unknown:
            raise SnakeskillsError(
                f"no {kind} {', '.join(map(repr, unknown))} in {where}; {kind}s there: {', '.join(there)}"
            )
    chosen = [
        file
        for file in files
        if (not models or file.model in models)
        and (not benchmarks or file.benchmark in benchmarks)
        and (not splits or file.split in splits)
    ]
    if not chosen:
        raise SnakeskillsError(
            f"{where} hold no judged samples of model {', '.join(models) or 'any'}, benchmark "
            f"{', '.join(benchmarks) or 'any'} on split {', '.join(splits) or 'any'} together"
        )
    return chosen


# ---------------------------------------------------------------- choosing


def _draw(rng: random.Random, candidates: list[tuple[int, int, str]], count: int) -> list[tuple[int, int, str]]:
    """``count`` of the candidates (file index, row number, problem id) in a random order, distinct problems first."""
    order = list(candidates)
    rng.shuffle(order)
    seen: set[str] = set()
    first, later = [], []
    for candidate in order:
        (later if candidate[2] in seen else first).append(candidate)
        seen.add(candidate[2])
    return (first + later)[:count]


def choose_samples(
    files: Sequence[JudgedFile],
    *,
    per_verdict: int = PER_VERDICT,
    seed: int = CHOICE_SEED,
    verdict: str = "all",
    route: str | None = None,
    score: str = "symbolic_correct",
) -> list[SampleGroup]:
    """Up to ``per_verdict`` correct and ``per_verdict`` incorrect samples of each (model, benchmark, split), in the
    order the files come in; ``verdict`` correct or incorrect keeps one side, ``route`` only samples whose answer
    was found that way (``-``: records without a route). Each group's samples: its correct ones, then its incorrect
    ones, each side in seed and row order."""
    if verdict not in (*VERDICTS, "all"):
        raise SnakeskillsError(f"verdict must be correct, incorrect or all; got {verdict!r}")
    if score not in SCORES:
        raise SnakeskillsError(f"score must be one of {', '.join(SCORES)}; got {score!r}")
    if per_verdict < 1:
        raise SnakeskillsError(f"samples per verdict must be at least 1; got {per_verdict}")
    wanted = VERDICTS if verdict == "all" else (verdict,)
    grouped: dict[tuple[str, str, str], list[JudgedFile]] = {}
    for file in files:
        grouped.setdefault((file.model, file.benchmark, file.split), []).append(file)
    groups = []
    for (model, benchmark, split), group_files in grouped.items():
        group = SampleGroup(model, benchmark, split)
        candidates: dict[str, list[tuple[int, int, str]]] = {name: [] for name in VERDICTS}
        for file_index, file in enumerate(group_files):
            for row_number, record in enumerate(iter_jsonl(file.path), start=1):
                name = verdict_name(is_correct(record, score, f"{file.path}: row {row_number}"))
                group.verdicts[name] += 1
                group.routes[route_of(record)] += 1
                if name in wanted and (route is None or route_of(record) == route):
                    group.matching[name] += 1
                    candidates[name].append((file_index, row_number, str(record.get("id", row_number))))
        chosen = []
        for name in wanted:
            rng = random.Random(f"{seed}/{model}/{benchmark}/{split}/{name}")
            chosen += [
                (name, file_index, row) for file_index, row, _ in sorted(_draw(rng, candidates[name], per_verdict))
            ]
        group.samples = _read_chosen(group_files, chosen, score)
        groups.append(group)
    return groups


def _read_chosen(files: list[JudgedFile], chosen: list[tuple[str, int, int]], score: str) -> list[Sample]:
    wanted = {(file_index, row) for _, file_index, row in chosen}
    records: dict[tuple[int, int], dict] = {}
    for file_index in sorted({file_index for file_index, _ in wanted}):
        for row_number, record in enumerate(iter_jsonl(files[file_index].path), start=1):
            if (file_index, row_number) in wanted:
                records[(file_index, row_number)] = record
    samples = []
    for _, file_index, row in chosen:
        record = records[(file_index, row)]
        where = f"{files[file_index].path}: row {row}"
        samples.append(Sample(files[file_index], row, record, is_correct(record, score, where)))
    return samples


def no_samples_message(groups: Sequence[SampleGroup], *, verdict: str = "all", route: str | None = None) -> str:
    """Why nothing was chosen: the filters, and what each (model, benchmark, split) holds instead."""
    asked = [f"verdict {verdict}"] if verdict != "all" else []
    if route is not None:
        asked.append(f"route {route!r}")
    lines = [f"no judged samples match {' and '.join(asked) or 'the selection'}; what there is:"]
    for group in groups:
        routes = ", ".join(f"{name} {count}" for name, count in group.routes.most_common()) or "no samples"
        lines.append(
            f"  {group.model} on {group.benchmark} ({group.split}): {group.total} samples, "
            f"{group.verdicts['correct']} correct, {group.verdicts['incorrect']} incorrect; routes: {routes}"
        )
    return "\n".join(lines)


# ---------------------------------------------------------------- what a sample shows


def sample_fields(sample: Sample) -> list[tuple[str, str]]:
    """(label, text) of what a sample shows, in reading order: the problem, its options (a multiple-choice row's, where
    the problem does not hold them), the expected answer, the generation (its tool outputs marked:
    ``marked_generation``), its tool calls where it ran with tools (``tool_summary``), the predicted answer (``-``: none
    found), the route, the verdict; the LLM judge's judgement and a program's execution status where the record has
    them."""
    record = sample.record
    fields = [("problem", _text(record.get("problem")))]
    options = record.get("options")
    if options and str(options) not in str(record.get("problem", "")):
        fields.append(("options", _text(options)))
    if "expected_answer" in record:  # a code benchmark's rows have tests instead
        fields.append(("expected answer", _text(record["expected_answer"])))
    fields.append(("generation", marked_generation(record, sample_where(sample))))
    if TOOL_CALLS in record:
        fields.append(("tools", tool_summary(record)))
    fields.append(("predicted answer", _text(record.get("predicted_answer"))))
    fields.append(("route", sample.route))
    verdict = verdict_name(sample.correct)
    if "judge_correct" in record:
        verdict += f" (symbolic_correct {_text(record.get('symbolic_correct'))}, "
        verdict += f"judge_correct {_text(record['judge_correct'])})"
    fields.append(("verdict", verdict))
    if record.get("judgement") is not None:
        fields.append(("judgement", _text(record["judgement"])))
    if "execution_status" in record:
        error = record.get("execution_error")
        fields.append(("execution", _text(record["execution_status"]) + (f": {error}" if error else "")))
    return fields


# around each tool output in a generation's text: what a tool wrote, not the model
TOOL_OUTPUT_MARKS = ("[tool output]", "[end of tool output]")


def sample_where(sample: Sample) -> str:
    return f"{sample.file.path}: row {sample.row_number}"


def generation_parts(record: dict, where: str) -> list[tuple[str, bool]]:
    """A record's generation in order as (text, whether a tool wrote it), cut at its tool outputs
    (``tool_output_spans``: ``[start, end)`` character spans, output tags included; spans outside the text are an
    error naming ``where``); one part without them. With tool outputs, the text is the whole transcript the spans
    mark: with parse_reasoning, the thinking included (``_full_generation``)."""
    spans = record.get(TOOL_OUTPUT_SPANS) or []
    if not spans:
        return [(_text(record.get("generation")), False)]
    text = trained_text(record)
    parts, position = [], 0
    for start, end in checked_spans(spans, text, f"{where}: {TOOL_OUTPUT_SPANS}"):
        parts += [(text[position:start], False), (text[start:end], True)]
        position = end
    parts.append((text[position:], False))
    return [(part, tool) for part, tool in parts if part]


def marked_generation(record: dict, where: str) -> str:
    """The generation with each tool output between ``TOOL_OUTPUT_MARKS``; an output's closing newline after its
    mark, so that the model's next line starts a line."""
    opening, closing = TOOL_OUTPUT_MARKS
    marked = []
    for part, tool in generation_parts(record, where):
        if tool:
            newline = "\n" if part.endswith("\n") else ""
            part = f"{opening}{part.removesuffix(newline)}{closing}{newline}"
        marked.append(part)
    return "".join(marked)


def tool_summary(record: dict) -> str:
    """A tool-calling sample's calls in one line: how many (by tool where several tools were called), the failed and
    timed-out ones, their seconds, the sample's cost where it has one, and whether it stopped at tools.max_calls;
    a field the record lacks is left out."""
    # here, not at the top: the CLI imports this module, and every job's CLI runs where polars may be absent (vLLM's)
    from snakeskills.results.cost_metrics import COST, TOOL_CALL_LOG
    from snakeskills.results.tool_metrics import OVER_LIMIT, TOOL_ERRORS, TOOL_SECONDS, TOOL_TIMEOUTS

    calls = record[TOOL_CALLS]
    parts = [_count(calls, "call")]
    by_tool = Counter(call["tool"] for call in record.get(TOOL_CALL_LOG) or [])
    if len(by_tool) > 1:
        parts[0] += " (" + ", ".join(f"{tool} {count}" for tool, count in by_tool.items()) + ")"
    if record.get(TOOL_ERRORS) is not None:
        parts.append(_count(record[TOOL_ERRORS], "error"))
    if record.get(TOOL_TIMEOUTS) is not None:
        parts.append(_count(record[TOOL_TIMEOUTS], "timeout"))
    if record.get(TOOL_SECONDS) is not None:
        parts.append(f"{record[TOOL_SECONDS]:g} s")
    if record.get(COST) is not None:
        parts.append(f"cost {record[COST]:g}")
    return ", ".join(parts) + ("; stopped at tools.max_calls" if record.get(OVER_LIMIT) else "")


def _count(count: int, unit: str) -> str:
    return f"{count} {unit}{'' if count == 1 else 's'}"


def sample_origin(sample: Sample) -> str:
    """Where a sample comes from and how it ended: seed file, row, problem id, tokens, finish reason."""
    record = sample.record
    parts = [f"rs{sample.file.seed} row {sample.row_number}"]
    if "id" in record:
        parts.append(f"id {record['id']}")
    if "num_generated_tokens" in record:
        parts.append(f"{record['num_generated_tokens']} tokens")
    if "finish_reason" in record:
        parts.append(f"finish_reason {record['finish_reason']}")
    return ", ".join(parts)


def _text(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _is_long(text: str) -> bool:
    return len(text) > LONG_TEXT or text.count("\n") > _LONG_LINES


def cut(text: str, max_chars: int) -> str:
    """``text`` whole when it is at most ``max_chars`` long, else its start and end (where the answer is) around a
    line that says how much is left out."""
    if len(text) <= max_chars:
        return text
    head, tail = text[: max_chars // 2], text[len(text) - max_chars // 2 :]
    return f"{head}\n[... {len(text) - len(head) - len(tail)} characters cut; --full shows them ...]\n{tail}"


def _group_title(group: SampleGroup) -> str:
    return f"{group.model} on {group.benchmark} ({group.split})"


def _group_counts(group: SampleGroup) -> str:
    counts = []
    for name in VERDICTS:
        if group.matching[name] or group.shown(name):
            counts.append(f"{group.shown(name)} of {group.matching[name]} {name}")
    filtered = sum(group.matching.values()) != group.total
    shown = ", ".join(counts) + " shown" if counts else "none match"
    return shown + (f"; {group.total} samples in all" if filtered else "")


# ---------------------------------------------------------------- plain text


def render_text(groups: Sequence[SampleGroup], *, max_chars: int | None = LONG_TEXT, seed: int = CHOICE_SEED) -> str:
    """The groups' samples for a terminal; ``max_chars`` cuts each longer text to its start and end (None: whole)."""
    blocks = []
    for group in groups:
        if not group.samples:
            continue
        rule = "=" * 100
        blocks.append(f"{rule}\n{_group_title(group)}: {_group_counts(group)}; chosen with seed {seed}\n{rule}")
        for number, sample in enumerate(group.samples, start=1):
            lines = [f"--- {number}. {verdict_name(sample.correct).upper()}  {sample_origin(sample)}"]
            for label, text in sample_fields(sample):
                shown = text if max_chars is None else cut(text, max_chars)
                if "\n" in shown or len(shown) > 80:
                    lines.append(f"{label}:")
                    lines.extend(f"    {line}" for line in shown.split("\n"))
                else:
                    lines.append(f"{label}: {shown}")
            blocks.append("\n".join(lines))
    return "\n\n".join(blocks) + "\n"


# ---------------------------------------------------------------- HTML (the report)

_STYLE = """
body { font-family: system-ui, sans-serif; margin: 1.5em; color: #222; }
h2 { margin-top: 2em; border-bottom: 1px solid #ccc; }
.sample { border-left: 6px solid #999; padding: 0.3em 0.8em; margin: 1em 0; background: #fafafa; }
.sample.correct { border-color: #2e7d32; }
.sample.incorrect { border-color: #c62828; }
.sample h3 { font-size: 1em; margin: 0.3em 0; }
.tool-output { background: #e3ecf7; border: 1px dashed #5b7fa6; }
.verdict-correct { color: #2e7d32; }
.verdict-incorrect { color: #c62828; }
dl { display: grid; grid-template-columns: max-content auto; gap: 0.3em 1em; margin: 0.5em 0; }
dt { font-weight: bold; }
dd { margin: 0; }
pre { white-space: pre-wrap; overflow-wrap: anywhere; margin: 0; font-size: 0.9em; }
table { border-collapse: collapse; }
td, th { border: 1px solid #ccc; padding: 0.2em 0.6em; text-align: left; }
"""


def _html_value(label: str, text: str, sample: Sample) -> str:
    escaped = html.escape(text)
    if label == "generation":  # tool outputs in a box of their own, not in the text marks
        escaped = "".join(
            f'<span class="tool-output" title="a tool\'s output">{html.escape(part)}</span>'
            if tool
            else html.escape(part)
            for part, tool in generation_parts(sample.record, sample_where(sample))
        )
    if label == "generation" and _is_long(text):
        lines = text.count("\n") + 1
        return (
            f"<details><summary>{len(text)} characters, {lines} lines: show the whole generation</summary>"
            f"<pre>{escaped}</pre></details>"
        )
    return f"<pre>{escaped}</pre>"


def _html_sample(sample: Sample) -> str:
    verdict = verdict_name(sample.correct)
    items = "".join(
        f"<dt>{html.escape(label)}</dt><dd>{_html_value(label, text, sample)}</dd>"
        for label, text in sample_fields(sample)
    )
    return (
        f'<div class="sample {verdict}"><h3><span class="verdict-{verdict}">{verdict}</span> '
        f"&middot; {html.escape(sample_origin(sample))}</h3><dl>{items}</dl></div>"
    )


def route_shares(group: SampleGroup) -> str:
    """Every row of a group by extraction route, as shares of its samples, most first; a fallback route (one that
    can credit a wrong statement that mentions the right answer) marked with *."""
    total = sum(group.routes.values())
    return ", ".join(
        f"{route}{' *' if is_fallback(route) else ''} {100.0 * count / total:.0f}%"
        for route, count in group.routes.most_common()
    )


def _html_warnings(warnings: Sequence[str] | None) -> str:
    if warnings is None:
        return ""
    if not warnings:
        return "<h2>Warnings</h2><p>none</p>"
    items = "".join(f"<li>{html.escape(line)}</li>" for line in warnings)
    return f'<h2 id="warnings">Warnings ({len(warnings)})</h2><ul>{items}</ul>'


def render_html(
    groups: Sequence[SampleGroup],
    *,
    seed: int = CHOICE_SEED,
    per_verdict: int = PER_VERDICT,
    warnings: Sequence[str] | None = None,
) -> str:
    """A standalone HTML page: the run's ``warnings`` (eval/warnings.json, when given), an overview table of the
    groups (verdicts, extraction routes), then each group's samples."""
    rows, sections = [], []
    for index, group in enumerate(groups, start=1):
        title = html.escape(_group_title(group))
        rows.append(
            f'<tr><td><a href="#group{index}">{title}</a></td><td>{group.verdicts["correct"]}</td>'
            f"<td>{group.verdicts['incorrect']}</td><td>{html.escape(route_shares(group))}</td>"
            f"<td>{len(group.samples)}</td></tr>"
        )
        body = "".join(_html_sample(sample) for sample in group.samples) or "<p>no samples</p>"
        sections.append(f'<h2 id="group{index}">{title}</h2><p>{html.escape(_group_counts(group))}</p>{body}')
    overview = (
        "<table><tr><th>model on benchmark (split)</th><th>correct</th><th>incorrect</th>"
        "<th>extraction routes (* a fallback)</th><th>shown</th></tr>" + "".join(rows) + "</table>"
        if groups
        else "<p>no judged samples</p>"
    )
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>Samples</title>'
        f"<style>{_STYLE}</style></head><body><h1>Samples</h1>"
        f"<p>Up to {per_verdict} correct and {per_verdict} incorrect judged samples of each model and benchmark, "
        f"chosen with seed {seed} (distinct problems first), all seeds pooled. Route: how the judge found the "
        f"answer ({UNKNOWN}: judged before routes were recorded).</p>"
        f"{_html_warnings(warnings)}{overview}{''.join(sections)}</body></html>\n"
    )


def write_samples_html(groups: Sequence[SampleGroup], output_path: str | Path, **options) -> None:
    """``render_html`` of the groups, written atomically."""
    with atomic_open(output_path) as handle:
        handle.write(render_html(groups, **options))
