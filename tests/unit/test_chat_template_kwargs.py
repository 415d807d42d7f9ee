"""prompt.chat_template_kwargs: a chat template's own variables (Qwen3's ``enable_thinking``) reach every path
that renders a prompt (hf generation, SFT's prompts, the shared model server, an OpenAI-compatible chat server),
and mistakes stop the plan or the job's first prompt.

The stand-in for Qwen3 is the real SmolLM2-135M-Instruct (its BPE tokenizer, ChatML like Qwen3's) with its chat
template's generation prompt replaced by Qwen3's, which writes an empty thinking block when ``enable_thinking``
is false. No Qwen3 checkpoint can be had here (nothing on PyPI ships one).
"""

from __future__ import annotations

import json

import pytest
from conftest import asked_model, hf_backend, hf_options, openai_backend, resolved_prompt
from servers import TransformersServer

from snakeskills.backends import GenerationRequest, SamplingParams, build_request
from snakeskills.errors import SnakeskillsError
from snakeskills.plan.checks import check_config
from snakeskills.plan.config import DEFAULT_CONFIG, prepare_config
from snakeskills.plan.folders import check_model_paths
from snakeskills.prompts import (
    build_messages,
    encode_messages,
    model_input_ids,
    saved_chat_template,
    unread_chat_template_kwargs,
)
from snakeskills.training.sft import to_prompt_completion

SMOLLM2_GENERATION_PROMPT = "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
# Qwen3's generation prompt (its chat template's last lines)
QWEN3_GENERATION_PROMPT = (
    "{%- if add_generation_prompt %}\n    {{- '<|im_start|>assistant\\n' }}\n"
    "    {%- if enable_thinking is defined and enable_thinking is false %}\n"
    "        {{- '<think>\\n\\n</think>\\n\\n' }}\n    {%- endif %}\n{%- endif %}\n"
)
EMPTY_THINKING = "<|im_start|>assistant\n<think>\n\n</think>\n\n"
GREEDY = SamplingParams(temperature=0.0, top_p=1.0, top_k=0, max_new_tokens=8)
RECORDS = [{"id": f"p{a}", "problem": f"What is {a} + {a + 2}?"} for a in range(4)]


@pytest.fixture(scope="module")
def qwen3_style(smollm2, tmp_path_factory):
    """SmolLM2's checkpoint (files linked) with Qwen3's generation prompt in its chat template."""
    folder = tmp_path_factory.mktemp("qwen3-style")
    for path in smollm2.iterdir():
        if path.name != "chat_template.jinja":
            (folder / path.name).symlink_to(path)
    template = (smollm2 / "chat_template.jinja").read_text()
    assert SMOLLM2_GENERATION_PROMPT in template
    (folder / "chat_template.jinja").write_text(template.replace(SMOLLM2_GENERATION_PROMPT, QWEN3_GENERATION_PROMPT))
    return folder


def prompt(**settings) -> dict:
    return resolved_prompt(user="{problem}", chat_template=True, **settings)


def test_kwargs_reach_the_template_and_sft_prompts_equal_generation_prompts(qwen3_style):
    """On the real BPE tokenizer: enable_thinking false ends the model input with Qwen3's empty thinking block,
    and SFT's prompt ids (to_prompt_completion) are generation's ids to the token, with and without it."""
    tokenizer = hf_backend(qwen3_style, device="cpu").tokenizer
    thinking, not_thinking = prompt(), prompt(chat_template_kwargs={"enable_thinking": False})
    for record in RECORDS:
        with_block = tokenizer.decode(model_input_ids(not_thinking, record, tokenizer))
        without_block = tokenizer.decode(model_input_ids(thinking, record, tokenizer))
        assert with_block.endswith(EMPTY_THINKING) and not without_block.endswith("</think>\n\n")
        assert with_block == without_block + "<think>\n\n</think>\n\n"
        for resolved in (thinking, not_thinking):
            sft_record = {"id": record["id"], "messages": [*build_messages(resolved, record), {"role": "assistant"}]}
            sft_record["messages"][-1]["content"] = "\\boxed{4}"
            example = to_prompt_completion(
                sft_record,
                chat_template=True,
                chat_template_kwargs=resolved["chat_template_kwargs"],
                tokenizer=tokenizer,
            )
            assert example["prompt_ids"] == model_input_ids(resolved, record, tokenizer)


def test_a_variable_the_template_never_reads_fails_the_first_prompt(qwen3_style):
    """Jinja ignores an unknown variable, so a misspelt kwarg would silently change nothing."""
    tokenizer = hf_backend(qwen3_style, device="cpu").tokenizer
    with pytest.raises(SnakeskillsError) as error:
        model_input_ids(prompt(chat_template_kwargs={"enable_thinkng": False}), RECORDS[0], tokenizer)
    assert str(error.value) == (
        "prompt.chat_template_kwargs 'enable_thinkng': the model's chat template never reads it, so it would change "
        "nothing (the variables of its own that it reads are enable_thinking); check their names against the "
        "model's chat template"
    )
    messages = build_messages(prompt(), RECORDS[0])
    with pytest.raises(SnakeskillsError, match="the pipeline sets itself"):
        encode_messages(messages, chat_template=True, chat_template_kwargs={"tokenize": True}, tokenizer=tokenizer)
    with pytest.raises(SnakeskillsError, match="prompt.chat_template is false"):
        encode_messages(messages, chat_template=False, chat_template_kwargs={"enable_thinking": 0}, tokenizer=tokenizer)


def test_templates_are_read_from_a_folder_and_parsed_as_transformers_does(qwen3_style, tmp_path):
    assert "enable_thinking" in saved_chat_template(qwen3_style)
    (tmp_path / "tokenizer_config.json").write_text(
        json.dumps(
            {"chat_template": [{"name": "default", "template": "{{ a }}"}, {"name": "rag", "template": "{{ b }}"}]}
        )
    )
    assert saved_chat_template(tmp_path) == {"default": "{{ a }}", "rag": "{{ b }}"}
    assert unread_chat_template_kwargs(saved_chat_template(tmp_path), {"a": 1, "b": 2}) is None
    # transformers' loop controls and {% generation %} tag parse; what Jinja cannot parse is not judged
    tags = "{% for m in messages %}{% generation %}{{ m.content }}{% endgeneration %}{% break %}{% endfor %}{{ x }}"
    assert unread_chat_template_kwargs(tags, {"x": 1}) is None
    assert "never reads it" in unread_chat_template_kwargs(tags, {"y": 1})
    assert unread_chat_template_kwargs("{% if %}", {"y": 1}) is None


def checked(mutate) -> dict:
    import yaml

    config = yaml.safe_load(DEFAULT_CONFIG.read_text())
    mutate(config)
    prepare_config(config)
    check_config(config, gpus_available=False)
    check_model_paths(config)
    return config


def with_student(folder, **prompt_settings):
    def mutate(config):
        config["model"].update(build_tiny=False, path=str(folder))
        config["prompt"].update(chat_template=True, **prompt_settings)

    return mutate


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (
            lambda config: config["prompt"].update(chat_template_kwargs={"enable_thinking": False}),
            "config key prompt.chat_template_kwargs is set but prompt.chat_template is false",
        ),
        (
            lambda config: config["prompt"].update(chat_template=True, chat_template_kwargs={"enable_thinking": False}),
            "config key prompt.chat_template_kwargs 'enable_thinking': the model's chat template never reads it, so "
            "it would change nothing (it reads no variables of its own) (the chat template of the tiny model)",
        ),
        (
            lambda config: config["prompt"].update(
                chat_template=True, chat_template_kwargs={"add_generation_prompt": 1}
            ),
            "config key prompt.chat_template_kwargs has 'add_generation_prompt', which the pipeline sets itself",
        ),
        (
            lambda config: config.update(
                judge={
                    **config.get("judge", {}),
                    "llm": {
                        "model": {"path": "/nonexistent/judge"},
                        "generation": {"sampling": {"max_new_tokens": 4}},
                        "prompt": {"template": "judge-math", "chat_template_kwargs": {"enable_thinking": False}},
                    },
                }
            ),
            "config key judge.llm.prompt.chat_template_kwargs is set but judge.llm.prompt.chat_template is false",
        ),
    ],
    ids=["without-chat-template", "tiny-template-reads-none", "reserved", "judge-prompt"],
)
def test_kwarg_mistakes_stop_the_plan(mutate, message):
    with pytest.raises(SnakeskillsError) as error:
        checked(mutate)
    assert message in str(error.value)


def test_a_local_checkpoints_template_is_checked_when_the_plan_is_made(qwen3_style, smollm2):
    checked(with_student(qwen3_style, chat_template_kwargs={"enable_thinking": False}))
    with pytest.raises(SnakeskillsError) as error:
        checked(with_student(qwen3_style, chat_template_kwargs={"enable_thinkng": False}))
    assert str(error.value) == (
        "config key prompt.chat_template_kwargs 'enable_thinkng': the model's chat template never reads it, so it "
        "would change nothing (the variables of its own that it reads are enable_thinking) (the chat template of "
        f"{str(qwen3_style)!r})"
    )
    with pytest.raises(SnakeskillsError, match="it reads no variables of its own"):
        checked(with_student(smollm2, chat_template_kwargs={"enable_thinking": False}))


def test_the_shared_model_server_renders_with_the_kwargs(qwen3_style, tmp_path):
    """The server renders messages itself: its samples equal a direct load's on ids rendered with the kwargs."""
    from snakeskills.backends.model_server import SharedModelBackend

    kwargs = {"enable_thinking": False}
    not_thinking = prompt(chat_template_kwargs=kwargs)
    direct = hf_backend(qwen3_style, device="cpu", batch_size=4, threads=1)
    direct_requests = [build_request(direct, not_thinking, record, seed=0) for record in RECORDS]
    options = hf_options(qwen3_style, device="cpu", batch_size=4)
    server = SharedModelBackend(
        backend="hf",
        options=options,
        chat_template=True,
        chat_template_kwargs=kwargs,
        directory=str(tmp_path / "servers"),
        idle_seconds=3,
        jobs_per_load=64,
    )
    try:
        shared_requests = [build_request(server, not_thinking, record, seed=0) for record in RECORDS]
        assert all(isinstance(request, GenerationRequest) and request.messages for request in shared_requests)
        assert server.generate(shared_requests, GREEDY) == direct.generate(direct_requests, GREEDY)
    finally:
        server.close()


def test_an_openai_chat_server_gets_the_kwargs(qwen3_style):
    """`transformers serve` applies the chat template itself; the request's chat_template_kwargs reach it: its
    greedy answers equal the hf backend's on the prompt rendered with enable_thinking false, which differ from
    those rendered without."""
    kwargs = {"enable_thinking": False}
    direct = hf_backend(qwen3_style, device="cpu", batch_size=1, threads=2)

    def direct_texts(resolved):
        requests = [build_request(direct, resolved, record, seed=0) for record in RECORDS]
        return [result.generation for result in direct.generate(requests, GREEDY)]

    expected, without = direct_texts(prompt(chat_template_kwargs=kwargs)), direct_texts(prompt())
    assert expected != without
    server = TransformersServer(qwen3_style).start()
    try:
        backend = openai_backend(
            base_url=server.base_url, model=str(qwen3_style), api="chat", max_concurrency=4, chat_template_kwargs=kwargs
        )
        requests = [build_request(backend, prompt(chat_template_kwargs=kwargs), record, seed=0) for record in RECORDS]
        got = [result.generation for result in backend.generate(requests, GREEDY)]
        assert got == expected
    finally:
        server.stop()


def test_parse_reasoning_on_a_prompt_that_ends_the_thinking_stops_the_job(qwen3_style, tmp_path):
    """enable_thinking false writes the end string into the prompt: no text would hold it, every generation
    would be empty. The job stops at its first prompt, before anything is written; without parse_reasoning it
    runs and its texts are the answers."""
    from snakeskills.generation.generate import generate_chunk
    from snakeskills.io import read_jsonl, write_jsonl

    write_jsonl(tmp_path / "split.jsonl", RECORDS)
    backend = hf_backend(qwen3_style, device="cpu", batch_size=4, threads=2)

    def generate(parse_reasoning):
        return generate_chunk(
            asked_model(
                backend,
                prompt(chat_template_kwargs={"enable_thinking": False}),
                GREEDY,
                rows_per_flush=4,
                reasoning={"parse_reasoning": parse_reasoning, "end_reasoning_string": "</think>"},
            ),
            prepared_path=tmp_path / "split.jsonl",
            output_path=tmp_path / "out.jsonl",
            chunk_index=0,
            num_chunks=1,
            random_seed=0,
        )

    with pytest.raises(SnakeskillsError, match="the model input already ends the thinking"):
        generate(parse_reasoning=True)
    assert sorted(path.name for path in tmp_path.iterdir()) == ["split.jsonl"]  # nothing written
    assert generate(parse_reasoning=False)["generated_rows"] == 4
    assert [row["generation"] for row in read_jsonl(tmp_path / "out.jsonl")][1] == "1 + 3 = 4"
