"""A real OpenAI-compatible server for tests: `transformers serve` on a free localhost port."""

from __future__ import annotations

import http.server
import json
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# Continuous batching's paged KV cache, bounded. Unbounded, transformers sizes it on a CPU from the machine's RAM
# (60 % of what the process does not hold): a 135M-parameter teacher's server held 14.4 GB resident on a 24 GB
# machine, and two of them (one per worker) did not fit. 256 blocks of 32 tokens hold 8 requests of 1,024 tokens;
# with at most 256 tokens a forward pass the same server holds about 4.2 GB.
CONTINUOUS_BATCHING_BOUNDS = ["--cb-num-blocks", "256", "--cb-max-batch-tokens", "256"]
PEAK_MEMORY_BOUND_GB = 6


class TransformersServer:
    """`transformers serve <checkpoint>` on a free localhost port; with ``continuous_batching``, the server batches
    the requests it has in flight (paged attention, its cache bounded: ``CONTINUOUS_BATCHING_BOUNDS``): 3.55x faster
    with 8 in flight, slower with 1 (bench/serve_batching.py). It loads the checkpoint in the dtype our own hf backend
    generates in with ``dtype: auto`` on this CPU (float32 where bf16 is emulated, snakeskills.models.loading), as a
    user serving on a CPU would ask with ``--dtype``. A port it chose that another process took first (a free port is
    free only when asked) costs a retry on another, never the test."""

    def __init__(self, checkpoint, port=None, *, continuous_batching: bool = False):
        from snakeskills.models.loading import INFERENCE, load_dtype

        self.checkpoint = str(checkpoint)
        self.port_given = port is not None
        self.port = port or free_port()
        self.continuous_batching = continuous_batching
        self.dtype = str(load_dtype("auto", INFERENCE, on_gpu=False)).removeprefix("torch.")  # "auto" or "float32"
        self.process = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self):
        # beside the running Python: the venv the tests run in need not be activated (not on PATH)
        executable = Path(sys.executable).parent / "transformers"
        assert executable.is_file(), f"{executable}: transformers[serving] is part of the [test] extra"
        batching = ["--continuous-batching", *CONTINUOUS_BATCHING_BOUNDS] if self.continuous_batching else []
        for attempt in range(3):
            self.process = subprocess.Popen(
                [
                    executable,
                    "serve",
                    self.checkpoint,
                    *["--host", "127.0.0.1", "--port", str(self.port), "--device", "cpu", "--dtype", self.dtype],
                    *batching,
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            try:
                wait_until_healthy(self.process, self.port, "transformers serve", 120)
                return self
            except ServerExitedAtStart:
                if self.port_given or attempt == 2:
                    raise
                self.port = free_port()
        return self

    def peak_memory_gb(self) -> float:
        """The most memory the server has held resident (VmHWM), in GB."""
        status = Path(f"/proc/{self.process.pid}/status").read_text()
        return int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmHWM:"))) / 1e6

    def stop(self):
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


class ServerExitedAtStart(AssertionError):
    pass


def wait_until_healthy(process: subprocess.Popen, port: int, name: str, seconds: int) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise ServerExitedAtStart(f"{name} exited at start")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            time.sleep(0.5)
    raise AssertionError(f"{name} did not become healthy in {seconds} s")


class VLLMServer:
    """`vllm serve <checkpoint>` on a free localhost port, from vLLM's CPU build in its own environment
    (snakeskills.backends.vllm_env): what NeMo-Skills users run for teachers and judges. Its KV cache is sized in GiB
    (on a CPU, --gpu-memory-utilization would reserve that share of the machine's RAM); its output goes to ``log``."""

    def __init__(self, python, checkpoint, log: Path, port=None, arguments=()):
        self.python = Path(python)
        self.checkpoint = str(checkpoint)
        self.log = log
        self.port = port or free_port()
        self.arguments = list(arguments)  # more of vllm serve's options (a tool parser, a chat template)
        self.process = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self):
        import os

        executable = self.python.parent / "vllm"
        environment = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CPU_OMP_THREADS_BIND": "nobind"}
        with open(self.log, "w") as log:
            self.process = subprocess.Popen(
                [executable, "serve", self.checkpoint, "--host", "127.0.0.1", "--port", str(self.port)]
                + ["--dtype", "float32", "--seed", "0"]
                # as the vllm backend does on a CPU (snakeskills.backends.vllm.cpu_scheduling): no seeded prompt split
                + ["--no-enable-chunked-prefill", "--max-num-batched-tokens", "4096"]
                + self.arguments,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=environment,
            )
        wait_until_healthy(self.process, self.port, f"vllm serve (log {self.log})", 900)
        return self

    def stop(self):
        TransformersServer.stop(self)


class JsonHandler(http.server.BaseHTTPRequestHandler):
    """A stub HTTP server's handler (for what cannot run here, e.g. vLLM): answers with JSON, logs nothing."""

    def send_json(self, status: int, payload: dict) -> None:
        body = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *arguments):
        pass
