"""A teacher behind `transformers serve`: requests/s with and without continuous batching, side by side.

Usage: python bench/serve_batching.py [--model FOLDER] [--requests 64] [--concurrency 1 8]
    [--output bench/results/serve_batching-cpu.json]

The openai backend sends a teacher's or judge's rows ``generation.openai.max_concurrency`` at a time. Whether that
helps depends on the server: plain `transformers serve` decodes one request at a time, and with
``--continuous-batching`` it batches the requests in flight (paged attention). This starts the server both ways
on the CPU (``--device cpu``) and sends the same ``--requests`` short chat requests (a 2-digit sum, 10 new tokens
at most, temperature 0.7) at each ``--concurrency``, after one warm-up request, and reports seconds per request
and the ratio against one request at a time without batching. The model defaults to the converted
SmolLM2-135M-Instruct (``python3 -m snakeskills.models.pretrained smollm2-135m-instruct``).
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

from servers import TransformersServer  # noqa: E402  (the tests' server helper: a free port, a health wait)


def ask(base_url: str, model: str, index: int) -> str:
    body = {
        "model": model,
        "messages": [{"role": "user", "content": f"{10 + index % 80}+{20 + index % 70}="}],
        "max_tokens": 10,
        "temperature": 0.7,
    }
    request = urllib.request.Request(
        f"{base_url}/chat/completions", data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=300) as response:
        return json.loads(response.read())["choices"][0]["message"]["content"]


def measure(model: Path, *, continuous_batching: bool, requests: int, concurrency: list[int]) -> dict[int, float]:
    """Seconds per request at each concurrency, against one server started with or without batching."""
    server = TransformersServer(model, continuous_batching=continuous_batching).start()
    try:
        ask(server.base_url, str(model), 0)
        seconds = {}
        for in_flight in concurrency:
            started = time.perf_counter()
            with ThreadPoolExecutor(in_flight) as pool:
                answers = list(pool.map(lambda index: ask(server.base_url, str(model), index), range(requests)))
            seconds[in_flight] = (time.perf_counter() - started) / requests
            assert all(isinstance(answer, str) for answer in answers)
        return seconds
    finally:
        server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, help="a checkpoint folder (default: the converted SmolLM2)")
    parser.add_argument("--requests", type=int, default=64)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--output", type=Path, default=REPO / "bench/results/serve_batching-cpu.json")
    arguments = parser.parse_args()
    if arguments.model is None:
        from snakeskills.models.pretrained import packaged_model_folder

        arguments.model = packaged_model_folder("smollm2-135m-instruct")
    results = {
        mode: measure(
            arguments.model,
            continuous_batching=mode == "continuous-batching",
            requests=arguments.requests,
            concurrency=arguments.concurrency,
        )
        for mode in ("plain", "continuous-batching")
    }
    baseline = results["plain"][min(arguments.concurrency)]
    print(f"{arguments.requests} requests to {arguments.model.name} (10 new tokens), seconds per request:")
    for mode, seconds in results.items():
        for in_flight, value in seconds.items():
            print(f"  {mode:20s} {in_flight:3d} in flight: {value:.3f} s ({baseline / value:.2f}x)")
    version = subprocess.run(
        [sys.executable, "-c", "import transformers; print(transformers.__version__)"], capture_output=True, text=True
    ).stdout.strip()
    arguments.output.parent.mkdir(parents=True, exist_ok=True)
    arguments.output.write_text(
        json.dumps(
            {
                "model": arguments.model.name,
                "requests": arguments.requests,
                "seconds_per_request": results,
                "transformers": version,
                "machine": platform.machine(),
            },
            indent=2,
        )
        + "\n"
    )


if __name__ == "__main__":
    main()
