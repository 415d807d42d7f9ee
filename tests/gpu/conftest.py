"""The GPU suite (marker ``gpu``): collected everywhere, skipped with a reason where CUDA is absent. Run it, with
the generation and SFT benchmarks, by ``bash bench/gpu.sh`` on a GPU node (README, "GPUs"). Every test records
its figures in bench/results/gpu-tests-cuda.json (``record``)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch

RESULTS = Path(__file__).resolve().parents[2] / "bench" / "results" / "gpu-tests-cuda.json"


# GPU_SUITE_DEVICE=cpu runs the suite's code on a CPU (to check the suite itself; its figures mean nothing there)
DEVICE = os.environ.get("GPU_SUITE_DEVICE", "cuda")


def pytest_collection_modifyitems(config, items):
    here = Path(__file__).parent
    skip = pytest.mark.skip(reason="no CUDA device: the GPU suite runs on a GPU node (bash bench/gpu.sh)")
    for item in items:
        if here in item.path.parents:
            item.add_marker(pytest.mark.gpu)
            if DEVICE == "cuda" and not torch.cuda.is_available():
                item.add_marker(skip)


@pytest.fixture(scope="session")
def device() -> str:
    return DEVICE


@pytest.fixture(scope="session")
def record():
    """``record(test, figures)``: the figures a test measured, merged into RESULTS at once (a GPU lease that ends
    mid-suite keeps what the finished tests measured)."""

    def merge(test: str, values: dict) -> None:
        if DEVICE != "cuda":
            return
        previous = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
        device = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__}
        merged = {**previous, test: {**previous.get(test, {}), **values}, "machine": device}
        RESULTS.write_text(json.dumps(merged, indent=2) + "\n")

    return merge
