"""Tools through the chat template on an OpenAI-compatible server, for real: ``vllm serve`` (vLLM's CPU build) with
its Hermes tool parser (``--enable-auto-tool-choice --tool-call-parser hermes``) serving a tiny Llama that calls a
calculator in TRL's Qwen2.5 template (``chat_callers``), as a teacher that answers with the run's tools
(``teacher.tools``), beside the same model as the student on the hf backend.

The server renders the functions from each request's ``tools``, its parser reads the calls into ``tool_calls``, and
the loop sends the conversation back with the tool messages; the hf backend renders the template itself and reads
the calls from the model's tokens. For the same greedy model the two give the same calls, the same tool messages and
the same transcripts, and the teacher's conversations become SFT data with the tool messages masked."""

from __future__ import annotations

import pytest
from chat_callers import ANSWERS, build_chat_tool_caller, caller_run_config
from conftest import run_snakemake, write_config

from snakeskills.io import iter_jsonl

RESULTS = "results/chat-server"


@pytest.fixture(scope="session")
def vllm_python():
    from snakeskills.backends.vllm_env import create_env

    return create_env()


@pytest.mark.slow
def test_vllm_serve_with_a_tool_parser_makes_the_calls_the_hf_backend_makes(vllm_python, tmp_path):
    from servers import VLLMServer

    folder, _section = build_chat_tool_caller(tmp_path / "caller", hidden_size=128, num_heads=4)
    tool_parser = ["--enable-auto-tool-choice", "--tool-call-parser", "hermes"]
    server = VLLMServer(vllm_python, folder, tmp_path / "vllm-serve.log", arguments=tool_parser).start()
    greedy = {"temperature": 0.0, "top_p": 1.0, "top_k": 0, "max_new_tokens": 200}
    try:
        config = caller_run_config("chat-server", folder, tmp_path / "problems.jsonl", greedy)
        config["teacher"] = {
            "name": "served-caller",
            "tools": True,
            "train_num_seeds": 2,
            "prompt": config["prompt"],
            "generation": {
                "backend": "openai",
                "openai": {
                    "base_url": server.base_url,
                    "model": str(folder),
                    "tokenizer_path": str(folder),
                    "max_concurrency": 4,
                },
                "sampling": greedy,
            },
        }
        judged = [
            f"{RESULTS}/judge/{m}/calc/test/output-rs{s}.jsonl" for m in ("caller", "served-caller") for s in (0, 1)
        ]
        targets = [*judged, f"{RESULTS}/sft/sft-round1/data.jsonl"]
        process = run_snakemake(
            tmp_path, "--cores", "2", *targets, configfile=write_config(tmp_path / "c.yaml", config), timeout=1800
        )
    finally:
        server.stop()
    assert process.returncode == 0, process.stdout[-4000:] + process.stderr[-4000:]
    served = (tmp_path / "vllm-serve.log").read_text()
    assert "POST /v1/chat/completions" in served
    results = tmp_path / RESULTS
    calls = 0
    for seed in (0, 1):
        by_hf = list(iter_jsonl(results / f"judge/caller/calc/test/output-rs{seed}.jsonl"))
        by_server = list(iter_jsonl(results / f"judge/served-caller/calc/test/output-rs{seed}.jsonl"))
        assert len(by_hf) == len(by_server) == len(ANSWERS)
        for hf_row, server_row in zip(by_hf, by_server, strict=True):
            assert server_row["conversation"] == hf_row["conversation"], (server_row, hf_row)
            assert server_row["generation"] == hf_row["generation"]
            for field in ("tool_output_spans", "code_rounds_executed", "tool_errors", "predicted_answer"):
                assert server_row[field] == hf_row[field], field
            calls += server_row["code_rounds_executed"]
    assert calls >= 2, "the server's parser read the caller's calls"
    sft_data = list(iter_jsonl(results / "sft/sft-round1/data.jsonl"))
    assert sft_data and all(row["tool_output_spans"] for row in sft_data)
