#!/usr/bin/env bash
# The GPU proof in one command, on a GPU node (no network needed: random weights, offline tokenizers):
#   bash bench/gpu.sh
# 1. the GPU test suite (tests/gpu, verbose, each test's time): hf backend against plain generate, compile
#    against eager, rows across batch sizes and with/without the shared prompt opening in bf16 and float32, LoRA
#    and full SFT in bf16 with and without gradient checkpointing, GPU claims with the real nvidia-smi, DDP and
#    FSDP on 2+ GPUs; each test's figures go to bench/results/gpu-tests-cuda.json as it finishes;
# 2. bench/generation.py, random workload (Qwen2.5-0.5B's shape and vocabulary, bf16), eager and compiled,
#    to bench/results/generation-cuda.json;
# 3. where the converted SmolLM2 is cached (~/.cache/snakeskills, or SNAKESKILLS_CACHE) or its package can be
#    installed: bench/generation.py --workload smollm2 and bench/sft.py on CUDA.
# Each step has a time limit (GPU_STEP_SECONDS, default 420), so that a short lease ends with every step's
# output. Needs the project's Python packages (pip install -e ".[test]"; on a node without network, carry the
# wheels that bench/gpu_wheels.py downloads).
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 'bench/gpu.sh: no CUDA device')"
export PYTHONUNBUFFERED=1
status=0
# --confcutdir: the GPU suite needs none of the CPU suite's fixtures
# -o addopts=: one process, as the GPU tests time and share one GPU (and without pytest-xdist installed)
step="timeout ${GPU_STEP_SECONDS:-420}"
# pytest-timeout, where installed, ends one stuck test instead of the whole step
per_test=$(python3 -c "import pytest_timeout" 2>/dev/null && echo "--timeout=240" || true)
$step python3 -m pytest tests/gpu -o addopts= --confcutdir=tests/gpu -p no:cacheprovider -v -rs --durations=0 \
    $per_test || status=$?
$step python3 bench/generation.py --workload random --compile --repeats 2 --one-by-one 4 || status=$?
if python3 -c "from snakeskills.models.pretrained import packaged_model_folder as f; f('smollm2-135m-instruct')" 2>/dev/null; then
    $step python3 bench/generation.py --workload smollm2 --compile --repeats 1 || status=$?
    $step python3 bench/sft.py --device cuda --examples 512 --batch-size 32 || status=$?
else
    echo "bench/gpu.sh: SmolLM2 not cached and its package not reachable: smollm2 workloads skipped"
fi
exit $status
