"""One model load shared by many generate jobs on a node (``generation.share_model``).

A generate job connects, through a Unix socket in ``share_model.directory``, to the server for its exact backend
settings (model, adapter, dtype, device, batch size), starting one if none runs. The server loads the model once,
answers ``generate`` requests one batch at a time (each row has its own seed, so results do not depend on which jobs
run together), stops taking jobs after ``jobs_per_load`` and exits after ``idle_seconds`` without clients. A job's
log says "started model server" or that it reused one. A tool loop's later turn continues from the token ids the
server returns. Both ends of the protocol live in this module's 500-odd lines because they change together.

GPUs: on a workstation the server holds its GPUs (``snakeskills.backends.gpus``), claimed by the job that starts it
and handed over with the open lock files; the jobs it serves declare no GPU and never start CUDA. In a SLURM job the
server runs on the allocation's GPUs.

A server is private: its folder must be the user's own, mode 0700, and its key holds the backend settings, the
weights' identity (``weights_identity``), the host, the job's GPUs and the SLURM job, so two allocations never share
a server and a round retrained in place gets a fresh one. Once loaded, a server checks that its files are still
those its job saw, else it stops.

Protocol: one JSON object per line: ``{"op": "hello"}`` then any number of
``{"op": "generate", "requests": [...], "sampling": {...}, "chat_template": bool, "chat_template_kwargs": {...}}``
(and ``functions``, ``template`` with tools through the chat template)."""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import json
import logging
import os
import socket
import socketserver
import stat
import subprocess
import sys
import threading
import time
from dataclasses import asdict, replace
from pathlib import Path

from snakeskills.backends.types import GenerationRequest, GenerationResult, SamplingParams
from snakeskills.errors import SnakeskillsError
from snakeskills.runtime_folder import private_directory, short_runtime_directory

logger = logging.getLogger(__name__)

START_TIMEOUT_SECONDS = 900


def _files_identity(path: str) -> list | str:
    """Each file under ``path`` (or ``path`` itself, a file) as (relative path, size, mtime, ctime, inode);
    ``"missing"`` when there is nothing there. Hidden files and folders are left out: no loader reads them, and some
    change beside unchanged weights (huggingface_hub's ``.cache`` of a downloaded folder, Snakemake's timestamp)."""
    try:
        status = os.stat(path)
    except OSError:
        return "missing"
    if not stat.S_ISDIR(status.st_mode):
        return [[".", status.st_size, status.st_mtime_ns, status.st_ctime_ns, status.st_ino]]
    files = []
    for folder, folders, names in os.walk(path):
        folders[:] = sorted(name for name in folders if not name.startswith("."))
        for name in sorted(names):
            if name.startswith("."):
                continue
            file_path = os.path.join(folder, name)
            try:
                status = os.stat(file_path)  # through links: a Hub snapshot's files are links to its blobs
            except OSError:
                continue  # a dangling link, or a file removed while we looked
            identity = [status.st_size, status.st_mtime_ns, status.st_ctime_ns, status.st_ino]
            files.append([os.path.relpath(file_path, path), *identity])
    return files


def weights_identity(model_path: str | os.PathLike, adapter_path: str | os.PathLike | None) -> str:
    """What a model load serves, as a short hash: each file of the model's and the adapter's folders by relative
    path, size, modification and change times (ns) and inode, the stat that git's index trusts.

    A stat, not the bytes, so that no job hashes a large checkpoint: a file rewritten or renamed into place, or copied
    with its times kept, still gets a new ctime or inode. A mode change costs one more load, never a stale one."""
    identity = [
        [role, None, None] if path is None else [role, os.fspath(path), _files_identity(os.fspath(path))]
        for role, path in (("model", model_path), ("adapter", adapter_path))
    ]
    return hashlib.sha256(json.dumps(identity).encode()).hexdigest()[:16]


def options_weights(options: dict) -> str:
    """``weights_identity`` of a server's backend options (their ``model_path`` and ``adapter_path``)."""
    return weights_identity(options["model_path"], options.get("adapter_path"))


def server_key(options: dict, weights: str) -> str:
    """The server for these backend options and these weights (``weights_identity``), on this host, these GPUs
    (the node's that a job without GPUs of its own hid from itself, else its visible ones) and this SLURM job."""
    from snakeskills.backends.gpus import hidden_node_gpus

    hidden = hidden_node_gpus()
    identity = {
        "options": options,
        "weights": weights,
        "host": socket.gethostname(),
        "visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES") if hidden is None else ",".join(hidden),
        "slurm_job": os.environ.get("SLURM_JOB_ID"),
    }
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:16]


# a Unix socket's path must fit in sockaddr_un.sun_path: 108 bytes on Linux, 104 on macOS, with the final NUL
MAX_SOCKET_PATH_BYTES = 103


def server_paths(directory: str | Path, key: str) -> tuple[Path, Path, Path]:
    """Socket, lock and log file of the server of this key (``server_key``).

    The lock and the log live in ``directory``. So does the socket, unless its path would be too long for a Unix
    socket (a deep project or temporary folder): then it lives in this user's private runtime folder, named after
    ``directory`` and the key, so jobs configured with the same folder still find the same server.
    """
    folder = Path(directory)
    socket_path = folder / f"{key}.sock"
    if len(os.fsencode(socket_path)) > MAX_SOCKET_PATH_BYTES:
        folder_key = hashlib.sha256(os.fsencode(folder.absolute())).hexdigest()[:8]
        socket_path = private_directory(short_runtime_directory()) / f"{folder_key}-{key}.sock"
    return socket_path, folder / f"{key}.lock", folder / f"{key}.log"


# ---------------------------------------------------------------- client


def served_result(fields: dict) -> GenerationResult:
    """A result as the server sent it (JSON), its token ids and log-probabilities as tuples again."""
    for name in ("token_ids", "logprobs", "model_token_mask"):
        if fields.get(name) is not None:
            fields[name] = tuple(fields[name])
    return GenerationResult(**fields)


class SharedModelBackend:
    """A backend whose model lives in a shared server process (started on first use).

    ``gpus``: the GPUs the server claims (its generation section's ``job_gpus``); None: as its backend options
    tell (``specs.server_gpus``)."""

    takes = "messages"  # the server tokenizes them (prompts.encode_messages) with the model's tokenizer

    def __init__(
        self,
        *,
        backend: str,
        options: dict,
        chat_template: bool,
        chat_template_kwargs: dict,
        directory: str,
        idle_seconds: float,
        jobs_per_load: int,
        gpus: int | None = None,
        functions: list | None = None,
        template: str | None = None,
    ):
        from snakeskills.backends.gpus import server_candidates
        from snakeskills.backends.specs import server_gpus

        self.gpus = server_gpus(backend, options, bool(server_candidates())) if gpus is None else gpus
        self.chat_format = {"chat_template": chat_template, "chat_template_kwargs": chat_template_kwargs}
        if functions:  # tools through the chat template: the prompts render with the functions (and the template)
            self.chat_format.update(functions=functions, template=template)
        self.options = {"backend": backend, **options}
        # what this job's model is now: looked at once, so that the key, the server and the log agree
        self.weights = options_weights(self.options)
        self.key = server_key(self.options, self.weights)
        folder = private_directory(directory)
        self.socket_path, lock_path, self.server_log = server_paths(folder, self.key)
        for _attempt in range(5):
            with open(lock_path, "w") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)  # one job at a time decides whether to start the server
                self.connection = self._connect()
                if self.connection is None:
                    self._start_server(idle_seconds, jobs_per_load)
            self.reader = self.connection.makefile("r", encoding="utf-8")
            try:
                hello = self._call({"op": "hello"})
            except SnakeskillsError:  # the server was shutting down as we connected
                hello = {"accepted": False}
            if hello["accepted"]:
                break
            self.close()  # it is retiring (jobs_per_load reached) or exiting: start or find a fresh one
            time.sleep(0.2)
        else:
            raise SnakeskillsError(f"could not get a model server to accept this job; see {self.server_log}")
        self.server_pid = hello["pid"]
        if hello.get("eos_token_ids") is not None:  # its backend returns token ids: a tool loop continues from them
            self.keep_tokens = False
            self.eos_token_ids = set(hello["eos_token_ids"])
        self._tokenizer = None
        logger.info(
            "model server pid %d serves this job (job %d on load %s): loaded %s (weights %s)",
            hello["pid"],
            hello["jobs"],
            hello["load_id"],
            hello["loaded"],
            hello["weights"],
        )

    def _connect(self) -> socket.socket | None:
        connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            connection.connect(str(self.socket_path))
        except OSError:
            connection.close()
            return None
        return connection

    def _start_server(self, idle_seconds: float, jobs_per_load: int) -> None:
        from snakeskills.backends.gpus import claim_server_gpus
        from snakeskills.backends.specs import pinned_index

        with contextlib.suppress(FileNotFoundError):
            self.socket_path.unlink()  # a stale socket of a dead server
        # its GPUs first, however long another job or server holds them: the start timeout below is the load's
        held = claim_server_gpus(self.gpus, self.key, pinned=pinned_index(self.options.get("device")))
        environment = dict(os.environ)
        if held.visible is not None:
            environment["CUDA_VISIBLE_DEVICES"] = held.visible
        command = [
            sys.executable,
            "-m",
            "snakeskills.backends.model_server",
            "--socket",
            str(self.socket_path),
            "--options",
            json.dumps(self.options),
            "--weights",
            self.weights,
            "--key",
            self.key,
            "--gpus",
            ",".join(held.devices),
            "--idle-seconds",
            str(idle_seconds),
            "--jobs-per-load",
            str(jobs_per_load),
        ]
        try:
            with open(self.server_log, "a") as log:
                process = subprocess.Popen(
                    command,
                    stdout=log,
                    stderr=log,
                    stdin=subprocess.DEVNULL,
                    start_new_session=True,
                    env=environment,
                    pass_fds=[lock.fileno() for lock in held.locks],  # the claim goes with the server
                )  # outlives this job; exits when idle
        finally:
            for lock in held.locks:
                lock.close()  # this job's copies: the server's keep the claim
        logger.info(
            "started model server pid %d on GPU(s) %s (log: %s)",
            process.pid,
            ",".join(held.devices) or "none",
            self.server_log,
        )
        deadline = time.monotonic() + START_TIMEOUT_SECONDS
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise SnakeskillsError(f"model server exited with code {process.returncode}; see {self.server_log}")
            self.connection = self._connect()
            if self.connection is not None:
                return
            time.sleep(0.2)
        process.kill()
        raise SnakeskillsError(f"model server did not start within {START_TIMEOUT_SECONDS}s; see {self.server_log}")

    @property
    def tokenizer(self):
        """The served model's tokenizer, loaded here for a tool loop that decodes and extends its token ids."""
        if self._tokenizer is None:
            from transformers import AutoTokenizer

            self._tokenizer = AutoTokenizer.from_pretrained(
                self.options["model_path"], trust_remote_code=self.options.get("trust_remote_code", False)
            )
        return self._tokenizer

    def _call(self, message: dict) -> dict:
        self.connection.sendall((json.dumps(message) + "\n").encode())
        line = self.reader.readline()
        if not line:
            raise SnakeskillsError(f"model server closed the connection; see {self.server_log}")
        reply = json.loads(line)
        if "error" in reply:
            raise SnakeskillsError(f"model server: {reply['error']}")
        return reply

    def generate(
        self, requests: list[GenerationRequest], sampling: SamplingParams, on_results=None
    ) -> list[GenerationResult]:
        reply = self._call(
            {
                "op": "generate",
                "requests": [
                    {
                        "seed": r.seed,
                        "messages": list(r.messages),
                        "assistant_prefix": r.assistant_prefix,
                        "assistant_prefix_token_ids": r.assistant_prefix_token_ids,
                        "max_new_tokens": r.max_new_tokens,
                    }
                    for r in requests
                ],
                "sampling": asdict(sampling),
                "keep_tokens": getattr(self, "keep_tokens", False),
                **self.chat_format,
            }
        )
        results = [served_result(result) for result in reply["results"]]
        if on_results is not None:
            on_results(results)  # the server answers the whole call at once
        return results

    def close(self) -> None:
        self.reader.close()
        self.connection.close()


# ---------------------------------------------------------------- server


class _Handler(socketserver.StreamRequestHandler):
    def handle(self):
        server = self.server
        with server.state_lock:
            server.clients += 1
        try:
            for line in self.rfile:
                message = json.loads(line)
                try:
                    reply = server.answer(message)
                except Exception as error:  # noqa: BLE001 - reported to the client, which fails its job
                    logger.exception("request failed")
                    reply = {"error": f"{type(error).__name__}: {error}"}
                self.wfile.write((json.dumps(reply) + "\n").encode())
        finally:
            with server.state_lock:
                server.clients -= 1
                server.last_activity = time.monotonic()


class ModelServer(socketserver.ThreadingUnixStreamServer):
    daemon_threads = True

    def __init__(self, socket_path: str, options: dict, weights: str, jobs_per_load: int):
        from snakeskills.backends.specs import BACKENDS

        self.options = options
        self.weights = weights
        options = dict(options)
        name = options.pop("backend")
        started = time.monotonic()
        self.backend = BACKENDS[name].build(**options)
        if not self.serves_its_weights():
            raise SnakeskillsError(
                f"the files of {options['model_path']} (adapter {options.get('adapter_path')}) changed while this "
                "server loaded them: it may hold a mix of old and new weights; the job fails, rerun it"
            )
        self.load_id = f"{os.getpid()}-{int(time.time())}"
        logger.info(
            "loaded model for %s in %.1fs (load %s, weights %s)",
            options["model_path"],
            time.monotonic() - started,
            self.load_id,
            weights,
        )
        self.jobs_per_load = jobs_per_load
        self.jobs = 0
        self.clients = 0
        self.last_activity = time.monotonic()
        self.state_lock = threading.Lock()
        self.model_lock = threading.Lock()
        self.socket_path = socket_path
        super().__init__(socket_path, _Handler)

    def answer(self, message: dict) -> dict:
        if message["op"] == "hello":
            with self.state_lock:
                accepted = self.jobs < self.jobs_per_load
                if accepted:
                    self.jobs += 1
                if self.jobs >= self.jobs_per_load:
                    self.retire()
            keeps = hasattr(self.backend, "keep_tokens")
            return {
                "accepted": accepted,
                "eos_token_ids": sorted(self.backend.eos_token_ids) if keeps else None,
                "pid": os.getpid(),
                "load_id": self.load_id,
                "jobs": self.jobs,
                "loaded": self.backend.loaded,
                "weights": self.weights,
            }
        if message["op"] == "generate":
            from snakeskills.prompts import encode_messages

            tokenizer = self.backend.tokenizer
            sampling = SamplingParams(**{**message["sampling"], "stop": tuple(message["sampling"]["stop"])})
            requests = []
            for r in message["requests"]:
                ids = tuple(
                    encode_messages(
                        r["messages"],
                        chat_template=message["chat_template"],
                        chat_template_kwargs=message["chat_template_kwargs"],
                        functions=message.get("functions"),
                        template=message.get("template"),
                        tokenizer=tokenizer,
                    )
                )
                budget = r.get("max_new_tokens")
                # a tool loop's later turn continues the assistant's reply so far (its ids where the loop kept them),
                # with what is left of the context, as a direct load's loop gives it (tools.loop._turn_request)
                if r.get("assistant_prefix_token_ids") is not None:
                    ids += tuple(r["assistant_prefix_token_ids"])
                elif r.get("assistant_prefix"):
                    ids += tuple(tokenizer.encode(r["assistant_prefix"], add_special_tokens=False))
                if budget is not None and self.backend.context_length is not None:
                    budget = min(budget, self.backend.context_length - len(ids))
                requests.append(GenerationRequest(seed=r["seed"], prompt_token_ids=ids, max_new_tokens=budget))
            results: list = [None] * len(requests)
            running = [index for index, request in enumerate(requests) if request.budget(sampling) > 0]
            for index in set(range(len(requests))) - set(running):  # no room left: the row ends at its length
                results[index] = GenerationResult(generation="", num_generated_tokens=0, finish_reason="length")
                if message.get("keep_tokens"):
                    results[index] = replace(results[index], token_ids=(), logprobs=())
            with self.model_lock:
                if hasattr(self.backend, "keep_tokens"):
                    self.backend.keep_tokens = bool(message.get("keep_tokens"))
                generated = self.backend.generate([requests[index] for index in running], sampling) if running else []
            for index, result in zip(running, generated, strict=True):
                results[index] = result
            counted = [
                replace(result, num_prompt_tokens=len(request.prompt_token_ids))
                for request, result in zip(requests, results, strict=True)
            ]
            return {"results": [asdict(result) for result in counted]}
        raise ValueError(f"unknown op {message['op']!r}")

    def serves_its_weights(self) -> bool:
        """Whether the model's files on disk are still those it loaded (its key names them)."""
        return options_weights(self.options) == self.weights

    def retire(self) -> None:
        """Take no new jobs: remove the socket path so the next job starts a fresh server."""
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.socket_path)
        logger.info("served %d jobs: retiring after the current ones", self.jobs)


def serve(
    socket_path: str, options: dict, weights: str, idle_seconds: float, jobs_per_load: int, key: str, gpus: list[str]
) -> None:
    """Load the model and answer jobs until idle. ``key``: its ``server_key``; ``gpus``: the devices whose claims
    it was handed (it marks them, so that a process waiting for one can ask it to exit)."""
    from snakeskills.backends.gpus import mark_server_gpus

    release_requests = mark_server_gpus(key, gpus)  # its GPUs hold its memory until it exits
    server = ModelServer(socket_path, options, weights, jobs_per_load)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    while True:
        time.sleep(0.5)
        # a job of new weights at the same path (a round retrained in place) has a key of its own: none can reach
        # this server any more, so it leaves as soon as its jobs are done instead of holding memory while idle
        stale = server.clients == 0 and not server.serves_its_weights()
        with server.state_lock:
            idle = server.clients == 0 and time.monotonic() - server.last_activity > idle_seconds
            if server.jobs_per_load and any(request.exists() for request in release_requests):
                logger.info("a job waits for this server's GPU(s): taking no new jobs, exiting to free their memory")
                server.jobs_per_load = 0  # a job connecting now is turned away and starts a fresh server
                server.retire()
            if server.clients == 0 and stale:
                logger.info("its weights changed on disk (a new key; no job can reach it): exiting")
                idle = True
            retired_and_done = server.jobs >= server.jobs_per_load and server.clients == 0
            if idle or retired_and_done:
                server.jobs_per_load = 0  # a job connecting now is turned away and starts a fresh server
                if idle:
                    server.retire()
                break
    server.shutdown()
    logger.info("model server exits (%d jobs served)", server.jobs)


def main() -> None:
    parser = argparse.ArgumentParser(description="snakeskills shared model server")
    parser.add_argument("--socket", required=True)
    parser.add_argument("--options", required=True)
    parser.add_argument("--weights", required=True, help="weights_identity of the files the starting job saw")
    parser.add_argument("--idle-seconds", type=float, required=True)
    parser.add_argument("--jobs-per-load", type=int, required=True)
    parser.add_argument("--key", required=True, help="its server_key, as the starting job computed it")
    parser.add_argument("--gpus", default="", help="the GPUs whose claims it holds, comma separated")
    arguments = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s model_server %(levelname)s: %(message)s")
    serve(
        arguments.socket,
        json.loads(arguments.options),
        arguments.weights,
        arguments.idle_seconds,
        arguments.jobs_per_load,
        arguments.key,
        [device for device in arguments.gpus.split(",") if device],
    )


if __name__ == "__main__":
    main()
