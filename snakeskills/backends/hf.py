"""transformers backend: batched decoding of padded prompts on CPU or CUDA, LoRA adapters via peft.

Its own decoding loop rather than ``model.generate``: prompts batched longest first, the shared opening of a batch's
prompts computed once (``HFBackend.batch_layout``), finished rows (EOS, stop string) leaving the batch. Tokens are
drawn by ``draw_tokens`` (seeded Gumbel-max), so a row's tokens depend on its seed only and a resumed or re-chunked
run reproduces them.

One module of about 600 lines: the decoding loop, its batch layout, KV cache, sampling and stop handling share their
state and are read together."""

from __future__ import annotations

import inspect
import logging

from snakeskills.backends.kv_cache import growing_cache, keep_room
from snakeskills.backends.types import (
    GenerationRequest,
    GenerationResult,
    SamplingParams,
    context_overflow,
    truncate_at_stop,
)
from snakeskills.errors import SnakeskillsError

logger = logging.getLogger(__name__)


def resolve_device(device: str) -> str:
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise SnakeskillsError(f"generation.device: {device!r} requested but CUDA is not available on this node")
    return device


def load_model_and_tokenizer(
    model_path: str, *, adapter_path: str | None, device: str, dtype: str, trust_remote_code: bool
):
    """The model (plus an optional LoRA adapter, not merged) for inference on ``device``, and its tokenizer."""
    from snakeskills.models.loading import INFERENCE, load_model, load_tokenizer

    tokenizer = load_tokenizer(model_path, trust_remote_code=trust_remote_code)
    model = load_model(
        model_path,
        dtype=dtype,
        policy=INFERENCE,
        trust_remote_code=trust_remote_code,
        adapter_path=adapter_path,
        on_gpu=device.startswith("cuda"),
    )
    model.to(device)
    model.eval()
    return model, tokenizer


MASK32 = 0xFFFFFFFF
# finished rows leave a decoding batch once they are this fraction of it (1/8): at most 1/8 of a step's
# compute goes to finished rows, and the KV cache is copied at most about 40 times for a batch of 256
COMPACT_EVERY = 8
# the shortest static KV cache of a compiled step, in tokens
MIN_STATIC_CACHE = 128
# a batch's prompts share their first tokens (the system prompt, the instruction, few-shot examples): when at
# least this many, the prefix is computed once and its keys and values copied to every row
MIN_SHARED_PREFIX = 16


def _mix32(values):
    """An avalanche hash of 32-bit values held in int64 tensors: xor-shifts and two multiplications by odd
    constants below 2**31, so that no product leaves int64 (defined, identical on every device)."""
    values = values ^ (values >> 16)
    values = (values * 0x7FEB352D) & MASK32
    values = values ^ (values >> 15)
    values = (values * 0x5BD1E995) & MASK32
    return values ^ (values >> 16)


def row_keys(seeds, step):
    """One 32-bit key per row for one decoding step: a hash of the row's 63-bit seed and the step (an int, or an
    int64 tensor of one step per row: rows at different steps of their turns, ``hf_turns``)."""
    high, low = (seeds >> 32) & MASK32, seeds & MASK32
    return _mix32(_mix32(_mix32(high ^ 0x2545F491) ^ low) ^ (step & MASK32))


def _as_int32(value: int) -> int:
    """The signed 32-bit integer with the bits of ``value`` mod 2**32 (a multiplier for int32 tensors)."""
    value &= MASK32
    return value - (1 << 32) if value >= 1 << 31 else value


def counter_bits(seeds, step, token_ids):
    """23 random bits per (row, token) at one step: a hash of (row seed, step, token id), on the seeds' device.

    The row's key (``row_keys``, exact int64 arithmetic, one value per row) is mixed with each token id in
    int32 tensors: one multiply-xorshift-multiply round, whose top 23 bits are kept. int32 products wrap
    mod 2**32 on CPU and CUDA, and right shifts are masked to act as logical shifts, so the bits equal the
    same hash in exact integer arithmetic (tests/components/test_sampling.py checks it against Python's). int32 keeps
    the few vocabulary-sized passes cheap: half the memory traffic of int64.
    """
    import torch

    keys = row_keys(seeds, step)
    keys = torch.where(keys >= 1 << 31, keys - (1 << 32), keys).to(torch.int32).unsqueeze(1)
    bits = token_ids.to(torch.int32, copy=True).mul_(_as_int32(0x61C88647))
    bits = torch.bitwise_xor(bits, keys).mul_(_as_int32(0x7FEB352D))
    bits.bitwise_xor_((bits >> 15).bitwise_and_(0x1FFFF)).mul_(_as_int32(0x846CA68B))
    return (bits >> 9).bitwise_and_(0x7FFFFF)


def counter_gumbel(seeds, step, token_ids):
    """Gumbel noise for (row, token) pairs at one step: a pure function of (row seed, step, token id).

    ``seeds`` is an int64 tensor of non-negative 63-bit seeds on the model's device, one per row;
    ``token_ids`` an integer tensor of the tokens to draw noise for: the whole vocabulary (1-D, shared by the
    rows) or each row's candidates (one row each). No generator state is involved, so no row, batch size or
    device order can influence another row's noise. Uniforms have 23 bits, strictly inside (0, 1).
    """
    import torch

    uniform = counter_bits(seeds, step, token_ids).to(torch.float32).add_(0.5).mul_(2.0**-23)
    return uniform.log_().neg_().log_().neg_()


def draw_tokens(logits, seeds, step, sampling: SamplingParams):
    """Each row's next token: temperature, top-k, top-p, then a seeded Gumbel-max draw, on the logits' device.

    Row i's token at step t is the argmax over candidates v of ``logits[v] / temperature + counter_gumbel(seed_i, t,
    v)``, an exact draw from the filtered softmax, for the whole batch at once (noise only for top-k/top-p's kept
    tokens). A sample depends on its seed and its own logits only, not on batch or chunking (rounding flips an argmax
    almost never). Temperature 0 is greedy."""
    import torch

    if sampling.temperature == 0:
        return logits.argmax(dim=-1)
    if seeds.device != logits.device:
        seeds = seeds.to(logits.device)
    scores = logits.float() / sampling.temperature
    vocabulary = scores.shape[-1]
    top_k = 0 < sampling.top_k < vocabulary
    if not top_k and sampling.top_p >= 1.0:
        tokens = torch.arange(vocabulary, device=scores.device)
        return scores.add_(counter_gumbel(seeds, step, tokens)).argmax(dim=-1)
    if top_k:
        candidates, candidate_ids = torch.topk(scores, sampling.top_k, dim=-1)
    else:
        candidates, candidate_ids = torch.sort(scores, descending=True, dim=-1)
    if sampling.top_p < 1.0:
        probabilities = torch.softmax(candidates, dim=-1)
        removed = probabilities.cumsum(dim=-1) - probabilities >= sampling.top_p
        candidates = candidates.masked_fill(removed, float("-inf"))
        # the kept candidates of each row are a prefix (the most likely first): draw among the longest
        kept = int((~removed).sum(dim=-1).max())
        candidates, candidate_ids = candidates[:, :kept], candidate_ids[:, :kept]
    noisy = candidates + counter_gumbel(seeds, step, candidate_ids)
    return candidate_ids.gather(1, noisy.argmax(dim=-1, keepdim=True)).squeeze(1)


def drawn_logprobs(logits, tokens, sampling: SamplingParams):
    """Each row's drawn token's log-probability under the temperature-scaled softmax (before top-k/top-p, as a
    trainer's forward computes it; greedy: temperature 1)."""
    import torch

    scores = logits.float() / (sampling.temperature or 1.0)
    return torch.log_softmax(scores, dim=-1).gather(1, tokens.unsqueeze(1)).squeeze(1)


class PerRequestSampler:
    """``draw_tokens`` as a transformers logits processor, for ``model.generate``: the returned scores are
    -inf except 0 at each row's drawn token, so greedy ``generate`` picks it. The backend runs its own
    decoding loop; this lets tests and benchmarks put the same sampler inside plain ``generate``."""

    def __init__(self, seeds: list[int], sampling: SamplingParams, prompt_length: int):
        import torch

        self.sampling = sampling
        self.prompt_length = prompt_length
        self.seeds = torch.tensor(seeds, dtype=torch.int64)

    def __call__(self, input_ids, scores):
        import torch

        if self.sampling.temperature == 0:
            return scores
        drawn = draw_tokens(scores, self.seeds, input_ids.shape[1] - self.prompt_length, self.sampling)
        return torch.full_like(scores, float("-inf")).scatter_(1, drawn.unsqueeze(1), 0.0)


def forward_parameters(model) -> set[str]:
    """The keyword arguments of the model's own ``forward`` (a peft model's base model's)."""
    base_model = model.get_base_model() if hasattr(model, "get_base_model") else model
    return set(inspect.signature(base_model.forward).parameters)


def cache_keyword(model) -> str:
    """The keyword under which ``model.forward`` takes its KV cache: ``cache`` in recent transformers (which
    deprecate ``past_key_values`` and drop it in 5.40), ``past_key_values`` before."""
    return "cache" if "cache" in forward_parameters(model) else "past_key_values"


def decoding_step(model):
    """One decoding step of ``model``: next-token logits of one new token per row, over a static KV cache."""
    keyword = cache_keyword(model)

    def step(input_ids, attention_mask, position_ids, cache):
        return model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            use_cache=True,
            **{keyword: cache},
        ).logits[:, -1, :]

    return step


def compiled_decoding_step(model, device: str, batch_size: int, context: int | None):
    """``decoding_step`` compiled by ``torch.compile``: with CUDA graphs on a GPU (mode reduce-overhead),
    which removes the per-kernel launch cost that dominates small-model decoding; plain inductor on CPU.
    Shapes are static: one graph per (batch size, cache length) met, at most ``compiled_shapes_bound`` of them,
    and dynamo's recompile limit is raised to that bound so that no shape falls back to eager."""
    import torch

    mode = "reduce-overhead" if device.startswith("cuda") else "default"
    bound = compiled_shapes_bound(batch_size, context)
    torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, bound)
    return torch.compile(decoding_step(model), mode=mode, fullgraph=False, dynamic=False)


def static_cache_length(tokens: int) -> int:
    """The static KV cache length for a job whose longest row needs ``tokens``: the smallest length of the
    form 2^k or 3 x 2^(k-1), at least MIN_STATIC_CACHE, so that the jobs of a run and a long-lived server meet a
    few cache lengths (not one per job), each less than 1.5 times what is needed."""
    power = max(MIN_STATIC_CACHE, 1 << (tokens - 1).bit_length())
    three_quarters = power * 3 // 4
    return three_quarters if tokens <= three_quarters and three_quarters >= MIN_STATIC_CACHE else power


def compiled_shapes_bound(batch_size: int, context: int | None) -> int:
    """How many step shapes a compiled backend can meet in its life: batch sizes (``batch_size``, a smaller
    last batch of a job, then powers of two as rows finish) x cache lengths (``static_cache_length``'s, up to
    the context)."""
    batch_sizes = batch_size.bit_length() + 2
    doublings = (max(context or MIN_STATIC_CACHE, MIN_STATIC_CACHE) // MIN_STATIC_CACHE).bit_length()
    return batch_sizes * 2 * (doublings + 1)


def unsupported_static_cache_layers(config) -> list[str]:
    """The kinds of static cache layer of this model that compaction cannot carry (``HFBackend._kept_rows``
    copies keys, values and the lengths of full and sliding-window attention layers)."""
    from transformers import StaticCache

    cache = StaticCache(config=config, max_cache_len=MIN_STATIC_CACHE)
    return sorted({type(layer).__name__ for layer in cache.layers} - {"StaticLayer", "StaticSlidingWindowLayer"})


def shared_prefix_length(prompts_token_ids) -> int:
    """How many leading tokens all prompts of a batch have in common, leaving each prompt at least one token of
    its own (the last prompt token's logits start a row's generation)."""
    length = 0
    for column in zip(*prompts_token_ids, strict=False):
        if any(token != column[0] for token in column):
            break
        length += 1
    return min(length, min(map(len, prompts_token_ids)) - 1)


def distinct_rows(input_ids) -> tuple[list[int], list[int]]:
    """The first row of each distinct prompt of a batch, and for every row the place of its prompt among them: rows
    with the same prompt (GRPO samples each problem several times) share one prompt pass, whose keys, values and
    logits are copied to each of them (each row still draws with its own seed)."""
    places: dict[tuple[int, ...], int] = {}
    copies = [places.setdefault(tuple(row), len(places)) for row in input_ids.tolist()]
    return [copies.index(place) for place in range(len(places))], copies


def plain_cache_layers(config) -> bool:
    """Whether every layer of this model's dynamic cache holds each token's keys and values in a column of its own
    (``DynamicLayer``: no attention window, no linear-attention state), which ``hf_turns`` moves row by row."""
    from transformers import DynamicCache
    from transformers.cache_utils import DynamicLayer

    return all(type(layer) is DynamicLayer for layer in DynamicCache(config=config).layers)


def has_sliding_window_layers(config) -> bool:
    """Whether some attention layer of this model sees only a window of the last tokens. A window counts cache
    slots, and a shared prefix puts a row's padding after the prefix, inside the window: such a model keeps
    left padding (``HFBackend.batch_layout``)."""
    from transformers import DynamicCache

    return any(layer.is_sliding for layer in DynamicCache(config=config).layers)


def context_length(model, tokenizer) -> int | None:
    """The model's context in tokens: its config's position limit, else the tokenizer's (when it states one)."""
    for value in (getattr(model.config, "max_position_embeddings", None), tokenizer.model_max_length):
        if isinstance(value, int) and 0 < value < 10**8:
            return value
    return None


class HFBackend:
    name = "hf"
    takes = "token_ids"
    reports_steps = True  # generate(on_step=...) reports each decoding step (snakeskills.progress)

    def __init__(
        self,
        *,
        model_path: str,
        adapter_path: str | None,
        device: str,
        dtype: str,
        batch_size: int,
        trust_remote_code: bool,
        threads: int,
        compile: bool,
        share_prefix: bool,
    ):
        import torch

        torch.set_num_threads(threads)
        model, tokenizer = load_model_and_tokenizer(
            model_path,
            adapter_path=adapter_path,
            device=resolve_device(device),
            dtype=dtype,
            trust_remote_code=trust_remote_code,
        )
        self._use(model, tokenizer, model_path=model_path, adapter_path=adapter_path, batch_size=batch_size)
        self.share_prefix = share_prefix and not self.sliding_window
        if share_prefix and not self.share_prefix:
            logger.info("generation.share_prefix: off for %s (sliding-window attention layers)", model_path)
        # compile: a static KV cache and a torch.compile'd decoding step (CUDA graphs on a GPU)
        if compile:
            unsupported = unsupported_static_cache_layers(self.model.config)
            if unsupported:
                raise SnakeskillsError(
                    f"generation.compile: {model_path} ({self.model.config.model_type}) has cache layers "
                    f"({', '.join(unsupported)}) whose state a compiled batch cannot carry when finished rows "
                    "leave it; set generation.compile: false for this model"
                )
            self._compiled_step = compiled_decoding_step(self.model, self.device, batch_size, self.context_length)
        # a tool loop's rows keep their KV cache across a call (``hf_turns``): a dynamic cache of plain layers
        self.keeps_turn_caches = not compile and plain_cache_layers(self.model.config)
        adapter = f" + adapter {adapter_path}" if adapter_path else ""
        dtype = str(self.model.dtype).removeprefix("torch.")
        # what a job's log says of the model it generates with (a shared server's jobs log it too)
        self.loaded = f"model {model_path}{adapter} on {self.device} in {dtype} (context {self.context_length} tokens)"
        logger.info("loaded %s", self.loaded)

    @classmethod
    def around(cls, model, tokenizer, *, batch_size: int, share_prefix: bool = True) -> HFBackend:
        """The decoding loop over a model already in memory (GRPO's rollouts: the policy being trained, whose weights
        change between calls), not compiled, on the model's device; its results carry their token ids and
        log-probabilities (``keep_tokens``). The caller puts the model in eval mode while it generates."""
        backend = cls.__new__(cls)
        backend._use(model, tokenizer, model_path=model.name_or_path, adapter_path=None, batch_size=batch_size)
        backend.share_prefix = share_prefix and not backend.sliding_window
        backend.keep_tokens = True
        backend.keeps_turn_caches = plain_cache_layers(model.config)
        backend.loaded = f"model {model.name_or_path} in memory on {backend.device}"
        return backend

    # whether results carry their token ids and log-probabilities (GenerationResult.token_ids, .logprobs)
    keep_tokens = False
    # whether the tool loop decodes through ``hf_turns.TurnEngine`` (rows keep their KV cache across a tool call)
    keeps_turn_caches = False

    def _use(self, model, tokenizer, *, model_path: str, adapter_path: str | None, batch_size: int) -> None:
        """Generate with this model and tokenizer (loaded by ``__init__``, or given to ``around``)."""
        # the folders it loads, whose files' identity a job's resume fingerprint holds (model_job.loaded_weights)
        self.model_path, self.adapter_path = model_path, adapter_path
        self.model, self.tokenizer = model, tokenizer
        self.device = str(next(model.parameters()).device)
        self.batch_size = batch_size
        # Only the checkpoint's end-of-sequence tokens are taken from its generation_config.json: its sampling
        # settings (do_sample, temperature, top_p, repetition_penalty, ...) never apply, since our own
        # decoding loop samples with our settings alone.
        eos = self.model.generation_config.eos_token_id
        self.eos_token_ids = {eos} if isinstance(eos, int) else set(eos or [])
        self.eos_token_ids.add(self.tokenizer.eos_token_id)
        self._takes_logits_to_keep = "logits_to_keep" in forward_parameters(self.model)
        self._cache_keyword = cache_keyword(self.model)
        self.context_length = context_length(self.model, self.tokenizer)
        self._compiled_step = None
        self.sliding_window = has_sliding_window_layers(self.model.config)
        self._stop_criteria: dict[tuple[str, ...], object] = {}

    def generate(
        self, requests: list[GenerationRequest], sampling: SamplingParams, on_results=None, on_step=None
    ) -> list[GenerationResult]:
        """Results in the order of ``requests``. Prompts are batched longest first, so that each batch pads
        its prompts to similar lengths (and a batch too large for memory fails at the start). ``on_results``
        (``snakeskills.progress``) is called with each batch's results as it finishes."""
        results: list[GenerationResult | None] = [
            context_overflow(len(request.prompt_token_ids), request.budget(sampling), self.context_length)
            for request in requests
        ]
        fitting = sorted(
            (index for index, result in enumerate(results) if result is None),
            key=lambda index: -len(requests[index].prompt_token_ids),
        )
        # a compiled step's static cache has one length per job (static_cache_length), not one per batch
        cache_length = 0
        if self._compiled_step is not None and fitting:
            cache_length = static_cache_length(len(requests[fitting[0]].prompt_token_ids) + sampling.max_new_tokens)
            cache_length = min(cache_length, self.context_length or cache_length)  # the rows fit the context
        if on_results is not None and len(fitting) < len(requests):
            on_results([result for result in results if result is not None])  # prompts too long: soft failures
        for start in range(0, len(fitting), self.batch_size):
            batch = [requests[index] for index in fitting[start : start + self.batch_size]]
            batch_results = self._generate_batch(batch, sampling, cache_length, on_step)
            for index, result in zip(fitting[start : start + self.batch_size], batch_results, strict=True):
                results[index] = result
            if on_results is not None:
                on_results(batch_results)
        return results

    def left_padded(self, prompts_token_ids):
        """One batch of token-id prompts, left-padded, with its attention mask, on the model's device."""
        return self.tokenizer.pad(
            {"input_ids": [list(token_ids) for token_ids in prompts_token_ids]},
            padding=True,
            padding_side="left",
            return_tensors="pt",
        ).to(self.device)

    def batch_layout(self, prompts_token_ids):
        """One batch of prompts as the decoding loop takes it: (input ids, attention mask, shared prefix length).

        Without a shared prefix (``shared_prefix_length`` below MIN_SHARED_PREFIX, a batch of one, or
        ``share_prefix`` off) the prompts are left-padded. With one, every row is the prefix, then padding, then
        the rest of its prompt: the padding sits after the prefix, whose keys and values are then computed once
        for the batch and whose positions are the same in every row."""
        import torch

        prefix = shared_prefix_length(prompts_token_ids) if self.share_prefix and len(prompts_token_ids) > 1 else 0
        if prefix < MIN_SHARED_PREFIX:
            encoded = self.left_padded(prompts_token_ids)
            return encoded["input_ids"], encoded["attention_mask"], 0
        encoded = self.left_padded([token_ids[prefix:] for token_ids in prompts_token_ids])
        rows = len(prompts_token_ids)
        prefix_ids = torch.tensor(prompts_token_ids[0][:prefix], device=self.device).expand(rows, prefix)
        input_ids = torch.cat([prefix_ids, encoded["input_ids"]], 1)
        attention_mask = torch.cat([encoded["attention_mask"].new_ones((rows, prefix)), encoded["attention_mask"]], 1)
        return input_ids, attention_mask, prefix

    def _stop_strings(self, stop: tuple[str, ...]):
        """transformers' stop-string criterion for these strings (built once: it preprocesses the vocabulary)."""
        if not stop:
            return None
        if stop not in self._stop_criteria:
            from transformers import StopStringCriteria

            self._stop_criteria[stop] = StopStringCriteria(tokenizer=self.tokenizer, stop_strings=list(stop))
        return self._stop_criteria[stop]

    def _generate_batch(
        self, requests: list[GenerationRequest], sampling: SamplingParams, cache_length: int = 0, on_step=None
    ) -> list[GenerationResult]:
        budgets = [request.budget(sampling) for request in requests]
        rows_tokens, lengths, rows_logprobs, at_budget = self._decode(
            self.batch_layout([request.prompt_token_ids for request in requests]),
            [request.seed for request in requests],
            sampling,
            cache_length,
            on_step,
            budgets=None if len(set(budgets)) == 1 and budgets[0] == sampling.max_new_tokens else budgets,
        )
        results = []
        for row, (tokens, length, logprobs) in enumerate(zip(rows_tokens, lengths, rows_logprobs, strict=True)):
            tokens = tokens[:length] if length is not None else tokens
            ended = length is not None and row not in at_budget
            results.append(self.row_result(tokens, logprobs[: len(tokens)], "stop" if ended else "length", sampling))
        return results

    def row_result(self, tokens: list[int], logprobs: list[float], finish_reason: str, sampling: SamplingParams):
        """A row's result from its drawn tokens: the text cut at the stop string that ended it (if any), and with
        ``keep_tokens`` the tokens and their log-probabilities."""
        text, _ = truncate_at_stop(self.tokenizer.decode(tokens, skip_special_tokens=True), sampling.stop)
        details = {}
        if self.keep_tokens:
            details = {"token_ids": tuple(tokens), "logprobs": tuple(logprobs)}
        return GenerationResult(
            generation=text, num_generated_tokens=len(tokens), finish_reason=finish_reason, **details
        )

    def _decode(
        self,
        layout,
        seeds: list[int],
        sampling: SamplingParams,
        cache_length: int = 0,
        on_step=None,
        budgets: list[int] | None = None,
    ):
        """Decode one batch (``batch_layout``) with a KV cache; returns (generated token ids per row; per row the
        number of tokens up to and including its EOS, completed stop string or budget end, or None if it ran to
        ``max_new_tokens``; per row its tokens' log-probabilities when ``keep_tokens``, else empty lists; the rows that
        ended at their own budget). ``budgets``: each row's own ``max_new_tokens`` (a tool loop's turns), else the
        sampling's for all.

        Finished rows leave the batch and its KV cache (``_time_to_compact`` says when). Positions follow each row's own
        prompt length (left padding); a shared prefix is computed once (``_prefill``); stop strings match across tokens
        (``StopStringCriteria``). A compiled step uses a static cache of ``cache_length`` tokens."""
        import torch

        input_ids, attention_mask, prefix_length = layout
        batch, prompt_length = input_ids.shape
        max_new_tokens = sampling.max_new_tokens if budgets is None else max(budgets)
        stop_criteria = self._stop_strings(sampling.stop)
        eos_token_ids = torch.tensor(sorted(self.eos_token_ids), device=self.device)
        seeds_tensor = torch.tensor(seeds, dtype=torch.int64, device=self.device)
        # per running row: prompt + generated tokens, and the attention mask over them
        sequences = torch.cat([input_ids, input_ids.new_full((batch, max_new_tokens), self.tokenizer.pad_token_id)], 1)
        # the mask spans the whole cache: a static cache may be longer than this batch needs (future positions
        # are masked as causal anyway)
        cache_length = max(cache_length, prompt_length + max_new_tokens)
        attention = torch.cat([attention_mask, attention_mask.new_ones((batch, cache_length - prompt_length))], 1)
        running = list(range(batch))  # the original row of each row in the batch
        at_budget: set[int] = set()  # original rows that reached their own budget (ended, but not stopped)
        ended_at: list[int | None] = [None] * batch  # per row in the batch: tokens up to its end
        lengths: list[int | None] = [None] * batch  # per original row
        rows_tokens: list[list[int]] = [[] for _ in range(batch)]
        rows_logprobs: list[list[float]] = [[] for _ in range(batch)]
        # per running row, each drawn token's log-probability (keep_tokens)
        token_logprobs = torch.zeros((batch, max_new_tokens)) if self.keep_tokens else None

        def collect(batch_rows: list[int], generated: int) -> None:
            """Copy these rows' generated tokens out of the batch (one host transfer)."""
            if batch_rows:
                block = sequences[batch_rows, prompt_length : prompt_length + generated].tolist()
                for batch_row, tokens in zip(batch_rows, block, strict=True):
                    rows_tokens[running[batch_row]] = tokens
                    lengths[running[batch_row]] = ended_at[batch_row]
                if token_logprobs is not None:
                    for batch_row, logprobs in zip(
                        batch_rows, token_logprobs[batch_rows, :generated].tolist(), strict=True
                    ):
                        rows_logprobs[running[batch_row]] = logprobs

        generated = batch_tokens = 0
        cache = self._new_cache(cache_length, max_new_tokens)
        with torch.inference_mode():
            # every tensor a compiled step sees is made in inference mode: a normal tensor in the first step and
            # inference tensors after it would fail dynamo's guards and compile each shape twice
            positions = (attention_mask.cumsum(-1) - 1).clamp_(min=0)
            next_positions = positions[:, -1:] + 1
            static = self._compiled_step is not None
            logits, cache = self.prompts_pass(
                input_ids, attention if static else attention_mask, positions, cache, prefix_length, cache_length
            )
            for step in range(max_new_tokens):
                tokens = draw_tokens(logits, seeds_tensor, step, sampling)
                if token_logprobs is not None:
                    token_logprobs[:, step] = drawn_logprobs(logits, tokens, sampling).cpu()
                column = prompt_length + step
                sequences[:, column] = tokens
                ended = torch.isin(tokens, eos_token_ids)
                if stop_criteria is not None:
                    ended |= stop_criteria(sequences[:, : column + 1], None).to(ended.device)
                generated = step + 1
                for batch_row in ended.nonzero().flatten().tolist():
                    if ended_at[batch_row] is None:
                        ended_at[batch_row] = generated
                if budgets is not None:
                    for batch_row, row in enumerate(running):
                        if ended_at[batch_row] is None and budgets[row] == generated:
                            ended_at[batch_row] = generated
                            at_budget.add(row)
                finished = [batch_row for batch_row, end in enumerate(ended_at) if end is not None]
                if on_step is not None:
                    batch_tokens += sum(end is None or end == generated for end in ended_at)  # rows that drew one
                    on_step(batch, generated, max_new_tokens, batch_tokens)
                if generated == max_new_tokens or len(finished) == len(running):
                    break
                if self._time_to_compact(len(finished), len(running)):
                    collect(finished, generated)
                    keep = self._rows_to_keep(ended_at)
                    index = torch.tensor(keep, device=self.device)
                    cache = self._kept_rows(cache, index, cache_length)
                    keep_room(cache, max_new_tokens - generated)
                    sequences, attention, tokens = sequences[index], attention[index], tokens[index]
                    seeds_tensor, next_positions = seeds_tensor[index], next_positions[index]
                    if token_logprobs is not None:
                        token_logprobs = token_logprobs[index.cpu()]
                    running = [running[batch_row] for batch_row in keep]
                    ended_at = [ended_at[batch_row] for batch_row in keep]
                if static:
                    # static shapes: the whole mask (future positions are masked as causal), one token per row
                    logits = self._compiled_step(tokens.unsqueeze(1), attention, next_positions, cache)
                else:
                    logits = self._forward(tokens.unsqueeze(1), attention[:, : column + 1], next_positions, cache)
                next_positions = next_positions + 1
        collect(list(range(len(running))), generated)
        return rows_tokens, lengths, rows_logprobs, at_budget

    def _new_cache(self, length: int, new_tokens: int):
        """The KV cache of one batch: grown as it goes with room for the ``new_tokens`` to come
        (``kv_cache.growing_cache``), or allocated once at its final ``length`` (compile)."""
        from transformers import StaticCache

        if self._compiled_step is None:
            return growing_cache(self.model.config, new_tokens)
        return StaticCache(config=self.model.config, max_cache_len=length)

    def _time_to_compact(self, finished: int, running: int) -> bool:
        """Whether the finished rows leave the batch now: once they are 1/COMPACT_EVERY of it; with a compiled
        step, once they are half of it, so that a batch of 256 goes through at most 8 shapes (each compiled
        once per job) rather than one per finished row."""
        if self._compiled_step is not None:
            return finished * 2 >= running
        return finished * COMPACT_EVERY >= running

    def _rows_to_keep(self, ended_at: list[int | None]) -> list[int]:
        """The rows of the batch that stay: those still running; with a compiled step, also as many finished
        ones (still counted as finished) as pad the batch to a power of two, so that every batch of a job
        reuses the same few compiled shapes."""
        running = [batch_row for batch_row, end in enumerate(ended_at) if end is None]
        if self._compiled_step is None:
            return running
        padding = (1 << (len(running) - 1).bit_length()) - len(running)
        finished = [batch_row for batch_row, end in enumerate(ended_at) if end is not None]
        return sorted(running + finished[:padding])

    def _kept_rows(self, cache, index, cache_length: int):
        """The cache with these rows, in this order (a row repeats where its index does): a dynamic cache in
        place; a static one as a new one."""
        import torch
        from transformers import StaticCache
        from transformers.cache_utils import StaticSlidingWindowLayer

        if not isinstance(cache, StaticCache):
            cache.batch_select_indices(index)
            return cache
        smaller = StaticCache(config=self.model.config, max_cache_len=cache_length)
        for layer, kept in zip(cache.layers, smaller.layers, strict=True):
            keys, values = layer.keys[index], layer.values[index]
            kept.lazy_initialization(keys, values)
            kept.keys.copy_(keys)
            kept.values.copy_(values)
            kept.cumulative_length.copy_(layer.cumulative_length)
            if isinstance(layer, StaticSlidingWindowLayer):  # its window position, kept as a Python int too
                kept.cumulative_length_int = layer.cumulative_length_int
        del cache
        if self.device.startswith("cuda"):
            torch.cuda.empty_cache()
        return smaller

    def prompts_pass(self, input_ids, attention_mask, positions, cache, prefix_length: int, cache_length: int = 0):
        """A batch's prompts through the model (``_prefill``): each row's first next-token logits and the cache filled
        with the prompts. A prompt several rows share (GRPO's group) goes through the model once, its keys, values
        and logits copied to each of them."""
        import torch

        distinct, copies = distinct_rows(input_ids)
        if len(distinct) == input_ids.shape[0]:
            return self._prefill(input_ids, attention_mask, positions, cache, prefix_length, cache_length)
        logits, cache = self._prefill(
            input_ids[distinct],
            attention_mask[distinct],
            positions[distinct],
            cache,
            prefix_length if len(distinct) > 1 else 0,
            cache_length,
        )
        copies = torch.tensor(copies, device=self.device)
        return logits[copies], self._kept_rows(cache, copies, cache_length)

    def _prefill(self, input_ids, attention_mask, positions, cache, prefix_length: int, cache_length: int):
        """The prompts' pass: each row's first next-token logits, and the cache filled with the prompts.

        With a shared prefix, the prefix goes through the model once, as a batch of one; its keys and values are
        copied to every row (``_kept_rows`` with row 0 repeated), and only each row's own tokens go through the
        model after it, attending to the copied prefix. The rows' positions and masks are those of the whole
        prompts, so each row's logits are those of its whole prompt. A static cache's mask spans the whole cache
        (its future positions are masked as causal), a dynamic cache's the tokens so far."""
        import torch

        if prefix_length == 0:
            return self._forward(input_ids, attention_mask, positions, cache), cache
        static = self._compiled_step is not None
        prefix_mask = attention_mask[:1] if static else attention_mask[:1, :prefix_length]
        self._forward(input_ids[:1, :prefix_length], prefix_mask, positions[:1, :prefix_length], cache)
        every_row_from_row_0 = torch.zeros(input_ids.shape[0], dtype=torch.long, device=self.device)
        cache = self._kept_rows(cache, every_row_from_row_0, cache_length)
        logits = self._forward(input_ids[:, prefix_length:], attention_mask, positions[:, prefix_length:], cache)
        return logits, cache

    def _forward(self, input_ids, attention_mask, position_ids, cache):
        """The model's next-token logits for each row (only the last position's are computed)."""
        extra = {"logits_to_keep": 1} if self._takes_logits_to_keep else {}
        output = self.model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            use_cache=True,
            **{self._cache_keyword: cache},
            **extra,
        )
        return output.logits[:, -1, :]
