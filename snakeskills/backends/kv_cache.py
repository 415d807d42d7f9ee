"""The decoding loop's KV cache: transformers' dynamic cache, whose plain layers write each step's keys and values
into room kept at the end of their buffers instead of copying the whole cache to append one column.

``DynamicLayer`` appends by ``torch.cat``: every decoding step reads and writes every row's whole cache, which on a
CPU costs as much as reading the weights once the context is a few hundred tokens long. A ``GrowingLayer`` holds
its keys and values in buffers with columns to spare, and hands the model views of the filled part; only when the
spare columns run out (or a new tensor is set: a batch's rows selected, rows joined) are they copied into larger
buffers. The values are the same as ``DynamicLayer``'s, so the model's outputs are identical. Memory: the spare
columns are a quarter of the filled ones (at least ``MIN_SPARE``), never more than the tokens still to come
(``room``), so a cache holds at most a quarter more than what it has filled, and a long generation (a reasoning
model's 32k tokens) never reserves its whole length up front; the copies this costs add up to a few times the
final cache, against one whole cache per step.

Only plain layers grow so (``DynamicLayer`` itself: no attention window, no linear-attention state); the others are
kept as transformers builds them. Inference only: a step writes in place into a buffer an earlier step's views
share, which autograd must never see (training's forwards build their own ``DynamicCache``)."""

from __future__ import annotations

import functools

# the fewest columns kept spare when a buffer is (re)allocated (or ``room``, if fewer tokens are still to come),
# and the spare columns' share of the filled ones above that
MIN_SPARE, SPARE_SHARE = 64, 0.25


def filled_columns(tensor) -> int:
    """The columns a cache tensor set whole holds (none for the empty placeholder of an unused layer)."""
    return 0 if tensor is None or tensor.dim() < 4 else tensor.shape[2]


def has_room(buffer, columns: int, states) -> bool:
    """Whether a buffer has ``columns`` columns for a batch of ``states``' rows."""
    return (
        buffer is not None and buffer.dim() == 4 and buffer.shape[2] >= columns and buffer.shape[0] == states.shape[0]
    )


@functools.cache
def growing_layer_class():
    """``GrowingLayer``: a ``DynamicLayer`` whose buffers keep columns to spare for the tokens still to come, at most
    ``room`` (a class made on first use: transformers is imported then)."""
    from transformers.cache_utils import DynamicLayer

    class GrowingLayer(DynamicLayer):
        """A ``DynamicLayer`` whose buffers keep columns to spare for the tokens still to come (at most ``room``)."""

        def __init__(self, room: int = 0):
            super().__init__()
            self.room = room
            self._key_buffer = self._value_buffer = None
            self._key_length = self._value_length = 0  # filled columns (set apart: keys may be set before values)

        @property
        def keys(self):
            buffer = self._key_buffer
            return buffer if buffer is None or buffer.dim() < 4 else buffer[:, :, : self._key_length]

        @keys.setter
        def keys(self, value) -> None:  # a tensor set whole (rows selected, joined, cut): its own buffer, no room
            self._key_buffer = value
            self._key_length = filled_columns(value)

        @property
        def values(self):
            buffer = self._value_buffer
            return buffer if buffer is None or buffer.dim() < 4 else buffer[:, :, : self._value_length]

        @values.setter
        def values(self, value) -> None:
            self._value_buffer = value
            self._value_length = filled_columns(value)

        def update(self, key_states, value_states, *arguments, **keywords):
            if not self.is_initialized:
                self.lazy_initialization(key_states, value_states)
            filled, new = self._key_length, key_states.shape[2]
            if filled != self._value_length:  # the caller's own bookkeeping: never expected
                raise AssertionError(f"KV cache layer: {filled} key columns, {self._value_length} value columns")
            if not all(has_room(buffer, filled + new, key_states) for buffer in (self._key_buffer, self._value_buffer)):
                spare = max(MIN_SPARE, int((filled + new) * SPARE_SHARE))
                self._grow(key_states, value_states, filled + new + (min(spare, self.room) if self.room else spare))
            self._key_buffer[:, :, filled : filled + new] = key_states
            self._value_buffer[:, :, filled : filled + new] = value_states
            self._key_length = self._value_length = filled + new
            return self.keys, self.values

        def _grow(self, key_states, value_states, columns: int) -> None:
            """New buffers of ``columns`` columns holding what is filled so far."""
            filled = self._key_length
            keys = key_states.new_empty((*key_states.shape[:2], columns, key_states.shape[3]))
            values = value_states.new_empty((*value_states.shape[:2], columns, value_states.shape[3]))
            if filled:
                keys[:, :, :filled] = self._key_buffer[:, :, :filled]
                values[:, :, :filled] = self._value_buffer[:, :, :filled]
            self._key_buffer, self._value_buffer = keys, values

    return GrowingLayer


def growing_cache(config, room: int = 0):
    """transformers' dynamic cache for this model, its plain layers ``GrowingLayer``s (``room``: the most tokens a
    decoding will add, its ``max_new_tokens``; 0: unknown)."""
    from transformers import DynamicCache
    from transformers.cache_utils import DynamicLayer

    growing = growing_layer_class()
    cache = DynamicCache(config=config)
    cache.layers = [growing(room) if type(layer) is DynamicLayer else layer for layer in cache.layers]
    return cache


def keep_room(cache, room: int) -> None:
    """Tell a cache's growing layers how many more tokens its decoding may add (after rows left the batch)."""
    for layer in cache.layers:
        if hasattr(layer, "room"):
            layer.room = room
