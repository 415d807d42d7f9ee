"""A model as a tool with a real model behind the real shared model server (the tiny checkpoint as the expert): one
load serves every job that asks it, whatever its own share_model says, and a call's tokens, the price's units, are
what the model read and wrote."""

from __future__ import annotations

import logging

import pytest
from conftest import default_section, generation_section, hf_backend, model_tool_settings

from snakeskills.backends import GenerationRequest, sampling_params
from snakeskills.prompts import model_input_ids, resolve_prompt
from snakeskills.settings.tools import Tools
from snakeskills.tools import model_tool
from snakeskills.tools.model_tool import ModelToolSession, call_seed

SAMPLING = {"temperature": 1.0, "top_p": 1.0, "top_k": 0, "max_new_tokens": 6, "stop": []}
EXPERT_LIMITS = Tools.filled({"tool": "expert"}, "tools")


@pytest.fixture()
def expert(tiny_checkpoint, tmp_path):
    share = {"enabled": False, "directory": str(tmp_path / "servers"), "idle_seconds": 30, "threads": 1}
    generation = generation_section(backend="hf", batch_size=4, device="cpu", share_model=share, sampling=SAMPLING)
    prompt = resolve_prompt(default_section("prompt") | {"system": None, "user": "{problem}=", "chat_template": False})
    model = {"path": str(tiny_checkpoint), "dtype": "auto", "trust_remote_code": False}
    yield model_tool_settings("expert", prompt, generation, model=model, model_path=str(tiny_checkpoint))
    for asked in model_tool._ASKED.values():
        asked.close()
    model_tool._ASKED.clear()


def test_a_calls_tokens_are_what_the_expert_read_and_wrote_and_its_answer_a_direct_loads(expert, tiny_checkpoint):
    session = ModelToolSession(EXPERT_LIMITS, expert, seed=3)
    first, second = session.call("12+34"), session.call("5+6")
    direct = hf_backend(str(tiny_checkpoint), device="cpu", batch_size=1, threads=1)
    sampling = sampling_params(expert.section.generation.sampling, expert.section.prompt)
    for number, (problem, result) in enumerate([("12+34", first), ("5+6", second)]):
        ids = model_input_ids(expert.section.prompt, {"problem": problem}, direct.tokenizer)
        [expected] = direct.generate(
            [GenerationRequest(seed=call_seed(3, "expert", number), prompt_token_ids=tuple(ids))], sampling
        )
        assert result.input_tokens == len(ids)
        assert result.output_tokens == expected.num_generated_tokens > 0
        assert result.output == expected.generation
        assert not result.error


def test_the_expert_is_loaded_once_for_every_job_that_asks_it(expert, caplog):
    with caplog.at_level(logging.INFO, logger="snakeskills"):
        ModelToolSession(EXPERT_LIMITS, expert, seed=1).call("1+2")
        pids = {asked.backend.server_pid for asked in model_tool._ASKED.values()}
        model_tool._ASKED.clear()  # a second job: a process of its own asks the same expert
        ModelToolSession(EXPERT_LIMITS, expert, seed=2).call("3+4")
        pids |= {asked.backend.server_pid for asked in model_tool._ASKED.values()}
    # share_model.enabled false in its section: a model tool is still loaded by its server, once
    assert caplog.text.count("started model server") == 1
    assert "serves this job (job 2 on load " in caplog.text
    assert len(pids) == 1
