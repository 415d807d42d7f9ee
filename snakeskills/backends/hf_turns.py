"""Turns that keep their KV cache: the hf backend's decoding loop as the tool loop drives it (continuous batching).

A row whose turn ends (EOS, a stop string, its budget) leaves the running batch at once, its keys and values kept;
when its next turn starts (its ids so far and what the loop appended after them: a tool's output), only the ids past
what its cache holds go through the model, and it joins the running batch beside rows that never left. New rows join
the same way (their prompts' pass with a shared opening computed once, as in ``HFBackend.generate``). So a tool call
costs the prompt pass of its output, not of the whole context, and no row waits for the batch it started in.

A turn is drawn as ``HFBackend.generate`` draws it: the request's seed, steps counted from the turn's start, its own
budget and the same stop rules, so its tokens are those a fresh ``generate`` of the same ids gives (up to the float
rounding of a cached context against a recomputed one). Every row's keys are stored with their rotary positions, so
a row's cache may sit behind padding columns (masked) of any length: rows of different lengths share one batch.

Memory: at most ``batch_size`` rows decode at once (the backend's), and at most ``batch_size`` rows keep a cache
between turns; beyond that the one kept longest is dropped, and its next turn goes through the model whole."""

from __future__ import annotations

import logging
from collections import OrderedDict, deque
from dataclasses import dataclass, field

from snakeskills.backends.hf import COMPACT_EVERY, draw_tokens, drawn_logprobs
from snakeskills.backends.kv_cache import growing_cache
from snakeskills.backends.types import GenerationRequest, GenerationResult, SamplingParams, context_overflow

logger = logging.getLogger(__name__)


@dataclass
class _Turn:
    """A row of the running batch: the ids its cache holds (``fed``), this turn's drawn tokens and their
    log-probabilities, its budget, and whether the turn ended (the row then waits to leave the batch)."""

    key: object
    fed: list[int]
    budget: int
    drawn: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    ended: bool = False


@dataclass
class _Kept:
    """A row's cache between turns: the ids it holds and, per layer, their keys and values (one row, no padding)."""

    fed: list[int]
    layers: list


def common_prefix(first: list[int], second) -> int:
    """How many leading ids two sequences share."""
    length = 0
    for one, other in zip(first, second, strict=False):
        if one != other:
            break
        length += 1
    return length


class TurnEngine:
    """Decode the turns the tool loop starts (``start``), one step at a time (``step``), rows keeping their cache
    between turns until ``release``. ``prefilled_tokens`` counts the ids that went through the model in prompt
    passes, ``reused_tokens`` those a kept cache spared."""

    def __init__(self, backend, sampling: SamplingParams, on_step=None):
        import torch

        self.backend, self.sampling, self.on_step = backend, sampling, on_step
        self.device = backend.device
        self.capacity = backend.batch_size
        self.criteria = backend._stop_strings(sampling.stop)
        self.width = self.criteria.maximum_token_len if self.criteria is not None else 0
        self.eos = torch.tensor(sorted(backend.eos_token_ids), device=self.device)
        self.pad = backend.tokenizer.pad_token_id
        self.waiting: deque = deque()
        self.kept: OrderedDict = OrderedDict()
        self.rows: list[_Turn] = []
        self.cache = self.mask = self.logits = self.seeds = self.steps = self.positions = self.tails = None
        self.steps_taken = self.tokens_drawn = self.prefilled_tokens = self.reused_tokens = 0

    # what the tool loop calls

    def start(self, key, request: GenerationRequest) -> None:
        """Queue a row's turn: its whole ids so far (``prompt_token_ids``), its seed and budget; it joins the batch
        at the next step where there is room."""
        self.waiting.append((key, request))

    def release(self, key) -> None:
        """The row is done: its kept cache goes."""
        self.kept.pop(key, None)

    def close(self) -> None:
        """Drop every cache (the loop is done, or stopped early), and log what the kept caches spared."""
        if self.steps_taken:
            logger.info(
                "tool loop: %d decoding steps; %d prompt ids through the model, %d from kept caches",
                self.steps_taken,
                self.prefilled_tokens,
                self.reused_tokens,
            )
        self.kept.clear()
        self.waiting.clear()
        self._clear()

    @property
    def running(self) -> int:
        return sum(not row.ended for row in self.rows)

    @property
    def busy(self) -> bool:
        """Whether a turn is decoding or waiting to."""
        return bool(self.waiting) or self.running > 0

    def room(self) -> int:
        """How many more turns may start now (running and queued ones count)."""
        return self.capacity - self.running - len(self.waiting)

    def step(self) -> list[tuple[object, GenerationResult]]:
        """Admit the queued turns, draw one token for every running row, and return the turns that ended."""
        import torch

        with torch.inference_mode():
            ended = self._admit()
            live = [index for index, row in enumerate(self.rows) if not row.ended]
            if not live:
                return ended
            tokens = draw_tokens(self.logits, self.seeds, self.steps, self.sampling)
            stops = torch.isin(tokens, self.eos)
            if self.criteria is not None:
                self.tails = torch.cat([self.tails[:, 1:], tokens.unsqueeze(1)], 1)
                stops |= self.criteria(self.tails, None).to(stops.device)
            drawn, stops = tokens.tolist(), stops.tolist()
            logprobs = drawn_logprobs(self.logits, tokens, self.sampling).tolist() if self.backend.keep_tokens else None
            for index in live:
                row = self.rows[index]
                row.drawn.append(drawn[index])
                if logprobs is not None:
                    row.logprobs.append(logprobs[index])
                finish = "stop" if stops[index] else "length" if len(row.drawn) >= row.budget else None
                if finish is not None:
                    row.ended = True
                    self._keep(index)
                    ended.append((row.key, self.backend.row_result(row.drawn, row.logprobs, finish, self.sampling)))
            self.steps_taken += 1
            self.tokens_drawn += len(live)
            if self.on_step is not None:
                still = self.running
                self.on_step(
                    still, self.steps_taken, max(self.sampling.max_new_tokens, self.steps_taken), self.tokens_drawn
                )
            self._advance(tokens)
        return ended

    # the batch

    def _advance(self, tokens) -> None:
        """Feed the drawn tokens of the running rows (ended rows' columns masked) and keep their next logits;
        ended rows leave the batch once they are 1/COMPACT_EVERY of it (each leaving copies the whole cache)."""
        import torch

        live = [not row.ended for row in self.rows]
        if not any(live):
            self._clear()
            return
        if (len(live) - sum(live)) * COMPACT_EVERY >= len(live):
            keep = [index for index, alive in enumerate(live) if alive]
            tokens = tokens[torch.tensor(keep, device=self.device)]
            self._select(keep)
            live = [True] * len(keep)
        column = torch.tensor(live, dtype=self.mask.dtype, device=self.device).unsqueeze(1)
        self.mask = torch.cat([self.mask, column], 1)
        self.logits = self.backend._forward(tokens.unsqueeze(1), self.mask, self.positions.unsqueeze(1), self.cache)
        self.positions = self.positions + 1
        self.steps = self.steps + 1
        for row, token in zip(self.rows, tokens.tolist(), strict=True):
            if not row.ended:
                row.fed.append(token)

    def _select(self, keep: list[int]) -> None:
        """Only these rows of the batch stay; columns no row attends to any more are cut from the left."""
        import torch

        index = torch.tensor(keep, device=self.device)
        self.mask = self.mask[index]
        attended = self.mask.any(0).nonzero()
        first = int(attended[0]) if len(attended) else self.mask.shape[1]
        self.mask = self.mask[:, first:]
        for layer in self.cache.layers:
            layer.keys, layer.values = layer.keys[index, :, first:], layer.values[index, :, first:]
        self.logits, self.seeds, self.steps = self.logits[index], self.seeds[index], self.steps[index]
        self.positions = self.positions[index]
        if self.tails is not None:
            self.tails = self.tails[index]
        self.rows = [self.rows[position] for position in keep]

    def _clear(self) -> None:
        self.rows = []
        self.cache = self.mask = self.logits = self.seeds = self.steps = self.positions = self.tails = None

    def _keep(self, index: int) -> None:
        """Keep an ended row's keys and values (the columns its mask holds: exactly its fed ids) for its next turn;
        the longest kept one goes when more than ``capacity`` rows keep one."""
        row = self.rows[index]
        columns = self.mask[index].nonzero().flatten()
        layers = [
            (layer.keys[index : index + 1, :, columns], layer.values[index : index + 1, :, columns])
            for layer in self.cache.layers
        ]
        if len(columns) != len(row.fed):  # the engine's own bookkeeping: never expected
            raise AssertionError(f"turn engine: {len(columns)} cached columns for {len(row.fed)} ids")
        self.kept[row.key] = _Kept(list(row.fed), layers)
        self.kept.move_to_end(row.key)
        while len(self.kept) > self.capacity:
            self.kept.popitem(last=False)

    def _admit(self) -> list[tuple[object, GenerationResult]]:
        """Start the queued turns: a prompt too long for the context ends at once (as ``generate`` reports it); a
        row with a kept cache that its ids continue prefills only its new ids, the others their whole prompts."""
        failed, fresh, resumed = [], [], []
        while self.waiting:
            key, request = self.waiting.popleft()
            ids, budget = list(request.prompt_token_ids), request.budget(self.sampling)
            overflow = context_overflow(len(ids), budget, self.backend.context_length)
            kept = self.kept.pop(key, None)
            if overflow is not None:
                failed.append((key, overflow))
                continue
            reused = min(common_prefix(kept.fed, ids), len(ids) - 1) if kept is not None else 0
            turn = _Turn(key, ids, budget)
            if reused > 0:
                resumed.append((turn, request.seed, kept, reused))
            else:
                fresh.append((turn, request.seed))
        if fresh:
            self._join(*self._fresh_pass(fresh))
        if resumed:
            self._join(*self._resumed_pass(resumed))
        return failed

    def _fresh_pass(self, fresh):
        """New rows' prompts through the model, batched as ``generate`` batches them (a shared opening once)."""
        backend = self.backend
        input_ids, attention_mask, prefix_length = backend.batch_layout([turn.fed for turn, _ in fresh])
        positions = (attention_mask.cumsum(-1) - 1).clamp_(min=0)
        cache = growing_cache(backend.model.config, self.sampling.max_new_tokens)
        logits, cache = backend.prompts_pass(input_ids, attention_mask, positions, cache, prefix_length)
        self.prefilled_tokens += sum(len(turn.fed) for turn, _ in fresh)
        layers = [(layer.keys, layer.values) for layer in cache.layers]
        return fresh, layers, attention_mask, logits

    def _resumed_pass(self, resumed):
        """Rows continuing from a kept cache: the cache cut to the ids it shares with the turn's, then only the rest
        through the model (left-padded, each row's positions counted from its cache's length)."""
        import torch

        backend, device = self.backend, self.device
        held = max(reused for _, _, _, reused in resumed)
        new = max(len(turn.fed) - reused for turn, _, _, reused in resumed)
        rows = len(resumed)
        input_ids = torch.full((rows, new), self.pad, dtype=torch.long, device=device)
        mask = torch.zeros((rows, held + new), dtype=torch.long, device=device)
        positions = torch.zeros((rows, new), dtype=torch.long, device=device)
        layers = []
        for place, (turn, _, _, reused) in enumerate(resumed):
            rest = turn.fed[reused:]
            input_ids[place, new - len(rest) :] = torch.tensor(rest, device=device)
            positions[place, new - len(rest) :] = torch.arange(reused, len(turn.fed), device=device)
            mask[place, held - reused : held] = 1
            mask[place, held + new - len(rest) :] = 1
            self.reused_tokens += reused
            self.prefilled_tokens += len(rest)
        for number in range(len(resumed[0][2].layers)):
            pieces = [
                (kept.layers[number][0][:, :, :reused], kept.layers[number][1][:, :, :reused])
                for _, _, kept, reused in resumed
            ]
            layers.append(tuple(torch.cat([_left_padded(piece[part], held) for piece in pieces]) for part in (0, 1)))
        cache = _dynamic_cache(backend.model.config, layers, self.sampling.max_new_tokens)
        logits = backend._forward(input_ids, mask, positions, cache)
        layers = [(layer.keys, layer.values) for layer in cache.layers]
        return [(turn, seed) for turn, seed, _, _ in resumed], layers, mask, logits

    def _join(self, turns, layers, mask, logits) -> None:
        """Rows whose prompt pass is done join the running batch (the shorter side padded on the left)."""
        import torch

        seeds = torch.tensor([seed for _, seed in turns], dtype=torch.int64, device=self.device)
        positions = torch.tensor([len(turn.fed) for turn, _ in turns], dtype=torch.long, device=self.device)
        tails = None
        if self.criteria is not None:
            tails = torch.tensor(
                [_left_padded_ids(turn.fed, self.width, self.pad) for turn, _ in turns], device=self.device
            )
        if self.cache is None:
            self.cache = _dynamic_cache(self.backend.model.config, layers, self.sampling.max_new_tokens)
            self.mask, self.logits, self.seeds, self.positions, self.tails = mask, logits, seeds, positions, tails
            self.steps = torch.zeros(len(turns), dtype=torch.long, device=self.device)
            self.rows = [turn for turn, _ in turns]
            return
        length = max(self.mask.shape[1], mask.shape[1])
        for layer, (keys, values) in zip(self.cache.layers, layers, strict=True):
            layer.keys = torch.cat([_left_padded(layer.keys, length), _left_padded(keys, length)])
            layer.values = torch.cat([_left_padded(layer.values, length), _left_padded(values, length)])
        self.mask = torch.cat([_left_padded(self.mask, length), _left_padded(mask, length)])
        self.logits = torch.cat([self.logits, logits])
        self.seeds = torch.cat([self.seeds, seeds])
        self.positions = torch.cat([self.positions, positions])
        self.steps = torch.cat([self.steps, torch.zeros(len(turns), dtype=torch.long, device=self.device)])
        if tails is not None:
            self.tails = torch.cat([self.tails, tails])
        self.rows += [turn for turn, _ in turns]


def _left_padded(tensor, length: int):
    """A batch tensor whose dimension 2 (a cache's columns) or 1 (a mask's) is padded with zeros on the left to
    ``length``."""
    import torch

    dimension = 2 if tensor.dim() == 4 else 1
    missing = length - tensor.shape[dimension]
    if missing <= 0:
        return tensor
    shape = list(tensor.shape)
    shape[dimension] = missing
    return torch.cat([tensor.new_zeros(shape), tensor], dimension)


def _left_padded_ids(ids: list[int], width: int, pad: int) -> list[int]:
    """The last ``width`` ids, padded on the left (what a stop-string criterion reads of a row)."""
    tail = ids[-width:]
    return [pad] * (width - len(tail)) + tail


def _dynamic_cache(config, layers, room: int):
    """A dynamic cache holding these keys and values (one pair per layer), growing with ``room`` to spare."""
    cache = growing_cache(config, room)
    for layer, (keys, values) in zip(cache.layers, layers, strict=True):
        layer.lazy_initialization(keys, values)
        layer.keys, layer.values = keys, values
    return cache
