"""YAML prompt templates: shipped ones, user files, few-shot blocks, overrides, chat templates, errors."""

from __future__ import annotations

import pytest

from snakeskills.errors import SnakeskillsError
from snakeskills.prompts import (
    build_messages,
    fill_template,
    format_prompt,
    render_messages,
    resolve_prompt,
    shipped_templates,
)

PROMPT_DEFAULTS = {
    "template": None,
    "system": None,
    "user": None,
    "num_few_shot": None,
    "chat_template": False,
    "chat_template_kwargs": {},
}


def prompt_config(**keys):
    return {**PROMPT_DEFAULTS, **keys}


def test_shipped_templates_exist():
    assert {"generic-math", "generic-math-fewshot", "judge-math"} <= set(shipped_templates())


def test_generic_math_asks_for_boxed_answer():
    prompt = resolve_prompt(prompt_config(template="generic-math"))
    text = format_prompt(prompt, {"problem": "What is $2+2$?"})
    assert text.endswith("What is $2+2$?")
    assert "\\boxed{}" in text  # the doubled braces in the YAML are literal braces


def test_few_shot_examples_fill_the_examples_placeholder():
    all_examples = resolve_prompt(prompt_config(template="generic-math-fewshot"))
    two = resolve_prompt(prompt_config(template="generic-math-fewshot", num_few_shot=2))
    none = resolve_prompt(prompt_config(template="generic-math-fewshot", num_few_shot=0))
    record = {"problem": "What is 6*7?"}
    assert format_prompt(all_examples, record).count("Problem:") == 5
    text = format_prompt(two, record)
    assert text.count("Problem:") == 3
    assert "\\boxed{72}" in text and "\\frac{5}{6}" in text  # example braces are kept as written
    assert text.endswith("Problem:\nWhat is 6*7?\n\nSolution:\n")
    assert format_prompt(none, record).count("Problem:") == 1


def test_user_file_and_config_overrides(tmp_path):
    path = tmp_path / "mine.yaml"
    path.write_text(
        "system: 'You are terse.'\n"
        "user: 'Q{examples}: {problem} [{id}]'\n"
        "few_shot:\n  template: '({problem}->{answer})'\n  separator: ''\n"
        "  examples: [{problem: a, answer: '1'}, {problem: b, answer: '2'}]\n"
    )
    prompt = resolve_prompt(prompt_config(template=str(path), num_few_shot=1))
    assert prompt["system"] == "You are terse."
    assert format_prompt(prompt, {"problem": "x", "id": "p1"}) == "You are terse.Q(a->1): x [p1]"
    overridden = resolve_prompt(prompt_config(template=str(path), user="{problem}?", system=""))
    assert format_prompt(overridden, {"problem": "x"}) == "x?"


def test_chat_template_of_a_real_tokenizer_is_applied():
    from snakeskills.models.tiny_model import build_char_tokenizer

    prompt = resolve_prompt(prompt_config(system="Add.", user="{problem}=", chat_template=True))
    assert format_prompt(prompt, {"problem": "2+3"}, build_char_tokenizer()) == "<s>S: Add.\nU: 2+3=\nA: "


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("user: [1, 2]\n", "'user'"),
        ("system: hi\n", "'user'"),
        ("user: '{problem}'\nshots: []\n", "unknown key"),
        ("user: '{problem'\n", "not a valid format string"),
        ("user: '{problem}'\nfew_shot: {template: '{q}'}\n", "few_shot"),
        ("user: [unclosed\n", "not valid YAML"),
    ],
)
def test_bad_template_files_name_the_file(tmp_path, content, message):
    path = tmp_path / "bad.yaml"
    path.write_text(content)
    with pytest.raises(SnakeskillsError, match=message) as error:
        resolve_prompt(prompt_config(template=str(path)))
    assert str(path) in str(error.value)


def test_unknown_template_names_the_key_and_the_shipped_ones():
    with pytest.raises(SnakeskillsError, match="prompt.template") as error:
        resolve_prompt(prompt_config(template="generic-maths"))
    assert "generic-math" in str(error.value)


def test_too_many_few_shot_examples_names_the_key():
    with pytest.raises(SnakeskillsError, match="prompt.num_few_shot"):
        resolve_prompt(prompt_config(template="generic-math-fewshot", num_few_shot=99))
    with pytest.raises(SnakeskillsError, match="prompt.num_few_shot"):
        resolve_prompt(prompt_config(template="generic-math", num_few_shot=1))


def test_a_user_template_is_required():
    with pytest.raises(SnakeskillsError, match="prompt.user"):
        resolve_prompt(prompt_config())


def test_few_shot_template_ships_the_stop_strings_it_needs():
    from snakeskills.backends import sampling_params
    from snakeskills.settings.generation import Sampling

    prompt = resolve_prompt(prompt_config(template="generic-math-fewshot"))
    assert prompt["stop"] == ["\nProblem:"]
    sampling = Sampling.filled(
        {"temperature": 0.0, "top_p": 1.0, "top_k": 0, "max_new_tokens": 8, "stop": ["###", "\nProblem:"]}
    )
    assert sampling_params(sampling, prompt).stop == ("###", "\nProblem:")  # added once
    assert resolve_prompt(prompt_config(template="generic-math"))["stop"] == []


def test_stop_in_a_template_file_must_be_a_list_of_strings(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("user: '{problem}'\nstop: '\\n'\n")
    with pytest.raises(SnakeskillsError, match="key 'stop' must be a list of non-empty strings"):
        resolve_prompt(prompt_config(template=str(path)))


def test_fill_template_fills_fields():
    assert fill_template("Q: {problem} ({id})", {"id": "p1", "problem": "2+2"}) == "Q: 2+2 (p1)"


def test_fill_template_missing_field_names_it():
    with pytest.raises(SnakeskillsError) as error:
        fill_template("Solve {question}", {"id": "p7", "problem": "2+2"})
    message = str(error.value)
    assert "'question'" in message
    assert "'p7'" in message
    assert "problem" in message  # lists the fields the record has


def test_fill_template_doubled_braces_are_literal():
    template = "Put the answer in \\boxed{{}}: {problem}"
    assert fill_template(template, {"problem": "1+1"}) == "Put the answer in \\boxed{}: 1+1"
    assert fill_template("{{problem}}", {"problem": "x"}) == "{problem}"


def test_fill_template_invalid_format_string():
    with pytest.raises(SnakeskillsError, match="not a valid format string"):
        fill_template("unbalanced {problem", {"problem": "x"})


def test_build_and_render_messages_without_chat_template():
    config = {
        "system": "Be brief. ",
        "user": "Q: {problem}",
        "examples": "",
        "chat_template": False,
        "chat_template_kwargs": {},
        "stop": [],
    }
    messages = build_messages(config, {"problem": "3*4"})
    assert messages == [{"role": "system", "content": "Be brief. "}, {"role": "user", "content": "Q: 3*4"}]
    assert render_messages(messages, chat_template=False, chat_template_kwargs={}) == "Be brief. Q: 3*4"
    no_system = build_messages({**config, "system": None}, {"problem": "3*4"})
    assert no_system == [{"role": "user", "content": "Q: 3*4"}]


def test_render_messages_chat_template_needs_a_tokenizer():
    messages = [{"role": "user", "content": "hi"}]
    with pytest.raises(SnakeskillsError, match="chat_template"):
        render_messages(messages, chat_template=True, chat_template_kwargs={}, tokenizer=None)

    class NoTemplate:
        chat_template = None

    with pytest.raises(SnakeskillsError, match="chat_template"):
        render_messages(messages, chat_template=True, chat_template_kwargs={}, tokenizer=NoTemplate())

    class WithTemplate:
        chat_template = "{{ messages }}"

        def apply_chat_template(self, messages, tokenize, add_generation_prompt):
            assert tokenize is False and add_generation_prompt is True
            return "<|user|>" + messages[-1]["content"] + "<|assistant|>"

    assert (
        render_messages(messages, chat_template=True, chat_template_kwargs={}, tokenizer=WithTemplate())
        == "<|user|>hi<|assistant|>"
    )
