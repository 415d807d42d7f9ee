#!/usr/bin/env bash
# The GPU proof in one command, on a GPU node (no network needed: random weights, offline tokenizers):
#   bash bench/gpu.sh
# 1. the GPU test suite (tests/gpu): hf backend against plain generate, compile against eager, rows across batch
#    sizes and with/without the shared prompt opening in bf16 and float32, LoRA and full SFT in bf16 with and
#    without gradient checkpointing, GPU claims with the real nvidia-smi, DDP and FSDP on 2+ GPUs; figures to
#    bench/results/gpu-tests-cuda.json;
# 2. bench/generation.py, random workload (Qwen2.5-0.5B's shape and vocabulary, bf16), eager and compiled,
#    to bench/results/generation-cuda.json;
# 3. where the converted SmolLM2 is cached (~/.cache/snakeskills, or SNAKESKILLS_CACHE) or its package can be
#    installed: bench/generation.py --workload smollm2 and bench/sft.py on CUDA.
# About 8 minutes on one H100. Needs the project's Python packages (pip install -e ".[test]").
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 'bench/gpu.sh: no CUDA device')"
export PYTHONUNBUFFERED=1
status=0
# --confcutdir: the GPU suite needs none of the CPU suite's fixtures (nor snakemake)
# -o addopts=: one process, as the GPU tests time and share one GPU (and without pytest-xdist installed)
python3 -m pytest tests/gpu -o addopts= --confcutdir=tests/gpu -p no:cacheprovider -q -rs || status=$?
python3 bench/generation.py --workload random --compile --repeats 2 || status=$?
if python3 -c "from snakeskills.pretrained import packaged_model_folder as f; f('smollm2-135m-instruct')" 2>/dev/null; then
    python3 bench/generation.py --workload smollm2 --compile --repeats 2 || status=$?
    python3 bench/sft.py --device cuda --examples 512 --batch-size 32 || status=$?
else
    echo "bench/gpu.sh: SmolLM2 not cached and its package not reachable: smollm2 workloads skipped"
fi
exit $status
