"""LoRA on vLLM's CPU platform, one matrix product per adapter instead of one per token.

vLLM's CPU LoRA kernels (``vllm.lora.ops.torch_ops``, ``PunicaWrapperCPU``) gather a (tokens, rank, width) adapter
tensor per layer and step: about 1 s per product for a 2,048-token SmolLM2-135M prefill on 2 cores, against 25 ms
for one product per adapter.

``register`` replaces them by ``grouped_product`` (the tokens of each adapter index in one product). It is a vLLM
general plugin (entry point ``vllm.general_plugins``, written into ``snakeskills.backends.vllm_env``'s environment),
loaded in every vLLM process. Results equal vLLM's kernels up to float rounding (tests/external/test_vllm.py); GPU
Triton kernels are left alone."""

from __future__ import annotations

KERNELS = ("bgmv_shrink", "bgmv_expand", "bgmv_expand_slice")
# modules that hold their own references to the kernels: the torch ops' (whose sgmv_* call bgmv_*) and the CPU
# punica wrapper's (imported by name)
MODULES = ("vllm.lora.ops.torch_ops.lora_ops", "vllm.lora.punica_wrapper.punica_cpu")


def grouped_product(inputs, weights, indices, dtype):
    """Row i of the result is ``inputs[i] @ weights[indices[i]].T``, in ``dtype``: one matrix product per distinct
    index. ``weights`` is (adapters, out, in) or (adapters, 1, out, in); an index of -1 picks the last adapter, as
    vLLM's own kernels' indexing does."""
    import torch

    inputs = inputs.to(dtype=dtype)
    distinct = torch.unique(indices)
    if distinct.numel() == 1:
        return inputs @ _matrix(weights, int(distinct), dtype).T
    outputs = inputs.new_empty((inputs.shape[0], weights.shape[-2]))
    for index in distinct.tolist():
        rows = (indices == index).nonzero().squeeze(1)
        outputs[rows] = inputs[rows] @ _matrix(weights, index, dtype).T
    return outputs


def _matrix(weights, index: int, dtype):
    matrix = weights[index]
    return (matrix.squeeze(0) if matrix.dim() == 3 else matrix).to(dtype=dtype)


def bgmv_shrink(inputs, lora_b_weights, output_tensor, lora_indices_tensor, scaling: float = 1.0):
    outputs = grouped_product(inputs, lora_b_weights, lora_indices_tensor, output_tensor.dtype)
    output_tensor[:, : outputs.shape[1]] = scaling * outputs


def bgmv_expand(inputs, lora_b_weights, output_tensor, lora_indices_tensor, add_inputs: bool = True):
    outputs = grouped_product(inputs, lora_b_weights, lora_indices_tensor, output_tensor.dtype)
    limit = 1 if outputs.shape[0] == 1 and output_tensor.shape[0] != 1 else output_tensor.shape[0]
    width = min(outputs.shape[1], output_tensor.shape[1])  # adapter and model may pad differently
    if add_inputs:
        output_tensor[:, :width] += outputs[:limit, :width]
    else:
        output_tensor[:, :width] = outputs[:limit, :width]


def bgmv_expand_slice(
    inputs, lora_b_weights, output_tensor, lora_indices_tensor, slice_offset: int, slice_size: int, add_inputs=True
):
    outputs = grouped_product(inputs, lora_b_weights, lora_indices_tensor, output_tensor.dtype)
    if add_inputs:
        output_tensor[:, slice_offset : slice_offset + slice_size] += outputs
    else:
        output_tensor[:, slice_offset : slice_offset + slice_size] = outputs


def register() -> None:
    """Put the grouped kernels in place of vLLM's CPU ones, in this process (idempotent; a vLLM without these
    modules is left as it is)."""
    import importlib

    for name in MODULES:
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        for kernel in KERNELS:
            if hasattr(module, kernel):
                setattr(module, kernel, globals()[kernel])  # this module's function of that name
