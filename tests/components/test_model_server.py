"""One model load shared by many jobs: the model server with the real hf backend on the tiny checkpoint."""

from __future__ import annotations

import contextlib
import os
import stat
import time

import pytest
from conftest import hf_backend, hf_options, nonzero_lora

from snakeskills.backends import GenerationRequest, SamplingParams
from snakeskills.backends.model_server import (
    SharedModelBackend,
    options_weights,
    server_key,
    server_paths,
    weights_identity,
)
from snakeskills.errors import SnakeskillsError
from snakeskills.runtime_folder import private_directory

SAMPLING = SamplingParams(temperature=1.0, top_p=1.0, top_k=0, max_new_tokens=6)
MESSAGES = [({"role": "user", "content": f"{a}+{a}="},) for a in range(10)]


def key_of(options: dict) -> str:
    """The key of the server a job with these backend options connects to now."""
    return server_key(options, options_weights(options))


def requests():
    return [GenerationRequest(seed=index, messages=messages) for index, messages in enumerate(MESSAGES)]


def shared(tiny_checkpoint, directory, chat_template=False, adapter_path=None, **overrides):
    options = hf_options(tiny_checkpoint, adapter_path=adapter_path, device="cpu", batch_size=4)
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


def direct_samples(tiny_checkpoint, adapter_path=None):
    """The samples of ``requests()`` from the model loaded in this process, as a job without a server gets them."""
    direct = hf_backend(str(tiny_checkpoint), adapter_path=adapter_path, device="cpu", batch_size=3, threads=1)
    return direct.generate(
        [
            GenerationRequest(seed=i, prompt_token_ids=tuple(direct.tokenizer(m[0]["content"])["input_ids"]))
            for i, m in enumerate(MESSAGES)
        ],
        SAMPLING,
    )


def test_jobs_share_one_load_and_get_the_same_samples_as_a_direct_load(tiny_checkpoint, directory, caplog):
    import logging

    expected = direct_samples(tiny_checkpoint)
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
    socket_path, _, log_path = server_paths(directory, first.key)
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
    key = key_of({"backend": "hf", "model_path": str(tiny_checkpoint)})
    socket_path, lock_path, log_path = server_paths(deep, key)
    assert len(str(deep / "x.sock")) > 107 and len(os.fsencode(socket_path)) <= 103
    assert lock_path.parent == log_path.parent == deep
    assert server_paths(deep, key)[0] == socket_path != server_paths(tmp_path / "other", key)[0]
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
    first = key_of(options)
    assert key_of(dict(options)) == first
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    other_gpu = key_of(options)
    monkeypatch.setenv("SLURM_JOB_ID", "101")
    other_job = key_of(options)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    monkeypatch.delenv("SLURM_JOB_ID")
    neither = key_of(options)
    assert len({first, other_gpu, other_job, neither}) == 4


def test_an_idle_server_leaves_a_gpu_that_another_job_claims(tiny_checkpoint, directory, tmp_path, monkeypatch):
    """A server holds its GPU's claim (handed to it by the job that started it) and memory after that job has ended.
    A job that claims that GPU and will not use the server (an sft job, or a generate job of another model) asks it
    to exit and starts only once it has; a job of the server's own model keeps it. The GPU is a stand-in
    (CUDA_VISIBLE_DEVICES=7 names it, gpus=1 claims it; the tiny model runs on the CPU): the claim and release
    protocol is real."""
    from snakeskills.backends import gpus

    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / "runtime"))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "7")
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    (tmp_path / "runtime").mkdir(mode=0o700)
    first = shared(tiny_checkpoint, directory, idle_seconds=600, gpus=1)  # would stay for 10 minutes
    first.generate(requests()[:2], SAMPLING)
    first.close()
    socket_path, _, log_path = server_paths(directory, first.key)
    server_lock = gpus.claims_directory() / f"gpu-7.server-{first.key}.lock"
    assert server_lock.exists() and socket_path.exists()
    # a job of the same model keeps the server (it connects to it)
    again = shared(tiny_checkpoint, directory, idle_seconds=600, gpus=1)
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
    from snakeskills.settings.generation import Generation

    generation = Generation.from_dict(generation_section(share_model={"enabled": True}), "generation")
    model = {"dtype": "auto", "trust_remote_code": False}
    for run in ("first", "second"):
        (tmp_path / run).mkdir()
        monkeypatch.chdir(tmp_path / run)
        backends.backend_from_config(
            generation,
            model,
            model_path="results/x/models/base/checkpoint",
            adapter_path="results/x/models/sft-round1/adapter",
            threads=1,
            chat_template=False,
            chat_template_kwargs={},
        )
    assert built[0]["model_path"] == str(tmp_path / "first/results/x/models/base/checkpoint")
    assert built[1]["adapter_path"] == str(tmp_path / "second/results/x/models/sft-round1/adapter")
    assert key_of({"backend": "hf", **built[0]}) != key_of({"backend": "hf", **built[1]})


def train_adapter(tiny_checkpoint, folder, seed: int) -> None:
    """A round's LoRA adapter on the tiny checkpoint, random and non-zero (``seed``), published at ``folder`` as a
    trained round is (written beside it, then renamed into place): a retraining keeps the path and the file sizes."""
    from snakeskills.io import atomic_directory

    model = nonzero_lora(tiny_checkpoint, seed)
    with atomic_directory(folder) as staging:
        model.save_pretrained(staging)


def test_a_round_retrained_in_place_is_served_from_its_new_weights(tiny_checkpoint, directory, tmp_path):
    """A server is keyed by the weights it serves, not by their paths: when a round is retrained in place (same
    adapter path, same file sizes, new weights) while its server is still up, the round's next job starts a server
    of the new weights, and its samples are the new adapter's, not the old server's."""
    import signal

    adapter = tmp_path / "models" / "sft-round1" / "adapter"
    train_adapter(tiny_checkpoint, adapter, seed=0)
    servers = []
    try:
        first = shared(tiny_checkpoint, directory, adapter_path=adapter, idle_seconds=600)  # stays up for 10 minutes
        servers.append(first.server_pid)
        old_samples = first.generate(requests(), SAMPLING)
        first.close()
        assert old_samples == direct_samples(tiny_checkpoint, adapter)
        sizes = sorted(path.stat().st_size for path in adapter.iterdir())

        train_adapter(tiny_checkpoint, adapter, seed=1)  # the round is retrained while its server is up
        assert sorted(path.stat().st_size for path in adapter.iterdir()) == sizes
        new_samples = direct_samples(tiny_checkpoint, adapter)
        assert new_samples != old_samples
        second = shared(tiny_checkpoint, directory, adapter_path=adapter, idle_seconds=600)
        servers.append(second.server_pid)
        assert second.generate(requests(), SAMPLING) == new_samples
        second.close()
        assert second.server_pid != first.server_pid

        # no job can reach the old server any more: it exits without waiting out its idle time
        _, _, old_log = server_paths(directory, first.key)
        exits = ("its weights changed on disk", "model server exits (1 jobs served)")
        deadline = time.monotonic() + 30
        while not all(line in old_log.read_text() for line in exits) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert all(line in old_log.read_text() for line in exits)
    finally:
        for pid in servers:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)


def test_the_weights_identity_changes_with_the_files_not_only_with_their_paths(tmp_path):
    """What keys a server (and a job's resume fingerprint): the files of the model's and adapter's folders. A
    rewrite of the same size, a retrained folder renamed into place, a copy that keeps the old times all change
    it; looking again, or a hidden file beside the weights (a download's .cache, Snakemake's timestamp), do not."""
    import shutil

    model, adapter = tmp_path / "model", tmp_path / "adapter"
    model.mkdir()
    (model / "config.json").write_text("{}")
    (model / "model.safetensors").write_bytes(b"a" * 64)
    adapter.mkdir()
    (adapter / "adapter_model.safetensors").write_bytes(b"b" * 32)
    seen = {weights_identity(str(model), str(adapter))}
    assert weights_identity(str(model), str(adapter)) in seen  # stable
    (model / ".cache").mkdir()
    (model / ".cache" / "model.safetensors.lock").write_text("")
    (adapter / ".snakemake_timestamp").write_text("")
    assert weights_identity(str(model), str(adapter)) in seen

    def changed() -> bool:
        identity = weights_identity(str(model), str(adapter))
        new = identity not in seen
        seen.add(identity)
        return new

    assert weights_identity(str(model), None) not in seen  # no adapter is another model
    (adapter / "adapter_model.safetensors").write_bytes(b"c" * 32)  # retrained in place, same size
    assert changed()
    retrained = tmp_path / ".adapter.tmp"
    retrained.mkdir()
    (retrained / "adapter_model.safetensors").write_bytes(b"d" * 32)
    shutil.rmtree(adapter)
    retrained.rename(adapter)  # retrained beside it and renamed into place
    assert changed()
    (tmp_path / "copy").write_bytes(b"e" * 64)  # copied in keeping the old file's size and modification time
    os.utime(tmp_path / "copy", ns=(0, (model / "model.safetensors").stat().st_mtime_ns))
    os.replace(tmp_path / "copy", model / "model.safetensors")
    assert changed()
    shutil.rmtree(adapter)
    assert changed()  # a missing folder is not the folder
    assert weights_identity("Qwen/Qwen3-0.6B", None) == weights_identity("Qwen/Qwen3-0.6B", None)


def test_a_job_of_a_retrained_round_does_not_resume_the_old_weights_rows(tiny_checkpoint, tmp_path, monkeypatch):
    """A job's progress file is resumed only under the same fingerprint, and the fingerprint holds the identity of
    the weights the backend loaded: rows sampled from a round's old adapter are not resumed after the round was
    retrained in place (same path), even where the job's other inputs did not change."""
    from conftest import asked_model, resolved_prompt
    from interruptions import run_killed_after_batches

    from snakeskills.data.synthetic import arithmetic_splits
    from snakeskills.generation.generate import generate_chunk
    from snakeskills.io import write_jsonl

    prepared = tmp_path / "split.jsonl"
    write_jsonl(prepared, arithmetic_splits(operations=["+"], max_operand=9, split_sizes={"test": 12}, seed=1)["test"])
    adapter = tmp_path / "models" / "sft-round1" / "adapter"

    def generate(backend, output):
        return generate_chunk(
            asked_model(backend, resolved_prompt(user="{problem}="), SAMPLING, rows_per_flush=4),
            prepared_path=prepared,
            output_path=output,
            chunk_index=0,
            num_chunks=1,
            random_seed=3,
        )

    train_adapter(tiny_checkpoint, adapter, seed=0)
    old = hf_backend(str(tiny_checkpoint), adapter_path=str(adapter), batch_size=4, threads=1)
    old_rows, new_rows, output = (tmp_path / name for name in ("old.jsonl", "new.jsonl", "generated.jsonl"))
    generate(old, old_rows)
    run_killed_after_batches(old, monkeypatch, lambda: generate(old, output), batches=2)  # 8 rows in progress
    train_adapter(tiny_checkpoint, adapter, seed=1)
    new = hf_backend(str(tiny_checkpoint), adapter_path=str(adapter), batch_size=4, threads=1)
    assert generate(new, output) == {"rows": 12, "resumed_rows": 0, "generated_rows": 12}
    generate(new, new_rows)
    assert output.read_bytes() == new_rows.read_bytes() != old_rows.read_bytes()


def test_a_tool_loops_later_turn_continues_the_assistants_text_within_its_own_budget(tiny_checkpoint, directory):
    """A later turn of the tool loop reaches the server as the conversation, the transcript so far
    (``assistant_prefix``) and the row's remaining budget (``max_new_tokens``): the server continues exactly the
    token ids a direct load continues, and each row stops at its own budget."""
    from snakeskills.prompts import encode_messages

    direct = hf_backend(str(tiny_checkpoint), device="cpu", batch_size=3, threads=1)
    prefixes, budgets = ["1+1=<calc>", "", "27"], [3, 6, 5]
    turns, direct_turns = [], []
    for index, messages in enumerate(MESSAGES[:3]):
        turns.append(
            GenerationRequest(
                seed=index, messages=messages, assistant_prefix=prefixes[index], max_new_tokens=budgets[index]
            )
        )
        ids = encode_messages(list(messages), chat_template=False, chat_template_kwargs={}, tokenizer=direct.tokenizer)
        ids += direct.tokenizer.encode(prefixes[index], add_special_tokens=False)
        direct_turns.append(GenerationRequest(seed=index, prompt_token_ids=tuple(ids), max_new_tokens=budgets[index]))
    server = shared(tiny_checkpoint, directory)
    try:
        served = server.generate(turns, SAMPLING)
    finally:
        server.close()
    assert served == direct.generate(direct_turns, SAMPLING)
    assert [result.num_generated_tokens <= budget for result, budget in zip(served, budgets, strict=True)] == [True] * 3
    assert any(result.finish_reason == "length" and result.num_generated_tokens == 3 for result in served[:1])
