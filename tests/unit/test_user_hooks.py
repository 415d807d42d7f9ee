"""A user's own ``module:function`` hooks (``judge.extraction``, ``judge.equivalence``, ``metrics``), called
through one place (``snakeskills.registry``): what a user's function raises, on a row or while its module is
imported, stops with the project's error (the config key, the function, the row, the exception's last line and
where in the user's file), in the console and in the job's log, with a non-zero exit and no output written."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import yaml
from conftest import DEFAULT_CONFIG, checked_config, rule_judge
from test_metrics import write_seed_files

from snakeskills import registry
from snakeskills.errors import SnakeskillsError
from snakeskills.io import write_jsonl
from snakeskills.judging.extractors import extract_answer
from snakeskills.judging.judge import judge_records, judge_verdicts
from snakeskills.results.named_metrics import compute_named_metrics
from snakeskills.results.summarize import write_benchmark_summary

HOOKS = """
def last_word(text, regex):
    return text.split()[-1]


def strict_number(text, regex):
    return str(int(text.split("=")[-1]))


def same_number(expected, predicted):
    return int(expected) == int(predicted)


def picky(expected, predicted):
    if predicted == "x":
        raise ValueError("cannot compare\\nan answer of x")
    return expected == predicted


def level_counts(problems, *, field="level"):
    counts = {}
    for samples in problems:
        for row in samples:
            counts[row[field]] = counts.get(row[field], 0) + 1
    return counts


def first_of_each(problems):
    return {"first": [samples[3] for samples in problems]}


def mean_of_nothing(problems):
    return {"mean": sum(()) / len([])}
"""


@pytest.fixture
def hooks(tmp_path, monkeypatch):
    """A user's module of hooks, importable as ``my_hooks`` (on sys.path, as a workflow's folder is)."""
    (tmp_path / "my_hooks.py").write_text(HOOKS)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    yield tmp_path
    sys.modules.pop("my_hooks", None)


JUDGE = {"extraction": "boxed", "regex": None, "equivalence": "exact", "timeout_seconds": 5, "memory_limit_mb": None}


def records(*generations: str, expected: str = "2") -> list[dict]:
    return [
        {"id": f"r{index}", "expected_answer": expected, "generation": generation}
        for index, generation in enumerate(generations)
    ]


# ---------------------------------------------------------------- the one place: registry.Chosen


def test_a_users_function_that_raises_on_a_row_names_key_function_row_and_last_line(hooks):
    chosen = registry.choose({}, "my_hooks:picky", "judge.equivalence")
    rows = registry.RowsOf(records("a", "b"), "chunk.jsonl")
    assert chosen.call(rows.at(0), "2", "2") is True
    with pytest.raises(registry.UserFunctionError) as raised:
        chosen.call(rows.at(1), "2", "x")
    assert str(raised.value) == (
        "config key judge.equivalence: 'my_hooks:picky' raised on row 2 of chunk.jsonl (id 'r1'): "
        "ValueError: an answer of x (my_hooks.py, line 16, in picky)"
    )
    assert isinstance(raised.value, SnakeskillsError) and isinstance(raised.value.__cause__, ValueError)
    # the log gets the user's part of the traceback, not ours
    details = raised.value.details
    assert details.startswith("Traceback (most recent call last):\n")
    assert 'my_hooks.py", line 16, in picky' in details and "registry.py" not in details
    assert details.endswith("ValueError: cannot compare\nan answer of x")


def test_a_row_the_caller_cannot_name_shows_the_arguments_and_a_builtin_is_not_wrapped(hooks):
    with pytest.raises(
        registry.UserFunctionError, match=r"raised on the arguments \('2', 'x'\): ValueError: an answer of x"
    ):
        registry.choose({}, "my_hooks:picky", "judge.equivalence").call(None, "2", "x")
    long_text = "many words " * 50 + "=seven"
    with pytest.raises(registry.UserFunctionError, match=r"raised on the arguments \('many words .*\.\.\..*', None\)"):
        registry.choose({}, "my_hooks:strict_number", "judge.extraction").call(None, long_text, None)

    def builtin(text):
        raise KeyError(text)

    with pytest.raises(KeyError):  # a built-in's failure is ours: its own traceback, not a user's error
        registry.choose({"builtin": builtin}, "builtin", "judge.extraction").call("row 1", "x")


@pytest.mark.parametrize(
    ("source", "message"),
    [
        (
            "def f(text, regex:\n    return text\n",
            r"config key judge\.extraction: 'broken_hook:f': module 'broken_hook' fails while it is imported: "
            r"SyntaxError: .* \(broken_hook\.py, line 1\)$",
        ),
        (
            "import json\nSETTINGS = json.loads('{not json')\n",
            r"config key judge\.extraction: 'broken_hook:f': module 'broken_hook' fails while it is imported: "
            r"json\.decoder\.JSONDecodeError: Expecting property name enclosed in double quotes: line 1 column 2 "
            r"\(char 1\) \(broken_hook\.py, line 2, in <module>\)$",
        ),
        (
            "import a_dependency_not_installed\n",
            r"module 'broken_hook' fails while it is imported: ModuleNotFoundError: No module named "
            r"'a_dependency_not_installed' \(broken_hook\.py, line 1, in <module>\)$",
        ),
    ],
)
def test_a_module_that_fails_while_it_is_imported_names_the_key_and_its_error(tmp_path, monkeypatch, source, message):
    (tmp_path / "broken_hook.py").write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    try:
        with pytest.raises(registry.UserFunctionError, match=message) as raised:
            registry.load_user_function("broken_hook:f", "judge.extraction")
        assert 'broken_hook.py", line' in raised.value.details
    finally:
        sys.modules.pop("broken_hook", None)


def test_a_module_that_is_not_there_says_how_to_make_it_importable():
    with pytest.raises(SnakeskillsError, match=r"module 'nowhere_hooks' does not import .*PYTHONPATH"):
        registry.load_user_function("nowhere_hooks:f", "metrics.mine.function")


def user_config(judge: dict | None = None, metrics: dict | None = None) -> dict:
    config = yaml.safe_load(DEFAULT_CONFIG.read_text())
    config["judge"] = judge or {}
    config["metrics"] = metrics or {}
    return config


@pytest.mark.parametrize(
    ("config", "key"),
    [
        (user_config(judge={"extraction": "raising_hook:f"}), "judge.extraction"),
        (user_config(judge={"equivalence": "raising_hook:f"}), "judge.equivalence"),
        (user_config(metrics={"mine": {"function": "raising_hook:f"}}), r"metrics\.mine\.function"),
    ],
)
def test_the_plan_stops_on_a_hook_that_fails_while_it_is_imported(tmp_path, monkeypatch, config, key):
    (tmp_path / "raising_hook.py").write_text("def f(*args):\n    pass\n\nraise RuntimeError('no settings file')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    try:
        with pytest.raises(
            SnakeskillsError,
            match=rf"^config key {key}: 'raising_hook:f': module 'raising_hook' fails while it is imported: "
            r"RuntimeError: no settings file \(raising_hook\.py, line 4, in <module>\)$",
        ):
            checked_config(config)
    finally:
        sys.modules.pop("raising_hook", None)


# ---------------------------------------------------------------- judge.extraction and judge.equivalence


def test_a_users_extraction_that_raises_names_the_row_of_the_judged_file(hooks):
    judge = rule_judge(JUDGE, extraction="my_hooks:strict_number")
    with pytest.raises(
        SnakeskillsError,
        match=r"^config key judge\.extraction: 'my_hooks:strict_number' raised on row 2 of chunk\.jsonl \(id 'r1'\): "
        r"ValueError: invalid literal for int\(\) with base 10: ' two' \(my_hooks\.py, line 7, in strict_number\)$",
    ):
        judge_records(records("1+1=2", "1+1= two", "1+1=3"), judge, num_workers=1, source="chunk.jsonl")
    # without the file (GRPO's rewards): the row and its id
    with pytest.raises(SnakeskillsError, match=r"raised on row 1 \(id 'r0'\): IndexError: list index out of range"):
        judge_records(records(""), judge.replace(extraction="my_hooks:last_word"), num_workers=1)


def test_a_users_equivalence_that_raises_names_the_row_or_the_pair(hooks):
    judge = rule_judge(JUDGE, equivalence="my_hooks:same_number")
    assert [row["symbolic_correct"] for row in judge_records(records(r"\boxed{02}"), judge, num_workers=1)] == [True]
    with pytest.raises(
        SnakeskillsError,
        match=r"^config key judge\.equivalence: 'my_hooks:same_number' raised on row 2 of chunk\.jsonl \(id 'r1'\): "
        r"ValueError: invalid literal for int\(\) with base 10: 'two' \(my_hooks\.py, line 11, in same_number\)$",
    ):
        judge_records(records(r"\boxed{2}", r"\boxed{two}"), judge, num_workers=1, source="chunk.jsonl")
    # answers compared apart from rows (synthesis's majority labels): the pair
    with pytest.raises(SnakeskillsError, match=r"raised on the arguments \('2', 'two'\): ValueError"):
        judge_verdicts([("2", "2"), ("2", "two")], judge, num_workers=1)
    with pytest.raises(SnakeskillsError, match=r"raised on the arguments \('1\+1= two', None\): ValueError"):
        extract_answer("1+1= two", method="my_hooks:strict_number", regex=None)


# ---------------------------------------------------------------- metrics


def judged_problems(levels: list) -> list[list[dict]]:
    """Two seeds of one row per problem, problem p with ``level`` levels[p] (None: no level field)."""
    return [
        [
            {
                "id": f"p{index}",
                "predicted_answer": "1",
                "symbolic_correct": seed == 0,
                "num_generated_tokens": 5,
                **({"level": level} if level is not None else {}),
            }
            for seed in range(2)
        ]
        for index, level in enumerate(levels)
    ]


def metric_spec(function: str, **options) -> dict[str, dict]:
    return {"mine": {"function": function, "options": options, "key": "metrics.mine"}}


def test_a_users_metric_that_raises_names_the_row_it_held(hooks):
    paths = write_seed_files(hooks / "judged", judged_problems([1, 2, None, 1]))
    with pytest.raises(SnakeskillsError) as raised:
        compute_named_metrics("b", metric_spec("my_hooks:level_counts"), paths)
    assert str(raised.value) == (
        f"config key metrics.mine: 'my_hooks:level_counts' raised on row 3 of {paths[0]} (id 'p2'): "
        "KeyError: 'level' (my_hooks.py, line 24, in level_counts)"
    )


def test_a_users_metric_names_the_problem_it_held_or_no_row(hooks):
    paths = write_seed_files(hooks / "judged", judged_problems([1, 2]))
    with pytest.raises(
        SnakeskillsError,
        match=r"^config key metrics\.mine: 'my_hooks:first_of_each' raised on problem 'p0' \(row 1 of each seed "
        r"file\): IndexError: list index out of range \(my_hooks\.py, line 29, in <listcomp>\)$",
    ):
        compute_named_metrics("b", metric_spec("my_hooks:first_of_each"), paths)
    with pytest.raises(
        SnakeskillsError,
        match=r"^config key metrics\.mine: 'my_hooks:mean_of_nothing' raised: ZeroDivisionError: division by zero "
        r"\(my_hooks\.py, line 33, in mean_of_nothing\)$",
    ):
        compute_named_metrics("b", metric_spec("my_hooks:mean_of_nothing"), paths)


def test_a_failing_metric_leaves_no_summary_file(hooks):
    paths = write_seed_files(hooks / "judged", judged_problems([1, None]))
    out = hooks / "summary"
    with pytest.raises(SnakeskillsError, match=r"raised on row 2 of .*output-rs0\.jsonl \(id 'p1'\): KeyError"):
        write_benchmark_summary(
            "b",
            paths,
            metric_spec("my_hooks:level_counts"),
            metrics_path=out / "metrics.json",
            table_path=out / "metrics.txt",
            problems_path=out / "problems.jsonl",
        )
    assert not out.exists() or list(out.iterdir()) == []


# ---------------------------------------------------------------- the job: console, log, exit status, no output


def test_a_job_whose_hook_raises_says_so_in_the_console_and_its_log_and_writes_nothing(hooks):
    write_jsonl(hooks / "chunk.jsonl", records("1+1=2", "1+1= two"))
    settings = {**JUDGE, "extraction": "my_hooks:strict_number"}
    command = [sys.executable, "-m", "snakeskills.cli", "judge", "--settings-json", json.dumps(settings)]
    command += ["--threads", "1", "--input", "chunk.jsonl", "--output", "judged.jsonl", "--log", "judge.log"]
    process = subprocess.run(command, capture_output=True, text=True, cwd=hooks, timeout=120)
    message = (
        "config key judge.extraction: 'my_hooks:strict_number' raised on row 2 of chunk.jsonl (id 'r1'): "
        "ValueError: invalid literal for int() with base 10: ' two' (my_hooks.py, line 7, in strict_number)"
    )
    assert process.returncode == 1, process.stderr
    assert process.stderr.endswith(f"snakeskills error: {message} (log: judge.log)\n")
    assert "Traceback" not in process.stderr
    log = (hooks / "judge.log").read_text()
    assert f"ERROR: {message}\nTraceback (most recent call last):\n" in log
    assert 'my_hooks.py", line 7, in strict_number' in log and log.rstrip().endswith("' two'")
    assert sorted(path.name for path in hooks.iterdir() if "judged" in path.name) == []


def test_a_jobs_unexpected_error_leaves_its_traceback_in_the_log_as_well_as_on_the_console(tmp_path):
    script = "from snakeskills.job import script_logging\nwith script_logging('job.log'):\n    print(1 / 0)\n"
    process = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=tmp_path, timeout=60)
    assert process.returncode == 1 and process.stderr.rstrip().endswith("ZeroDivisionError: division by zero")
    log = (tmp_path / "job.log").read_text()
    assert "ERROR: job failed\nTraceback (most recent call last):" in log
    assert log.rstrip().endswith("ZeroDivisionError: division by zero")
