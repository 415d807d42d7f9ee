#!/usr/bin/env bash
# The GPU proof in one command, on a GPU node (no network needed: random weights, offline tokenizers):
#   bash bench/gpu.sh                       # every step
#   GPU_STEPS="bf16 tests" bash bench/gpu.sh   # some of them (a short lease)
# Steps, in this order (GPU_STEPS names them):
#   bf16       bench/bf16_sampling.py: the GPU suite's sampled-decoding comparison taken apart per dtype (the
#              backend, without top-p, without cuDNN attention, greedy, plain generate) with torch.profiler's top
#              operators, to bench/results/bf16-sampling-cuda.json (+ .txt);
#   tests      the GPU test suite (tests/gpu, verbose, each test's time): hf backend against plain generate, compile
#              against eager, rows across batch sizes and with/without the shared prompt opening in bf16 and float32,
#              LoRA and full SFT in bf16 with and without gradient checkpointing, GPU claims with the real nvidia-smi,
#              DDP and FSDP on 2+ GPUs; each test's figures go to bench/results/gpu-tests-cuda.json as it finishes;
#   generation bench/generation.py, random workload (Qwen2.5-0.5B's shape and vocabulary, bf16), eager and compiled,
#              to bench/results/generation-cuda.json; where SmolLM2 is cached (~/.cache/snakeskills, or
#              SNAKESKILLS_CACHE) or its package can be installed, also --workload smollm2 and bench/sft.py on CUDA;
#   pipelines  bench/gpu_pipelines.py: the embedded default and the tiny tools example whole, on the GPU and on the
#              same node's CPU, to bench/results/gpu-pipelines.json;
#   grpo       bench/grpo.py --device cuda: GRPO with hf rollouts on SmolLM2 (needs SmolLM2, as above), s/step, to
#              bench/results/grpo-cuda.json.
# Each step has a time limit (GPU_STEP_SECONDS, default 420), so that a short lease ends with every step's
# output. Needs the project's Python packages (pip install -e ".[test]"; on a node without network, carry the
# wheels that bench/gpu_wheels.py downloads).
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 'bench/gpu.sh: no CUDA device')"
export PYTHONUNBUFFERED=1
steps=" ${GPU_STEPS:-bf16 tests generation pipelines grpo} "
status=0
step="timeout ${GPU_STEP_SECONDS:-420}"
smollm2() {
    python3 -c "from snakeskills.models.pretrained import packaged_model_folder as f; f('smollm2-135m-instruct')" 2>/dev/null
}
if [[ $steps == *" bf16 "* ]]; then
    $step python3 bench/bf16_sampling.py --device cuda || status=$?
fi
if [[ $steps == *" tests "* ]]; then
    # --confcutdir: the GPU suite needs none of the CPU suite's fixtures
    # -o addopts=: one process, as the GPU tests time and share one GPU (and without pytest-xdist installed)
    # pytest-timeout, where installed, ends one stuck test instead of the whole step
    per_test=$(python3 -c "import pytest_timeout" 2>/dev/null && echo "--timeout=240" || true)
    $step python3 -m pytest tests/gpu -o addopts= --confcutdir=tests/gpu -p no:cacheprovider -v -rs --durations=0 \
        $per_test || status=$?
fi
if [[ $steps == *" generation "* ]]; then
    $step python3 bench/generation.py --workload random --compile --repeats 2 --one-by-one 4 || status=$?
    if smollm2; then
        $step python3 bench/generation.py --workload smollm2 --compile --repeats 1 || status=$?
        $step python3 bench/sft.py --device cuda --examples 512 --batch-size 32 || status=$?
    else
        echo "bench/gpu.sh: SmolLM2 not cached and its package not reachable: smollm2 workloads skipped"
    fi
fi
if [[ $steps == *" pipelines "* ]]; then
    $step python3 bench/gpu_pipelines.py --timeout 200 || status=$?
fi
if [[ $steps == *" grpo "* ]]; then
    if smollm2; then
        $step python3 bench/grpo.py --device cuda --steps 4 --repeats 1 --variants hf trl-stock || status=$?
    else
        echo "bench/gpu.sh: SmolLM2 not cached and its package not reachable: GRPO on SmolLM2 skipped"
    fi
fi
exit $status
