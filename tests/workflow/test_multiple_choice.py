"""Multiple-choice benchmarks, and a benchmark's own prompt and judge.

Preparing (``multiple_choice``: lettered options, the correct letter, a seeded shuffle), extracting and judging
option letters (``judge.extraction: multichoice``), and the plan giving each benchmark its question and its judge
in every job that asks or judges it. The presets on their real Hub layouts are in test_prepare_data.py; the last
test runs a mixed run (arithmetic and an MMLU-style benchmark) through Snakemake on the real SmolLM2.
"""

from __future__ import annotations

import copy
import json
import re
import string
from collections import Counter
from pathlib import Path

import pytest
import yaml
from conftest import DEFAULT_CONFIG, checked_config, rule_judge, run_snakemake, teacher_section, write_config
from dataset_fixtures import MMLU_TEST

from snakeskills.data.prepare import prepare_split
from snakeskills.data.specs import preparing_spec, resolve_benchmark_spec
from snakeskills.errors import SnakeskillsError
from snakeskills.io import read_jsonl, write_jsonl
from snakeskills.judging.extractors import extract_answer, extract_choice, extract_choice_strict, option_named_by_value
from snakeskills.judging.judge import exact_match, judge_records
from snakeskills.plan.layout import Layout
from snakeskills.plan.run import Plan
from snakeskills.plan.sections import benchmark_judge
from snakeskills.prompts import build_messages, resolve_prompt
from snakeskills.training.sft_data import select_sft_records

DEFAULT = yaml.safe_load(DEFAULT_CONFIG.read_text())
MCQ_ROWS = [{"question": "2+2?", "choices": ["3", "4", "5"], "answer": 1, "uid": "q1"}]


def mcq_spec(path, **choice) -> tuple[dict, dict]:
    """(a jsonl benchmark spec of ``path``, its multiple_choice settings: MCQ_ROWS' layout unless ``choice`` says)"""
    settings = {"options": "choices", "correct": {"column": "answer", "is": "index"}, **choice}
    return {"source": "jsonl", "jsonl": {"paths": {"test": str(path)}}, "field_map": {"problem": "question"}}, settings


def prepared(tmp_path, rows, **choice) -> list[dict]:
    write_jsonl(tmp_path / "mcq.jsonl", rows)
    spec, settings = mcq_spec(tmp_path / "mcq.jsonl", **choice)
    return prepare_split("mcq", resolve_benchmark_spec("mcq", {**spec, "multiple_choice": settings}), "test")


# ---------------------------------------------------------------- preparing


def test_options_in_columns_and_answers_as_letters_or_texts(tmp_path):
    rows = [{"question": "Capital of France?", "a": "Paris", "b": "Rome", "key": "(a)", "text": "Paris"}]
    by_letter = prepared(tmp_path, rows, options=["a", "b"], correct={"column": "key", "is": "letter"})
    by_text = prepared(tmp_path, rows, options=["a", "b"], correct={"column": "text", "is": "text"})
    assert by_letter == by_text
    assert by_letter[0]["problem"] == "Capital of France?\nA. Paris\nB. Rome"
    assert (by_letter[0]["expected_answer"], by_letter[0]["A"], by_letter[0]["option_letters"]) == (
        "A",
        "Paris",
        "A, B",
    )


def test_shuffle_is_seeded_by_the_question_and_spreads_the_correct_letter(tmp_path):
    rows = [
        {"question": f"Which is {n}?", "choices": [str(n), str(n + 1), str(n + 2), str(n + 3)], "answer": 0}
        for n in range(60)
    ]
    shuffled = prepared(tmp_path, rows, shuffle_seed=7)
    for row, source in zip(shuffled, rows, strict=True):
        assert row[row["expected_answer"]] == source["choices"][0], "the letter names the correct option's text"
    letters = Counter(row["expected_answer"] for row in shuffled)
    assert set(letters) == set("ABCD") and max(letters.values()) < 30, letters
    reordered = prepared(tmp_path, rows[::-1], shuffle_seed=7)
    assert {row["problem"] for row in reordered} == {row["problem"] for row in shuffled}, "not tied to row order"
    assert [row["problem"] for row in prepared(tmp_path, rows, shuffle_seed=8)] != [row["problem"] for row in shuffled]
    unshuffled = prepared(tmp_path, rows)
    assert {row["expected_answer"] for row in unshuffled} == {"A"}


@pytest.mark.parametrize(
    ("row", "choice", "message"),
    [
        ({"choices": "3 or 4"}, {}, "options names column 'choices', which holds a str, not a list of options"),
        ({"answer": 3}, {}, "correct.column 'answer' holds 3, but the row has 3 options"),
        ({"answer": "two"}, {}, "holds 'two', not an option index"),
        ({"answer": "D"}, {"correct": {"column": "answer", "is": "letter"}}, "holds 'D', but the row has 3 options"),
        ({"answer": "6"}, {"correct": {"column": "answer", "is": "text"}}, "which is none of the options"),
        ({"choices": ["4", "4", "5"], "answer": "4"}, {"correct": {"column": "answer", "is": "text"}}, "matches 2"),
        ({"choices": ["3", " ", "5"]}, {}, r"option choices\[1\] is empty"),
        ({"choices": ["3"]}, {}, "1 options; a question needs 2 to 26"),
    ],
)
def test_bad_rows_stop_naming_file_row_and_key(tmp_path, row, choice, message):
    form = choice.get("correct", {"is": "index"})["is"]
    good = {**MCQ_ROWS[0], "answer": {"index": 1, "letter": "B", "text": "4"}[form]}
    with pytest.raises(SnakeskillsError, match=message) as error:
        prepared(tmp_path, [good, {**good, **row}], **choice)
    assert f"{tmp_path / 'mcq.jsonl'}: row 2" in str(error.value)


def test_a_missing_column_and_a_second_answer_source_name_the_key(tmp_path):
    import pyarrow
    import pyarrow.parquet

    pyarrow.parquet.write_table(pyarrow.Table.from_pylist(MCQ_ROWS), tmp_path / "mcq.parquet")
    spec, settings = mcq_spec(tmp_path / "mcq.parquet", correct={"column": "gold", "is": "index"})
    spec = {**spec, "source": "parquet", "parquet": spec.pop("jsonl"), "multiple_choice": settings}
    with pytest.raises(
        SnakeskillsError, match=r"benchmarks\.mcq\.multiple_choice\.correct\.column names column 'gold'"
    ):
        prepare_split("mcq", resolve_benchmark_spec("mcq", spec), "test")
    spec["field_map"] = {"problem": "question", "expected_answer": "answer"}
    with pytest.raises(SnakeskillsError, match=r"benchmarks\.mcq\.field_map\.expected_answer: the answer of a multi"):
        resolve_benchmark_spec("mcq", spec)


def test_preparing_ignores_how_a_benchmark_is_asked_and_judged():
    """prepare_data's params (its rerun trigger) hold what decides the rows: a benchmark without multiple_choice,
    code, prompt, judge or metrics gives exactly the spec runs made before those keys existed, so upgrading reruns
    nothing; a preset's metrics (mmlu's by_subject) are not in it either."""
    config = checked_config(mixed_config())
    assert preparing_spec(config["benchmarks"]["arithmetic"]) == {
        key: DEFAULT["benchmarks"]["arithmetic"][key] for key in ("source", "synthetic")
    } | {"field_map": {}}
    mmlu = config["benchmarks"]["mmlu"]
    assert preparing_spec(mmlu) == {
        key: value for key, value in mmlu.items() if key not in ("prompt", "judge", "metrics", "code")
    }, "code is not set on it (the schema's null): left out too"
    assert preparing_spec(mmlu)["multiple_choice"]["options"] == "choices"
    assert "by_subject" in mmlu["metrics"]


# ---------------------------------------------------------------- extracting and judging letters


@pytest.mark.parametrize(
    ("text", "letter"),
    [
        ("so the answer is \\boxed{C}", "C"),
        ("\\boxed{\\text{(B)}}", "B"),
        ("\\boxed{C. 42}", "C"),
        ("Reasoning... A looks wrong.\nAnswer: d", "D"),
        ("**Answer:** (C)", "C"),
        ("Answer: B\nOn reflection, Answer: A", "A"),
        ("\\boxed{42}", None),  # a number is no option: nothing extracted
        ("I think a is wrong", None),
        ("Answer: Because the gas...", None),
    ],
)
def test_the_letter_of_a_generation(text, letter):
    assert extract_choice(text, regex=None) == letter
    assert extract_answer(text, method="multichoice", regex=None) == letter
    assert extract_answer(text, method="multichoice-strict", regex=None) == letter


@pytest.mark.parametrize(
    ("text", "letter"),
    [
        # SmolLM2-135M-Instruct's own answers (sampled at temperature 0.7, tests/data/smollm2-multiple-choice.jsonl)
        ("...which gives us 20.\n\nSo, the answer is A.", "A"),
        ("The correct answer is D. 42.", "D"),
        ("B. Ag", "B"),
        ("A. Mars is a planet in the solar system.", "A"),
        ("A. 6\nB. 8\nC. 4\nD. 10", None),  # the options listed: no answer
        ("15 + 21 = 30\n\nA. 30", "A"),
        ("The capital of France is Paris.", None),  # an option's text, not its letter
        # the phrasings people and larger models write
        ("Let me think.\nThe answer is (D)", "D"),
        ("the best option would be: (c)", "C"),
        ("I pick **B** because the others fail.", "B"),
        ("Option A is tempting, but the correct choice is **(C)**.", "C"),
        ("A is correct.", "A"),
        ("Reasoning ...\n\nD", "D"),
        ("Reasoning ...\n(B).", "B"),
        ("The answer is a tricky one.", None),  # an article, not an option
        ("It is B, not C... actually the answer is C", "C"),
    ],
)
def test_the_letter_as_models_write_it_and_the_strict_reader(text, letter):
    """``multichoice`` reads the common phrasings in a documented order; ``multichoice-strict`` only the boxed
    letter and the ``Answer: X`` line, as NeMo-Skills does."""
    assert extract_answer(text, method="multichoice", regex=None) == letter
    assert extract_answer(text, method="multichoice-strict", regex=None) is None


# 60 answers of the real SmolLM2-135M-Instruct to four-option questions (10 general knowledge, 50 additions with
# shuffled options), sampled with its chat template (transformers generate, temperature 0.7, top_p 0.95, 160 new
# tokens, torch seed = row): the even rows asked as the multiple-choice template asks (end with "Answer: X"), the
# odd rows with the question and options only ("Which option is correct?")
SMOLLM2_ANSWERS = Path(__file__).parents[1] / "data" / "smollm2-multiple-choice.jsonl"


def test_most_of_smollm2s_own_answers_are_read():
    rows = read_jsonl(SMOLLM2_ANSWERS)
    assert len(rows) == 60
    strict = [extract_choice_strict(row["generation"], regex=None) for row in rows]
    letters = [extract_choice(row["generation"], regex=None) for row in rows]
    assert all(letter == read for letter, read in zip(letters, strict, strict=True) if read is not None)
    assert sum(read is not None for read in strict) == 7, "the strict reader: 7 of 60"
    assert sum(letter is not None for letter in letters) == 39, "multichoice: 39 of 60"
    for style in ("answer-line", "plain"):
        read = [letter for letter, row in zip(letters, rows, strict=True) if row["prompt_style"] == style]
        assert sum(letter is not None for letter in read) > len(read) / 2, style


ROW = {"option_letters": "A, B, C, D", "A": "87", "B": "97", "C": "86", "D": "106", "expected_answer": "A"}


@pytest.mark.parametrize(
    ("text", "letter"),
    [
        ("53 + 34 = 87", "A"),  # SmolLM2's most common unread answer in a user's run: the sum, not the letter
        ("The answer is: 97.", "B"),
        ("so \\boxed{106}", "D"),
        ("53 + 34 = 88", None),  # no option says 88
        ("I am not sure.", None),
    ],
)
def test_an_answer_given_as_an_options_text_names_that_option(text, letter):
    assert option_named_by_value(ROW, text, None) == letter
    (judged,) = judge_records(
        [{**ROW, "generation": text}], rule_judge(extraction="multichoice", regex=None), num_workers=1
    )
    assert judged["predicted_answer"] == letter and judged["symbolic_correct"] == (letter == "A")
    (strict,) = judge_records(
        [{**ROW, "generation": text}], rule_judge(extraction="multichoice-strict", regex=None), num_workers=1
    )
    assert strict["predicted_answer"] is None


def test_a_text_two_options_share_names_neither():
    assert option_named_by_value({**ROW, "B": "87"}, "53 + 34 = 87", None) is None
    assert option_named_by_value({"expected_answer": "A"}, "53 + 34 = 87", None) is None, "not a prepared row"


def test_the_asked_format_comes_before_any_phrase():
    text = "The answer is (B) at first sight.\nAnswer: C"
    assert extract_choice(text, regex=None) == "C" == extract_answer(text, method="multichoice-strict", regex=None)
    assert extract_choice("**A** looks right, but \\boxed{D}", regex=None) == "D"


def test_multichoice_verdicts_are_letter_equality_not_math():
    judge = rule_judge(extraction="multichoice", regex=None)
    records = [
        {"generation": "Answer: B", "expected_answer": "B"},
        {"generation": "Answer: b", "expected_answer": "B"},
        {"generation": "\\boxed{C}", "expected_answer": "B"},
        {"generation": "no idea", "expected_answer": "B"},
    ]
    judged = judge_records(records, judge, num_workers=1)
    assert [(row["predicted_answer"], row["symbolic_correct"]) for row in judged] == [
        ("B", True),
        ("B", True),
        ("C", False),
        (None, False),
    ]


# ---------------------------------------------------------------- the plan: each benchmark's question and judge


def mixed_config(**mmlu) -> dict:
    """The default (arithmetic, tiny model) with an MMLU-style eval benchmark beside it."""
    config = copy.deepcopy(DEFAULT)
    config["benchmarks"]["mmlu"] = {"preset": "mmlu", "hf": {"path": "/data/mmlu"}, **mmlu}
    return config


def test_each_benchmark_is_asked_and_judged_its_own_way():
    config = mixed_config()
    config["judge"]["regex"] = r"(-?\d+)"
    config["prompt"]["chat_template_kwargs"] = {}
    plan = Plan(checked_config(config), Layout.under("results/x"))
    arithmetic = plan.generation_job("base", "arithmetic", "test")["prompt"]
    mmlu = plan.generation_job("base", "mmlu", "test")["prompt"]
    assert arithmetic == config["prompt"]
    assert mmlu == {**config["prompt"], "template": "multiple-choice", "system": None, "user": None}, (
        "the benchmark's question replaces the model's (all four keys); the chat template stays the model's"
    )
    assert benchmark_judge(config, "arithmetic")["regex"] == r"(-?\d+)"
    assert benchmark_judge(config, "mmlu") == {"extraction": "multichoice", "regex": None}, "no math settings"
    assert plan.job_generation("base", "test").to_dict() == config["generation"]


def test_a_teacher_asks_the_benchmarks_question_with_its_own_chat_settings():
    config = mixed_config()
    config["teacher"] = teacher_section(name="teacher", prompt={"user": "Q: {problem}", "chat_template": True})
    plan = Plan(checked_config(config), Layout.under("results/x"))
    prompt = plan.generation_job("teacher", "mmlu", "test")["prompt"]
    assert (prompt["template"], prompt["user"], prompt["chat_template"]) == ("multiple-choice", None, True)
    assert plan.generation_job("teacher", "arithmetic", "test")["prompt"]["user"] == "Q: {problem}"


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (
            lambda config: config["benchmarks"]["mmlu"].update(judge={"extraction": "boxed"}),
            r"benchmarks\.mmlu\.judge\.extraction: benchmark 'mmlu' is multiple-choice .* judged with extraction 'box",
        ),
        (
            lambda config: config["benchmarks"]["mmlu"].update(prompt={"template": "mcq"}),
            r"config key benchmarks\.mmlu\.prompt\.template: 'mcq' is neither a shipped prompt template",
        ),
        (
            lambda config: config["benchmarks"]["mmlu"].update(judge={"regex": "(unclosed"}),
            r"config key benchmarks\.mmlu\.judge\.regex: '\(unclosed' does not compile",
        ),
        (
            lambda config: config.update(
                train_benchmarks=["arithmetic", "mmlu"],
                synthesis={"writer": "student", "label": {"solver": "student"}},
            ),
            r"config key synthesis: train benchmark 'mmlu' is multiple-choice",
        ),
    ],
)
def test_mistakes_stop_the_plan_naming_the_key(mutate, message):
    config = mixed_config()
    config["benchmarks"]["mmlu"]["hf"]["splits"] = {"test": "test", "train": "auxiliary_train"}
    mutate(config)
    with pytest.raises(SnakeskillsError, match=message):
        checked_config(config)


def test_sft_examples_are_asked_as_their_benchmark_asks(tmp_path):
    config = mixed_config()
    config["train_benchmarks"] = ["arithmetic", "mmlu"]
    plan = Plan(checked_config(config), Layout.under("results/x"))
    sources = plan.sft_judged_sources("sft-round1")
    seeds = len(plan.seeds("base", "train"))
    assert [benchmark for _, benchmark, _ in sources] == ["arithmetic"] * seeds + ["mmlu"] * seeds
    prompts = [resolve_prompt(prompt) for prompt in plan.sft_prompts("sft-round1")]
    row = {"id": "q", "problem": "2+2?\nA. 3\nB. 4", "expected_answer": "B", "option_letters": "A, B"}
    judged = {**row, "generation": "Answer: B", "symbolic_correct": True, "finish_reason": "stop"}
    write_jsonl(tmp_path / "mmlu.jsonl", [{**judged, "num_generated_tokens": 3}])
    filters = {**config["sft"]["filters"], "max_generation_tokens": None}
    records, _ = select_sft_records([tmp_path / "mmlu.jsonl"], ["base"], prompts[-1:], filters)
    assert records[0]["messages"][:-1] == build_messages(
        resolve_prompt(plan.generation_job("base", "mmlu", "train")["prompt"]), row
    )
    assert "where X is one of A, B." in records[0]["messages"][0]["content"]


# ---------------------------------------------------------------- a mixed run on the real SmolLM2


@pytest.mark.slow
def test_a_real_model_answers_an_mmlu_style_benchmark_beside_arithmetic(tmp_path, smollm2):
    """SmolLM2-135M-Instruct evaluated on arithmetic and on MMLU's layout (the preset on a local copy), through
    Snakemake: each benchmark's generate jobs render its own question with the model's chat template, and the
    judge reads letters on one and numbers on the other."""
    from dataset_fixtures import write_mmlu

    write_mmlu(tmp_path / "mmlu")
    config = yaml.safe_load((DEFAULT_CONFIG.parent / "examples/smollm2-135m-instruct-arithmetic.yaml").read_text())
    config["model"]["path"] = str(smollm2)
    config["benchmarks"]["arithmetic"]["synthetic"]["split_sizes"] = {"train": 4, "test": 4}
    config["benchmarks"]["mmlu"] = {"preset": "mmlu", "hf": {"path": str(tmp_path / "mmlu")}}
    config["generation"]["sampling"]["max_new_tokens"] = 24
    config.update(num_seeds=2, train_num_seeds=1)
    configfile = write_config(tmp_path / "mixed.yaml", config)
    results = tmp_path / "results" / config["experiment"]
    judged = f"results/{config['experiment']}/judge/smollm2-135m-instruct/{{}}/test/output-rs{{}}.jsonl"
    targets = [judged.format(name, seed) for name in ("arithmetic", "mmlu") for seed in (0, 1)]
    process = run_snakemake(tmp_path, "--cores", "2", *targets, configfile=configfile, timeout=900)
    assert process.returncode == 0, process.stdout[-4000:] + process.stderr[-4000:]

    settings = json.loads((results / "settings/generate/smollm2-135m-instruct/mmlu/test.json").read_text())
    assert "where X is one of {option_letters}" in settings["prompt"]["user"]
    log = next((results / "logs/generate/smollm2-135m-instruct/mmlu/test").rglob("*.log")).read_text()
    first_input = json.loads(re.search(r"model input of the first row .*?: (.*)$", log, re.M).group(1))
    assert first_input.startswith("<|im_start|>system\n") and first_input.endswith("<|im_start|>assistant\n")
    assert f"{MMLU_TEST[0]['question']}\nA. 0\nB. 4\nC. 2\nD. 6<|im_end|>" in first_input
    mmlu_rows = read_jsonl(results / "judge/smollm2-135m-instruct/mmlu/test/output-rs0.jsonl")
    for row in mmlu_rows:
        assert row["predicted_answer"] is None or row["predicted_answer"] in string.ascii_uppercase
        assert row["symbolic_correct"] == (row["predicted_answer"] == row["expected_answer"])
    settings = json.loads((results / "settings/generate/smollm2-135m-instruct/arithmetic/test.json").read_text())
    assert "\\boxed{{}}" in settings["prompt"]["user"], "arithmetic keeps the student's generic-math prompt"
    for row in read_jsonl(results / "judge/smollm2-135m-instruct/arithmetic/test/output-rs0.jsonl"):
        assert row["symbolic_correct"] == exact_match(row["predicted_answer"], row["expected_answer"]), row
