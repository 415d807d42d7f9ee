"""Judged samples to read (snakeskills.results.samples): a fixed-seed choice of correct and incorrect samples per
model and benchmark, filters, the report's HTML page (escaped) and the terminal's text."""

from __future__ import annotations

from pathlib import Path

import pytest

from snakeskills.errors import SnakeskillsError
from snakeskills.io import write_jsonl
from snakeskills.plan.layout import Layout
from snakeskills.results import samples as s

PATTERN = Layout().judged


def judged_row(index: int, seed: int, *, correct: bool, route: str | None = "boxed", **extra) -> dict:
    row = {
        "id": f"p{index}",
        "problem": f"What is {index} + {index}?",
        "expected_answer": str(2 * index),
        "generation": f"seed {seed}: the sum is \\boxed{{{2 * index if correct else 0}}}",
        "num_generated_tokens": 12,
        "finish_reason": "stop",
        "random_seed": seed,
        "predicted_answer": str(2 * index if correct else 0),
        "symbolic_correct": correct,
    }
    if route is not None:
        row["extraction_route"] = route
    return {**row, **extra}


def write_results(folder: Path, runs: dict[tuple[str, str, str], list[list[dict]]]) -> Path:
    """An experiment's results folder: runs[(model, benchmark, split)] the rows of each seed file."""
    for (model, benchmark, split), seeds in runs.items():
        for seed, rows in enumerate(seeds):
            path = folder / PATTERN.format(model=model, benchmark=benchmark, split=split, seed=seed)
            write_jsonl(path, rows)
    return folder


def half_correct(num_problems: int = 10, num_seeds: int = 2, **extra) -> list[list[dict]]:
    return [
        [judged_row(index, seed, correct=index % 2 == 0, **extra) for index in range(num_problems)]
        for seed in range(num_seeds)
    ]


@pytest.fixture
def results(tmp_path) -> Path:
    return write_results(
        tmp_path / "results" / "exp",
        {
            ("base", "add", "test"): half_correct(),
            ("sft-round1", "add", "test"): half_correct(),
            ("base", "add", "train"): half_correct(4, 1),
        },
    )


def keys(group: s.SampleGroup) -> list[tuple[int, int, bool]]:
    return [(sample.file.seed, sample.row_number, sample.correct) for sample in group.samples]


def test_the_choice_is_fixed_by_the_seed_and_holds_both_verdicts(results):
    files = s.find_judged_files(results, PATTERN)
    assert [(file.model, file.split, file.seed) for file in files] == [
        ("base", "test", 0),
        ("base", "test", 1),
        ("base", "train", 0),
        ("sft-round1", "test", 0),
        ("sft-round1", "test", 1),
    ]
    groups = s.choose_samples(files)
    assert [(group.model, group.benchmark, group.split) for group in groups] == [
        ("base", "add", "test"),
        ("base", "add", "train"),
        ("sft-round1", "add", "test"),
    ]
    base = groups[0]
    assert base.verdicts == {"correct": 10, "incorrect": 10}
    # 2 correct, then 2 incorrect, each of a problem of its own, each verdict the record's
    assert [sample.correct for sample in base.samples] == [True, True, False, False]
    assert len({sample.record["id"] for sample in base.samples}) == 4
    assert all(sample.record["symbolic_correct"] == sample.correct for sample in base.samples)
    # the same again, and from a copy of the files elsewhere (no dependence on paths or hash seeds)
    assert [keys(group) for group in s.choose_samples(files)] == [keys(group) for group in groups]
    other_seed = s.choose_samples(files, seed=7)
    assert [keys(group) for group in other_seed] != [keys(group) for group in groups]
    larger = s.choose_samples(files, per_verdict=3)[0]
    assert [sample.correct for sample in larger.samples] == [True] * 3 + [False] * 3


def test_the_choice_does_not_depend_on_the_folder(results, tmp_path):
    copy = write_results(tmp_path / "elsewhere", {("base", "add", "test"): half_correct()})
    here = s.choose_samples(s.select_files(s.find_judged_files(results, PATTERN), models=["base"], splits=["test"]))
    there = s.choose_samples(s.find_judged_files(copy, PATTERN))
    assert keys(here[0]) == keys(there[0])


def test_a_verdict_filter_shows_the_same_samples_as_the_report(results):
    files = s.select_files(s.find_judged_files(results, PATTERN), models=["base"], splits=["test"])
    (both,) = s.choose_samples(files)
    (incorrect,) = s.choose_samples(files, verdict="incorrect")
    assert keys(incorrect) == [key for key in keys(both) if not key[2]]
    (correct,) = s.choose_samples(files, verdict="correct", per_verdict=5)
    assert [sample.correct for sample in correct.samples] == [True] * 5


def test_filters_by_model_benchmark_split_and_route(tmp_path):
    rows = [
        judged_row(0, 0, correct=True, route="boxed"),
        judged_row(1, 0, correct=False, route="none", predicted_answer=None),
        judged_row(2, 0, correct=True, route="answer line"),
        judged_row(3, 0, correct=False, route="boxed"),
    ]
    results = write_results(tmp_path, {("base", "add", "test"): [rows], ("base", "mul", "test"): [rows]})
    files = s.select_files(s.find_judged_files(results, PATTERN), benchmarks=["mul"])
    assert {file.benchmark for file in files} == {"mul"}
    (group,) = s.choose_samples(files, route="answer line")
    assert [(sample.record["id"], sample.route) for sample in group.samples] == [("p2", "answer line")]
    (group,) = s.choose_samples(files, route="none")
    assert [sample.record["id"] for sample in group.samples] == ["p1"]
    assert group.routes == {"boxed": 2, "none": 1, "answer line": 1}
    assert "predicted answer: -" in s.render_text([group])


def test_records_judged_without_a_route_show_it_unknown(tmp_path):
    results = write_results(tmp_path, {("base", "add", "test"): half_correct(4, 1, route=None)})
    files = s.find_judged_files(results, PATTERN)
    (group,) = s.choose_samples(files)
    assert {sample.route for sample in group.samples} == {"unknown"}
    assert "route: unknown" in s.render_text([group])
    assert "<dt>route</dt><dd><pre>unknown</pre></dd>" in s.render_html([group])
    (selected,) = s.choose_samples(files, route="unknown")
    assert len(selected.samples) == 4
    (none,) = s.choose_samples(files, route="boxed")
    assert none.samples == []


def test_an_empty_selection_says_what_there_is(tmp_path):
    results = write_results(tmp_path, {("base", "add", "test"): [[judged_row(0, 0, correct=False, route="none")]]})
    groups = s.choose_samples(s.find_judged_files(results, PATTERN), verdict="correct")
    assert not groups[0].samples
    message = s.no_samples_message(groups, verdict="correct", route="boxed")
    assert message.splitlines() == [
        "no judged samples match verdict correct and route 'boxed'; what there is:",
        "  base on add (test): 1 samples, 0 correct, 1 incorrect; routes: none 1",
    ]


def test_the_html_page_escapes_untrusted_text(tmp_path):
    attack = judged_row(
        0,
        0,
        correct=False,
        generation='<script>alert("x")</script></pre><img src=x onerror=alert(1)> & \\boxed{1}',
        problem="Is 1 < 2 & 3 > 2?",
        predicted_answer="<b>1</b>",
    )
    results = write_results(tmp_path, {("base", "add", "test"): [[attack]]})
    groups = s.choose_samples(s.find_judged_files(results, PATTERN))
    page = s.render_html(groups)
    assert "<script" not in page and "<img" not in page and "<b>1" not in page
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;&lt;/pre&gt;&lt;img src=x onerror=alert(1)&gt;" in page
    assert "Is 1 &lt; 2 &amp; 3 &gt; 2?" in page
    assert page.count("<pre>") == page.count("</pre>")
    output = tmp_path / "report" / "samples.html"
    s.write_samples_html(groups, output)
    assert output.read_text() == page


def test_the_report_shows_long_generations_whole_and_the_terminal_cuts_them(tmp_path):
    long_generation = "start of the reasoning " + "x" * 5000 + " so the answer is \\boxed{4}"
    row = judged_row(2, 0, correct=True, generation=long_generation)
    results = write_results(tmp_path, {("base", "add", "test"): [[row]]})
    groups = s.choose_samples(s.find_judged_files(results, PATTERN))
    page = s.render_html(groups)
    assert "<details><summary>" in page and long_generation in page
    text = s.render_text(groups, max_chars=200)
    assert "start of the reasoning" in text and "so the answer is \\boxed{4}" in text
    assert "x" * 200 not in text and "characters cut; --full shows them" in text
    assert long_generation in s.render_text(groups, max_chars=None)


def test_a_sample_shows_what_its_record_holds(tmp_path):
    choice = judged_row(
        0,
        0,
        correct=True,
        problem="Which is even?",
        options="A. 3\nB. 4",
        expected_answer="B",
        judge_correct=False,
        judgement="Judgement: no",
    )
    program = {
        "id": "f1",
        "problem": "Write add(x).",
        "generation": "```python\ndef add(x): return x\n```",
        "predicted_answer": "def add(x): return x",
        "symbolic_correct": False,
        "execution_status": "failed",
        "execution_error": "AssertionError",
    }
    results = write_results(tmp_path, {("base", "mc", "test"): [[choice]], ("base", "code", "test"): [[program]]})
    code, multiple_choice = s.choose_samples(s.find_judged_files(results, PATTERN))
    fields = dict(s.sample_fields(multiple_choice.samples[0]))
    assert fields["options"] == "A. 3\nB. 4" and fields["expected answer"] == "B"
    assert fields["verdict"] == "correct (symbolic_correct true, judge_correct false)"
    assert fields["judgement"] == "Judgement: no"
    fields = dict(s.sample_fields(code.samples[0]))
    assert "expected answer" not in fields and fields["execution"] == "failed: AssertionError"
    assert s.sample_origin(code.samples[0]) == "rs0 row 1, id f1"
    # the LLM judge's verdict chooses with score judge_correct; a record without it names its file and row
    (by_judge,) = s.choose_samples(s.find_judged_files(results, PATTERN)[1:], score="judge_correct")
    assert [sample.correct for sample in by_judge.samples] == [False]
    with pytest.raises(SnakeskillsError, match=r"output-rs0.jsonl: row 1: no 'judge_correct' field"):
        s.choose_samples(s.find_judged_files(results, PATTERN)[:1], score="judge_correct")


def test_the_results_folder_and_names_are_checked(results, tmp_path):
    top = results.parent
    assert s.experiment_folder(top, PATTERN) == results
    assert s.experiment_folder(results, PATTERN) == results
    with pytest.raises(SnakeskillsError, match="no results folder .*missing"):
        s.experiment_folder(tmp_path / "missing", PATTERN)
    write_results(top / "other", {("base", "add", "test"): half_correct(2, 1)})
    with pytest.raises(SnakeskillsError, match="several experiments; name one of .*exp, .*other"):
        s.experiment_folder(top, PATTERN)
    (tmp_path / "empty").mkdir()
    with pytest.raises(SnakeskillsError, match="holds no judged samples"):
        s.experiment_folder(tmp_path / "empty", PATTERN)
    # chunk files beside the merged seed files are not samples of their own
    write_jsonl(results / "judge/base/add/test/rs0/chunk0-of-1.jsonl", [judged_row(0, 0, correct=True)])
    files = s.find_judged_files(results, PATTERN)
    assert len(files) == 5
    with pytest.raises(SnakeskillsError, match="no model 'bse' in .*; models there: base, sft-round1"):
        s.select_files(files, models=["bse"], where=str(results))
    with pytest.raises(SnakeskillsError, match="no split 'dev' in .*; splits there: test, train"):
        s.select_files(files, splits=["dev"], where=str(results))
    with pytest.raises(SnakeskillsError, match="no judged samples of model sft-round1, benchmark any on split train"):
        s.select_files(files, models=["sft-round1"], splits=["train"], where=str(results))
    with pytest.raises(SnakeskillsError, match="hold no judged samples yet"):
        s.select_files([], where=str(results))


def test_the_rules_files_are_labelled_by_their_runs(tmp_path):
    paths = [tmp_path / "a.jsonl", tmp_path / "b.jsonl"]
    files = s.labelled_files(paths, [("base", "add", 0), ("sft-round1", "add", 1)], "test")
    assert [(file.model, file.benchmark, file.split, file.seed) for file in files] == [
        ("base", "add", "test", 0),
        ("sft-round1", "add", "test", 1),
    ]
    with pytest.raises(SnakeskillsError, match="2 judged files but 1"):
        s.labelled_files(paths, [("base", "add", 0)], "test")


def test_the_report_page_gives_each_groups_routes_and_the_runs_warnings(tmp_path):
    """The overview tables how each model's answers were found (a fallback marked), and the run's warnings
    (eval/warnings.json) open the page, escaped; without the file the section is left out."""
    rows = [judged_row(index, 0, correct=True, route="regex fallback" if index < 3 else "boxed") for index in range(4)]
    results = write_results(tmp_path, {("base", "add", "test"): [rows]})
    groups = s.choose_samples(s.find_judged_files(results, PATTERN))
    assert s.route_shares(groups[0]) == "regex fallback * 75%, boxed 25%"
    warning = "base on add (eval split): 75.0% of the correct verdicts (3 of 4) rest on a fallback <regex>"
    page = s.render_html(groups, warnings=[warning])
    assert "<td>regex fallback * 75%, boxed 25%</td>" in page
    assert '<h2 id="warnings">Warnings (1)</h2>' in page and "fallback &lt;regex&gt;</li>" in page
    assert "<h2>Warnings</h2><p>none</p>" in s.render_html(groups, warnings=[])
    assert "Warnings" not in s.render_html(groups)


# ---- tool calls (issue 65, item 14): the calls counted, the tools' outputs marked apart from the model's text


def tool_row(**extra) -> dict:
    generation = "<calc>37*84</calc><out>3108</out>\\boxed{3108}"
    row = judged_row(
        0,
        0,
        correct=True,
        problem="37*84",
        generation=generation,
        predicted_answer="3108",
        code_rounds_executed=1,
        num_code_timeouts=0,
        code_execution_time=0.0,
        tool_errors=0,
        tool_call_over_limit=False,
        tool_output_spans=[[18, 33]],
    )
    return {**row, **extra}


def test_the_samples_command_shows_the_calls_and_marks_what_the_tool_wrote(tmp_path, capsys):
    from snakeskills.cli import main

    markdown = (
        "Let me compute it.\n```python\n17**5 - 3**9\n```\n```output\n1400174\n```\nThe answer is \\boxed{1400174}."
    )
    start = markdown.index("```output")
    python = tool_row(
        generation=markdown,
        tool_output_spans=[[start, start + len("```output\n1400174\n```\n")]],
        code_rounds_executed=2,
        tool_errors=1,
        num_code_timeouts=1,
        code_execution_time=10.25,
        tool_call_over_limit=True,
    )
    results = write_results(
        tmp_path / "exp", {("base", "add", "test"): [[tool_row()]], ("base", "py", "test"): [[python]]}
    )
    main(["samples", str(results)])
    out = capsys.readouterr().out
    assert "generation: <calc>37*84</calc>[tool output]<out>3108</out>[end of tool output]\\boxed{3108}" in out
    assert "tools: 1 call, 0 errors, 0 timeouts, 0 s\n" in out
    # the model's next line after a marked output starts a line of its own
    assert "    ```\n    [tool output]```output\n    1400174\n    ```[end of tool output]\n    The answer is" in out
    assert "tools: 2 calls, 1 error, 1 timeout, 10.25 s; stopped at tools.max_calls\n" in out


def test_a_priced_sample_shows_its_cost_and_its_calls_by_tool(tmp_path):
    log = [{"tool": "calculator", "cost": 0.01}, {"tool": "expert", "cost": 1.05}, {"tool": "expert", "cost": 1.0}]
    row = tool_row(code_rounds_executed=3, cost=2.06, tool_call_log=log)
    results = write_results(tmp_path, {("base", "add", "test"): [[row]]})
    (group,) = s.choose_samples(s.find_judged_files(results, PATTERN))
    assert (
        dict(s.sample_fields(group.samples[0]))["tools"]
        == "3 calls (calculator 1, expert 2), 0 errors, 0 timeouts, 0 s, cost 2.06"
    )


def test_samples_without_tools_show_no_tool_fields(results):
    for group in s.choose_samples(s.find_judged_files(results, PATTERN)):
        for sample in group.samples:
            fields = dict(s.sample_fields(sample))
            assert "tools" not in fields and fields["generation"] == sample.record["generation"]


def test_the_report_boxes_the_tool_outputs_escaped(tmp_path):
    row = tool_row(generation="<calc>1</calc><out><script>x</script></out>\\boxed{1}", tool_output_spans=[[14, 43]])
    results = write_results(tmp_path, {("base", "add", "test"): [[row]]})
    page = s.render_html(s.choose_samples(s.find_judged_files(results, PATTERN)))
    assert (
        '&lt;calc&gt;1&lt;/calc&gt;<span class="tool-output" title="a tool\'s output">&lt;out&gt;&lt;script&gt;x&lt;'
        "/script&gt;&lt;/out&gt;</span>\\boxed{1}" in page
    )
    assert "<script" not in page


def test_with_parse_reasoning_the_whole_transcript_is_marked_and_bad_spans_name_the_row(tmp_path):
    full = "<think>try <calc>2*3</calc><out>6</out></think>so \\boxed{6}"
    row = tool_row(generation="so \\boxed{6}", _full_generation=full, tool_output_spans=[[27, 39]])
    results = write_results(tmp_path, {("base", "add", "test"): [[row], [tool_row(tool_output_spans=[[18, 99]])]]})
    (group,) = s.choose_samples(s.find_judged_files(results, PATTERN)[:1])
    assert dict(s.sample_fields(group.samples[0]))["generation"] == (
        "<think>try <calc>2*3</calc>[tool output]<out>6</out>[end of tool output]</think>so \\boxed{6}"
    )
    with pytest.raises(SnakeskillsError, match=r"output-rs1.jsonl: row 1: tool_output_spans: the tool output span"):
        s.render_text(s.choose_samples(s.find_judged_files(results, PATTERN)[1:]))
