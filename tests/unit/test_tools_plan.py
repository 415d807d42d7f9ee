"""The tools section when the plan is made: each mistake stops the plan naming its key, before any job runs."""

from __future__ import annotations

import copy

import pytest
import yaml
from conftest import REPO, checked_config

from snakeskills.errors import SnakeskillsError
from snakeskills.plan.layout import Layout
from snakeskills.plan.run import Plan

EXAMPLE = yaml.safe_load((REPO / "config" / "examples" / "tiny-multiplication-calculator-tools.yaml").read_text())


def example(mutate=None) -> dict:
    config = copy.deepcopy(EXAMPLE)
    if mutate is not None:
        mutate(config)
    return config


def tools(**keys):
    return lambda config: config["tools"].update(keys)


def test_the_example_plans_tools_for_the_student_and_its_rounds_only():
    config = checked_config(example())
    plan = Plan(config, Layout.under("results/tiny-multiplication-tools"))
    for model in ("base", "sft-round1", "grpo-round1"):
        assert plan.generation_settings(model, "arithmetic", "test")["tools"]["tool"] == "calculator"
    assert plan.tiny_model_settings()["tools"] == config["tools"]
    assert "results/tiny-multiplication-tools/report/tool_use.png" in plan.targets()


def test_without_tools_the_plan_and_the_bootstrap_settings_are_as_before():
    def off(config):
        config["tools"] = None
        config["tiny_model"].pop("tool_completion")
        config["tiny_model"].pop("tool_share")

    plan = Plan(checked_config(example(off)), Layout.under("results/x"))
    assert plan.generation_settings("base", "arithmetic", "test")["tools"] is None
    assert not {"tools", "tool_share", "tool_completion"} & set(plan.tiny_model_settings())


def _priced_without_tools(config):
    config.update(tools=None)
    config["tiny_model"].update(tool_share=0)
    config["grpo"].update(rewards={"tool_calls": -0.1})


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (tools(tool="abacus"), "tools.tool"),
        (tools(tool="no_such_module_here:count"), "tools.tool"),
        (tools(max_calls=-1), "tools.max_calls"),
        (tools(tags="klingon"), "tools.tags"),
        (tools(tags={"code_begin": "<calc>", "code_end": ""}), "tools.tags"),
        (lambda config: config["generation"]["sampling"].update(stop=["/"]), "code_end '</calc>' holds the stop"),
        (lambda config: config["grpo"].update(rollouts="trl"), "grpo.rollouts"),
        (lambda config: config.update(tools=None), "tiny_model.tool_share"),
        (lambda config: config["tiny_model"].update(tool_completion=None), "tiny_model.tool_completion"),
        (_priced_without_tools, "grpo.rewards.tool_calls"),
    ],
)
def test_a_mistake_stops_the_plan_naming_its_key(mutate, message):
    with pytest.raises(SnakeskillsError) as raised:
        checked_config(example(mutate))
    assert message in str(raised.value), str(raised.value)


# ---- tags the loop cannot read are refused; tags that probably will not work warn (issue 65, item 13)

CALC = {"code_begin": "<calc>", "code_end": "</calc>", "code_output_begin": "<out>", "code_output_end": "</out>"}


def tags(**changed):
    return tools(tags={**CALC, **changed})


def stop(*strings):
    return lambda config: config["generation"]["sampling"].update(stop=list(strings))


def template_stop(tmp_path, *strings):
    path = tmp_path / "calc.yaml"
    path.write_text(yaml.safe_dump({"user": "{problem}=", "stop": list(strings)}))
    return lambda config: config["prompt"].update(template=str(path), user=None)


ORCHESTRATOR = yaml.safe_load((REPO / "config" / "examples" / "tiny-addition-expert-orchestrator.yaml").read_text())


def expert_tags(**changed):
    def mutate(config):
        expert = config["tools"]["models"]["expert"]
        expert["tags"] = {**expert["tags"], **changed}

    return mutate


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        # a stop string equal to code_begin: every turn stopped at the tag and no call ran, and the plan let it pass
        (stop("<calc>"), "tools.tags: code_begin '<calc>' is the stop string of generation.sampling.stop '<calc>'"),
        (stop("<ca"), "tools.tags: code_begin '<calc>' holds the stop string of generation.sampling.stop '<ca'"),
        # the loop's own stop string: code_end inside code_begin cuts every call's opening tag
        (
            tags(code_begin="<calc>", code_end="calc"),
            "tools.tags: code_begin '<calc>' holds the stop string of tools.tags.code_end (the loop ends each turn",
        ),
        # output tags that are call tags
        (tags(code_output_begin="<calc>"), "tools.tags: code_output_begin '<calc>' is code_begin of tools.tags"),
        (tags(code_output_end="<calc>"), "tools.tags: code_output_end '<calc>' is code_begin of tools.tags"),
        (tags(code_output_end="</out><calc>"), "tools.tags: code_output_end '</out><calc>' holds code_begin of"),
        (tags(code_output_begin="</calc>"), "tools.tags: code_output_begin '</calc>' is code_end of tools.tags"),
    ],
)
def test_tags_the_loop_cannot_read_stop_the_plan_naming_the_key(mutate, message):
    with pytest.raises(SnakeskillsError) as raised:
        checked_config(example(mutate))
    assert message in str(raised.value), str(raised.value)


def test_a_stop_string_of_the_prompt_template_in_code_begin_stops_the_plan(tmp_path):
    with pytest.raises(SnakeskillsError) as raised:
        checked_config(example(template_stop(tmp_path, "<calc>")))
    assert "tools.tags: code_begin '<calc>' is the stop string of prompt.template's stop '<calc>'" in str(raised.value)


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        # the expert's output blocks would open calls of the calculator
        (expert_tags(code_output_begin="<calc>"), "tools.models.expert.tags: code_output_begin '<calc>' is code_begin"),
        # the calculator's closing tag, a stop of every turn, cuts the expert's opening tag
        (expert_tags(code_begin="<ask></calc>"), "tools.models.expert.tags: code_begin '<ask></calc>' holds the stop"),
    ],
)
def test_tags_of_two_tools_that_the_loop_cannot_read_stop_the_plan(mutate, message):
    config = copy.deepcopy(ORCHESTRATOR)
    mutate(config)
    with pytest.raises(SnakeskillsError) as raised:
        checked_config(config)
    assert message in str(raised.value), str(raised.value)


def test_a_stop_string_equal_to_code_end_and_output_tags_like_markdowns_pass():
    """A turn stops at code_end anyway; markdown closes the call and its output with the same fence."""
    checked_config(example(stop("</calc>")))
    checked_config(example(tags(code_output_end="</calc>")))


def _warnings(capsys, config) -> list[str]:
    capsys.readouterr()
    checked_config(config)
    return [line for line in capsys.readouterr().err.splitlines() if line.startswith("warning: ")]


def _no_bootstrap_calls(config):
    config["tiny_model"]["tool_share"] = 0


def test_the_shipped_examples_plan_without_warnings(capsys):
    """The tiny example's bootstrap teaches its tags; the SmolLM2 example's prompt shows a call in them."""
    assert _warnings(capsys, example()) == []
    assert _warnings(capsys, copy.deepcopy(ORCHESTRATOR)) == []
    smollm2 = yaml.safe_load((REPO / "config" / "examples" / "smollm2-135m-instruct-python-tools.yaml").read_text())
    smollm2["tools"]["sandbox"] = "none"  # the plan starts no bubblewrap here
    assert _warnings(capsys, smollm2) == []


def test_tags_no_prompt_shows_and_nothing_teaches_warn_naming_the_keys(capsys):
    """The new user's letter-counting run: a preset the prompt's examples never show, 0 % of samples calling, found
    only after generation."""
    lines = _warnings(capsys, example(_no_bootstrap_calls))
    assert lines == [
        "warning: config key tools.tags: code_begin '<calc>' appears nowhere in prompt (its system and user text and "
        "few-shot examples) and no tiny_model.tool_completion teaches it: unless the model was trained on these tags "
        "it will rarely or never call the tool; show a call and its output, in these tags, in prompt's examples "
        "(docs/tools.md, Python on a real model)"
    ]

    def shown(config):
        _no_bootstrap_calls(config)
        config["prompt"]["user"] = "6*7=<calc>6*7</calc><out>42</out>\\boxed{{42}}\n{problem}="

    assert _warnings(capsys, example(shown)) == []

    def a_benchmark_prompt_that_does_not(config):
        shown(config)
        config["benchmarks"]["arithmetic"]["prompt"] = {"user": "{problem}="}

    lines = _warnings(capsys, example(a_benchmark_prompt_that_does_not))
    assert len(lines) == 1 and "appears nowhere in benchmarks.arithmetic.prompt" in lines[0], lines


def test_few_shot_examples_show_the_tags_where_the_user_text_places_them(tmp_path, capsys):
    path = tmp_path / "calc.yaml"
    few_shot = {
        "template": "{problem}={solution}",
        "separator": "\n",
        "examples": [{"problem": "6*7", "solution": "<calc>6*7</calc><out>42</out>\\boxed{42}"}],
    }
    path.write_text(yaml.safe_dump({"user": "{examples}\n{problem}=", "few_shot": few_shot}))

    def few_shot_prompt(user):
        def mutate(config):
            _no_bootstrap_calls(config)
            config["prompt"].update(template=str(path), user=user, num_few_shot=1)

        return mutate

    assert _warnings(capsys, example(few_shot_prompt(None))) == []
    lines = _warnings(capsys, example(few_shot_prompt("{problem}=")))  # the examples are not placed: not shown
    assert len(lines) == 1 and "code_begin '<calc>' appears nowhere in prompt" in lines[0], lines


def test_tags_the_prompt_is_full_of_warn_naming_the_key(capsys):
    """A code_end the prompt writes as ordinary text would end the model's turns wherever it copies the prompt."""

    def full_of_equals(config):
        config["tools"]["tags"] = {**CALC, "code_end": "="}
        config["tiny_model"]["tool_completion"] = "<calc>{problem}=<out>{expected_answer}</out>"
        config["prompt"]["user"] = "1+1=2, 2+2=4, <calc>5*5=<out>25</out>, 3+3=6. {problem}="

    lines = _warnings(capsys, example(full_of_equals))
    assert lines == [
        "warning: config key tools.tags: code_end '=' appears 4 times in prompt outside the calls it shows: the model "
        "will write it as ordinary text, and each time it ends the turn; give the tool tags the prompt does not use"
    ]


def test_the_paired_no_tools_baseline_runs_in_the_same_run_with_a_program_tool():
    """docs/tools.md: tools.baselines.without_tools gives the base model's "without tools" beside it, paired."""

    def without(config):
        config["tools"]["baselines"] = {"without_tools": True}

    plan = Plan(checked_config(example(without)), Layout.under("results/tiny-multiplication-tools"))
    assert plan.eval_models[:2] == ["base", "base-without-tools"]
    assert plan.generation_settings("base-without-tools", "arithmetic", "test")["tools"] is None
    assert plan.generation_model_inputs("base-without-tools") == plan.generation_model_inputs("base")
    assert "base-without-tools" not in plan.train_sampled_models()
    assert Plan(checked_config(example()), Layout.under("results/x")).eval_models[1] != "base-without-tools"


def _smollm2_special_tags(backend: str, folder):
    def mutate(config):
        config["model"].update(build_tiny=False, path=str(folder))
        config["generation"]["backend"] = backend
        config["tools"]["tags"] = {
            "code_begin": "<jupyter_code>",
            "code_end": "<jupyter_output>",
            "code_output_begin": "<jupyter_text>",
            "code_output_end": "<jupyter_script>",
        }
        config["tiny_model"].pop("tool_completion")
        config["tiny_model"].pop("tool_share")

    return mutate


def test_special_token_tags_plan_on_hf_and_stop_the_plan_on_backends_that_return_text(tmp_path):
    """Item 3 of issue 65: the loop reads hf's token ids with special tokens written out, so tags that are special
    tokens (SmolLM2's ``<jupyter_code>``) make calls there (tests/components/test_tool_ids.py); vLLM and an OpenAI
    server return text without them: refused with the reason, the llama3 preset even where no tokenizer is read."""
    from transformers import AutoTokenizer

    from snakeskills.models.pretrained import packaged_model_folder

    folder = tmp_path / "tokenizer-only"
    AutoTokenizer.from_pretrained(packaged_model_folder("smollm2-135m-instruct")).save_pretrained(folder)
    checked_config(example(_smollm2_special_tags("hf", folder)))
    with pytest.raises(SnakeskillsError, match=r"tools.tags: code_begin '<jupyter_code>'.*backend: hf"):
        checked_config(example(_smollm2_special_tags("vllm", folder)))

    def llama3_on_vllm(config):  # the tiny model: no tokenizer folder to read
        config["generation"]["backend"] = "vllm"
        config["tools"]["tags"] = "llama3"

    with pytest.raises(SnakeskillsError, match="llama3 preset"):
        checked_config(example(llama3_on_vllm))


# tools through the chat template (tools.format: chat_template)

CHAT_EXAMPLE = yaml.safe_load(
    (REPO / "config" / "examples" / "smollm2-135m-instruct-chat-template-tools.yaml").read_text()
)


def chat_example(mutate=None) -> dict:
    config = copy.deepcopy(CHAT_EXAMPLE)
    if mutate is not None:
        mutate(config)
    return config


def test_the_chat_template_example_offers_the_calculator_as_a_function_to_every_prompt_that_calls():
    from snakeskills.tools.chat_turns import template_text

    config = checked_config(chat_example())
    plan = Plan(config, Layout.under("results/chat"))
    tools = plan.generation_settings("smollm2-calculator-caller", "arithmetic", "test")["tools"]
    assert [function["name"] for function in tools["functions"]] == ["calculator"]
    assert tools["functions"][0]["schema"]["function"]["parameters"]["required"] == ["expression"]
    assert tools["template_text"] == template_text("qwen2_5", "tools.chat_template")
    assert plan.generation_settings("smollm2-calculator-caller-without-tools", "arithmetic", "test")["tools"] is None
    round_settings = plan.training_for("sft-round1").training_config(gpus_available=False)
    assert round_settings["chat_tools"] == {
        "functions": [tools["functions"][0]["schema"]],
        "template": tools["template_text"],
    }


def test_tags_plan_no_function_keys_so_finished_jobs_stand():
    plan = Plan(checked_config(example()), Layout.under("results/x"))
    assert not {"format", "chat_template", "functions", "template_text"} & set(
        plan.generation_settings("base", "arithmetic", "test")["tools"]
    )
    assert "chat_tools" not in plan.training_for("sft-round1").training_config(gpus_available=False)


def _user_tool_with_two_parameters(config, tmp_path):
    (tmp_path / "two_parameter_tools.py").write_text("def add(a, b):\n    return a + b\n")
    config["tools"]["tool"] = "two_parameter_tools:add"


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (
            lambda c: c["prompt"].update(chat_template=False),
            "config key prompt.chat_template is false, but tools.format chat_template",
        ),
        (
            lambda c: c["tools"].pop("format"),
            "config key tools.chat_template: the template is for tools.format: chat_template",
        ),
        (
            lambda c: c["tools"].update(chat_template="qwen9"),
            "config key tools.chat_template: 'qwen9' is neither a chat template TRL ships",
        ),
        (lambda c: c["tools"].update(format="json"), "tools.format"),
    ],
)
def test_a_chat_template_mistake_stops_the_plan_naming_its_key(mutate, message):
    with pytest.raises(SnakeskillsError, match=message.replace("(", r"\(")):
        checked_config(chat_example(mutate))


def test_a_user_function_of_two_parameters_is_offered_with_both(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))
    config = chat_example(lambda c: _user_tool_with_two_parameters(c, tmp_path))
    config["tools"]["sandbox"] = "none"
    tools = Plan(checked_config(config), Layout.under("results/x")).generation_settings(
        "smollm2-calculator-caller", "arithmetic", "test"
    )["tools"]
    [function] = tools["functions"]
    assert (function["name"], function["argument"]) == ("add", None)
    assert function["schema"]["function"]["parameters"]["required"] == ["a", "b"]


def test_a_template_that_cannot_call_tools_stops_the_plan_naming_the_model(smollm2):
    config = chat_example(lambda c: c["tools"].update(chat_template="llama3"))
    config["model"]["path"] = str(smollm2)
    with pytest.raises(
        SnakeskillsError, match=rf"^model smollm2-calculator-caller \({smollm2}\) with tools.chat_template 'llama3'"
    ):
        checked_config(config)


def with_a_tool_teacher(config, tokenizer_path=None, **openai):
    """The chat example with a teacher behind an OpenAI-compatible server answering with the run's tools (its tool
    parser reads the calls)."""
    from conftest import teacher_section

    config["teacher"] = teacher_section(tools=True)
    config["teacher"]["generation"]["openai"].update(openai)
    if tokenizer_path is not None:
        config["teacher"]["generation"]["openai"]["tokenizer_path"] = str(tokenizer_path)


def test_a_tool_teacher_on_a_server_without_the_tokenizer_for_its_transcripts_stops_the_plan_naming_the_key():
    with pytest.raises(SnakeskillsError, match="^config key teacher.generation.openai.tokenizer_path: tools.format"):
        checked_config(chat_example(with_a_tool_teacher))


def test_a_tool_teachers_tokenizer_is_checked_with_the_template_and_its_jobs_get_the_functions(smollm2):
    config = checked_config(chat_example(lambda c: with_a_tool_teacher(c, smollm2)))
    plan = Plan(config, Layout.under("results/chat"))
    tools = plan.generation_settings("teacher", "arithmetic", "train")["tools"]
    assert [function["name"] for function in tools["functions"]] == ["calculator"]
    config = chat_example(lambda c: with_a_tool_teacher(c, smollm2))
    config["tools"]["chat_template"] = "llama3"
    with pytest.raises(SnakeskillsError, match=rf"^teacher.generation.openai.tokenizer_path {smollm2} with tools.cha"):
        checked_config(config)
    config = chat_example(lambda c: with_a_tool_teacher(c, smollm2, api="completions"))
    config["teacher"]["prompt"]["chat_template"] = False
    with pytest.raises(SnakeskillsError, match="^config key teacher.prompt.chat_template is false"):
        checked_config(config)


def test_a_teacher_without_tools_answers_in_one_turn_and_teacher_tools_needs_a_tools_section(smollm2):
    config = checked_config(chat_example(lambda c: with_a_tool_teacher(c, smollm2)))
    config["teacher"]["tools"] = False
    plan = Plan(config, Layout.under("results/chat"))
    assert plan.generation_settings("teacher", "arithmetic", "train")["tools"] is None
    config = chat_example(lambda c: with_a_tool_teacher(c, smollm2))
    config["tools"] = None
    with pytest.raises(SnakeskillsError, match="^config key teacher.tools is true, but the run has no tools"):
        checked_config(config)
