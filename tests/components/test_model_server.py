"""One model load shared by many jobs: the model server with the real hf backend on the tiny checkpoint."""

from __future__ import annotations

import os
import stat
import time

import pytest
from conftest import hf_backend

from snakeskills.backends import GenerationRequest, SamplingParams
from snakeskills.backends.model_server import SharedModelBackend, server_paths
from snakeskills.errors import SnakeskillsError
from snakeskills.runtime_folder import private_directory

SAMPLING = SamplingParams(temperature=1.0, top_p=1.0, top_k=0, max_new_tokens=6)
MESSAGES = [({"role": "user", "content": f"{a}+{a}="},) for a in range(10)]


def requests():
    return [GenerationRequest(seed=index, messages=messages) for index, messages in enumerate(MESSAGES)]


def shared(tiny_checkpoint, directory, chat_template=False, **overrides):
    options = {
        "model_path": str(tiny_checkpoint),
        "adapter_path": None,
        "dtype": "auto",
        "trust_remote_code": False,
        "device": "cpu",
        "batch_size": 4,
        "threads": 1,
        "compile": False,
        "share_prefix": True,
    }
    settings = {"idle_seconds": 3, "jobs_per_load": 64, **overrides}
    return SharedModelBackend(
        backend="hf",
        options=options,
        chat_template=chat_template,
        chat_template_kwargs={},
        directory=str(directory),
        **settings,
    )


@pytest.fixture()
def directory(tmp_path):
    folder = tmp_path / "servers"
    yield folder
    for socket_file in folder.glob("*.sock"):
        socket_file.unlink()


def test_jobs_share_one_load_and_get_the_same_samples_as_a_direct_load(tiny_checkpoint, directory, caplog):
    import logging

    direct = hf_backend(str(tiny_checkpoint), device="cpu", batch_size=3, threads=1)
    expected = direct.generate(
        [
            GenerationRequest(seed=i, prompt_token_ids=tuple(direct.tokenizer(m[0]["content"])["input_ids"]))
            for i, m in enumerate(MESSAGES)
        ],
        SAMPLING,
    )
    with caplog.at_level(logging.INFO, logger="snakeskills"):
        first = shared(tiny_checkpoint, directory)
        first_results = first.generate(requests(), SAMPLING)
        first.close()
        second = shared(tiny_checkpoint, directory)
        second_results = second.generate(requests(), SAMPLING)
        second.close()
    assert first_results == second_results == expected
    assert caplog.text.count("started model server") == 1
    assert "serves this job (job 2 on load " in caplog.text
    # each job's log names the model it generated with, as a job that loads it itself does
    assert caplog.text.count(f"): loaded model {tiny_checkpoint} on cpu in float32") == 2
    socket_path, _, log_path = server_paths(directory, first.options)
    assert log_path.read_text().count("loaded model for") == 1
    # the server exits once idle, removes its socket and then logs its exit (the two are not one step: wait for both)
    exits = "model server exits (2 jobs served)"
    deadline = time.monotonic() + 30
    while (socket_path.exists() or exits not in log_path.read_text()) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not socket_path.exists()
    assert exits in log_path.read_text()


def test_jobs_per_load_starts_a_fresh_server(tiny_checkpoint, directory, caplog):
    import logging

    with caplog.at_level(logging.INFO, logger="snakeskills"):
        backends = [shared(tiny_checkpoint, directory, jobs_per_load=2) for _ in range(3)]
        for backend in backends:
            assert len(backend.generate(requests()[:2], SAMPLING)) == 2
            backend.close()
    assert caplog.text.count("started model server") == 2
    assert len({backend.server_pid for backend in backends}) == 2
    assert os.getpid() not in {backend.server_pid for backend in backends}


def test_the_server_builds_model_input_as_a_direct_load_does(tiny_checkpoint, directory):
    """With a chat template that writes BOS (and a tokenizer that adds one), the server's model input is
    ``prompts.encode_messages``'s, as in every other path: its samples equal a direct load's."""
    from snakeskills.prompts import encode_messages

    direct = hf_backend(str(tiny_checkpoint), device="cpu", batch_size=3, threads=1)
    direct_requests = []
    for index, messages in enumerate(MESSAGES):
        ids = encode_messages(list(messages), chat_template=True, chat_template_kwargs={}, tokenizer=direct.tokenizer)
        assert ids.count(direct.tokenizer.bos_token_id) == 1
        direct_requests.append(GenerationRequest(seed=index, prompt_token_ids=tuple(ids)))
    server = shared(tiny_checkpoint, directory, chat_template=True)
    try:
        assert server.generate(requests(), SAMPLING) == direct.generate(direct_requests, SAMPLING)
    finally:
        server.close()


def test_a_server_folder_too_deep_for_a_unix_socket_still_shares_one_load(tiny_checkpoint, tmp_path):
    """A Unix socket's path holds at most 107 bytes: in a deep folder (a project under a long path, pytest's
    numbered temporary folders) the socket goes to the private runtime folder, and jobs still share one load."""
    deep = tmp_path / ("a-deep-project-folder-" * 4) / "model-servers"
    options = {"backend": "hf", "model_path": str(tiny_checkpoint)}
    socket_path, lock_path, log_path = server_paths(deep, options)
    assert len(str(deep / "x.sock")) > 107 and len(os.fsencode(socket_path)) <= 103
    assert lock_path.parent == log_path.parent == deep
    assert server_paths(deep, options)[0] == socket_path != server_paths(tmp_path / "other", options)[0]
    servers = [shared(tiny_checkpoint, deep) for _ in range(2)]
    try:
        assert servers[0].generate(requests(), SAMPLING) == servers[1].generate(requests(), SAMPLING)
        assert servers[0].server_pid == servers[1].server_pid
    finally:
        for server in servers:
            server.close()


def test_the_server_folder_is_created_private(tmp_path):
    folder = private_directory(tmp_path / "runtime" / "snakeskills")
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert private_directory(folder) == folder  # an existing private folder of ours is fine


def test_a_server_folder_open_to_others_is_refused(tiny_checkpoint, tmp_path):
    folder = tmp_path / "servers"
    folder.mkdir(mode=0o700)
    folder.chmod(0o775)
    with pytest.raises(SnakeskillsError, match=r"mode 0775.*chmod 700"):
        shared(tiny_checkpoint, folder)
    assert not list(folder.iterdir())  # nothing started, nothing created


@pytest.mark.skipif(os.getuid() != 0, reason="giving a folder to another user needs root (CI runs as root)")
def test_a_server_folder_of_another_user_is_refused(tiny_checkpoint, tmp_path):
    """In a shared /tmp another user can create /tmp/snakeskills-<uid> first, 0700 and theirs."""
    folder = tmp_path / "servers"
    folder.mkdir(mode=0o700)
    os.chown(folder, 65534, 65534)  # nobody
    with pytest.raises(SnakeskillsError, match=r"belongs to uid 65534, not to you"):
        shared(tiny_checkpoint, folder)


def test_a_link_in_place_of_the_server_folder_is_refused(tmp_path):
    target = tmp_path / "elsewhere"
    target.mkdir(mode=0o700)
    (tmp_path / "servers").symlink_to(target)
    with pytest.raises(SnakeskillsError, match="is not a folder"):
        private_directory(tmp_path / "servers")


def test_the_server_key_holds_the_visible_gpus_and_the_slurm_job(monkeypatch, tmp_path):
    options = {"backend": "hf", "model_path": "/models/m", "device": "cuda"}
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    monkeypatch.setenv("SLURM_JOB_ID", "100")
    first = server_paths(tmp_path, options)
    assert server_paths(tmp_path, dict(options)) == first
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    other_gpu = server_paths(tmp_path, options)
    monkeypatch.setenv("SLURM_JOB_ID", "101")
    other_job = server_paths(tmp_path, options)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    monkeypatch.delenv("SLURM_JOB_ID")
    neither = server_paths(tmp_path, options)
    assert len({first, other_gpu, other_job, neither}) == 4


def test_an_idle_server_leaves_a_gpu_that_another_job_claims(tiny_checkpoint, directory, tmp_path, monkeypatch):
    """A server keeps its GPU's memory after the job that started it has ended and released its claim. A job
    that claims that GPU and will not use the server (an sft job, or a generate job of another model) asks it
    to exit and starts only once it has; a job of the server's own model keeps it. The GPU is a stand-in
    (CUDA_VISIBLE_DEVICES=7 names it; the tiny model runs on the CPU): the claim and release protocol is real."""
    from snakeskills.backends import gpus
    from snakeskills.backends.model_server import server_key

    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / "runtime"))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "7")
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    (tmp_path / "runtime").mkdir(mode=0o700)
    first = shared(tiny_checkpoint, directory, idle_seconds=600)  # would stay for 10 minutes
    first.generate(requests()[:2], SAMPLING)
    first.close()
    socket_path, _, log_path = server_paths(directory, first.options)
    server_lock = gpus.claims_directory() / f"gpu-7.server-{server_key(first.options)}.lock"
    assert server_lock.exists() and socket_path.exists()
    # a job of the same model keeps the server (it connects to it)
    again = shared(tiny_checkpoint, directory, idle_seconds=600)
    assert again.server_pid == first.server_pid
    again.close()
    # an sft job claims GPU 7: the idle server exits before the claim returns
    started = time.monotonic()
    assert gpus.claim_job_gpus(1) == ["7"]
    assert time.monotonic() - started < 30
    assert not socket_path.exists() and not server_lock.exists()
    assert "exiting to free their memory" in log_path.read_text()
    for lock in gpus._held:
        lock.close()
    gpus._held.clear()


def test_one_relative_model_path_in_two_working_directories_names_two_servers(tmp_path, monkeypatch):
    """A run names its models by paths relative to its working directory (results/<experiment>/models/...); a
    server outlives its job, so a second run of the same experiment elsewhere must not reach the first one's."""
    from conftest import generation_section

    import snakeskills.backends as backends

    built = []
    monkeypatch.setattr(backends, "build_backend", lambda name, **options: built.append(options["options"]))
    generation = generation_section(share_model={"enabled": True})
    model = {"dtype": "auto", "trust_remote_code": False}
    for run in ("first", "second"):
        (tmp_path / run).mkdir()
        monkeypatch.chdir(tmp_path / run)
        backends.backend_from_config(
            generation,
            model,
            model_path="results/x/models/base/checkpoint",
            adapter_path="results/x/models/round1/adapter",
            threads=1,
            chat_template=False,
            chat_template_kwargs={},
        )
    assert built[0]["model_path"] == str(tmp_path / "first/results/x/models/base/checkpoint")
    assert built[1]["adapter_path"] == str(tmp_path / "second/results/x/models/round1/adapter")
    assert server_paths(tmp_path, {"backend": "hf", **built[0]}) != server_paths(
        tmp_path, {"backend": "hf", **built[1]}
    )
