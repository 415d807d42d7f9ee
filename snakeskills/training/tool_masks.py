"""The tokens of a trained answer that a tool wrote, left out of the loss: SFT, DPO and KTO train on judged
transcripts whose tool outputs the loop appended (the record's ``tool_output_spans``, character spans
``[start, end)``; ``tools.loop``), and the model must not learn to predict them.

The spans travel with the text through each method's records (``trained_spans``); each trainer tokenizes an answer
once with its loss mask (``completion_ids_and_mask``: 0 on every token overlapping a span). SFT zeroes those tokens
in TRL's ``completion_mask``; DPO's and KTO's trainers (``LossMaskedTrainer``) multiply ``loss_mask_column`` into
the collators' completion masks, which every summed log-probability reads (policy, reference, KL, RPO's NLL).

An answer without tool output adds no key anywhere."""

from __future__ import annotations

from snakeskills.errors import SnakeskillsError
from snakeskills.training.samples import trained_text

# a record's spans of its answer's tool output blocks: a judged row's (of its transcript: ``trained_spans``), an SFT
# or KTO record's (of its assistant message); a preference pair has one per side, ``chosen_tool_output_spans`` and
# ``rejected_tool_output_spans``
TOOL_OUTPUT_SPANS = "tool_output_spans"
LOSS_MASK_SUFFIX = "_loss_mask"


def checked_spans(spans, text: str, where: str) -> list[list[int]]:
    """``spans`` as ``[start, end]`` lists, each within ``text`` (``0 <= start <= end <= len(text)``); anything else
    is an error naming ``where``."""
    checked = []
    for span in spans:
        if len(span) != 2 or not all(isinstance(bound, int) for bound in span) or not 0 <= span[0] <= span[1]:
            raise SnakeskillsError(f"{where}: a tool output span must be [start, end] with 0 <= start <= end: {span}")
        if span[1] > len(text):
            raise SnakeskillsError(
                f"{where}: the tool output span {list(span)} ends past the text it marks ({len(text)} characters)"
            )
        checked.append([span[0], span[1]])
    return checked


def trained_spans(row: dict, where: str) -> list[list[int]]:
    """The tool output spans of the text a judged row teaches (``samples.trained_text``); ``[]`` for a row without
    tools. The tool loop records ``tool_output_spans`` on the whole transcript it returns, which is that text:
    ``generation``, or where parse_reasoning split it, ``_full_generation`` (``text_fields`` keeps the whole text
    there and the answer after the thinking in ``generation``). ``where`` names the row in errors."""
    spans = row.get(TOOL_OUTPUT_SPANS) or []
    return checked_spans(spans, trained_text(row), f"{where}: {TOOL_OUTPUT_SPANS}") if spans else []


def completion_ids_and_mask(tokenizer, text: str, spans) -> tuple[list[int], list[int]]:
    """The token ids of ``text`` (exactly ``tokenizer(text, add_special_tokens=False)``'s) and its loss mask: 0 on
    every token whose characters overlap a span ``[start, end)`` of ``spans`` (a token straddling a span's edge
    included), 1 elsewhere. Spans need a fast tokenizer (its offsets map tokens to characters); without spans
    this tokenizes as before, any tokenizer."""
    if not spans:
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        return ids, [1] * len(ids)
    spans = checked_spans(spans, text, "the answer's tool output spans")
    if not getattr(tokenizer, "is_fast", False):
        raise SnakeskillsError(
            f"{type(tokenizer).__name__} is not a fast tokenizer: masking tool outputs out of the loss needs the "
            "character offsets of each token, which only fast (Rust) tokenizers give"
        )
    encoding = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    mask = []
    for start, end in encoding["offset_mapping"]:
        # [start, end) overlaps [a, b) when start < b and a < end; a zero-width token overlaps where it lies inside
        inside = any((start < b and a < end) if start < end else (a < start < b) for a, b in spans)
        mask.append(0 if inside else 1)
    return encoding["input_ids"], mask


def loss_mask_column(ids_column: str) -> str:
    """The column of a trainer row holding the loss mask of its ``ids_column`` (``chosen_ids``:
    ``chosen_loss_mask``): one 0/1 a token, 0 on a tool's tokens."""
    return ids_column.removesuffix("_ids") + LOSS_MASK_SUFFIX


def fill_loss_masks(rows: list[dict]) -> list[dict]:
    """``rows`` (trainer rows, as ``trainer.tokenized_answers`` makes them), each with every loss mask column that any
    row has: all ones for an answer without tool output, so the dataset's columns are the same in every row. Rows
    none of which has a loss mask are left as they are."""
    columns = {key for row in rows for key in row if key.endswith(LOSS_MASK_SUFFIX)}
    for row in rows:
        for column in columns:
            if column not in row:
                row[column] = [1] * len(row[column.removesuffix(LOSS_MASK_SUFFIX) + "_ids"])
    return rows


class LossMaskedCollator:
    """A TRL collator (``collator``) whose completion masks also leave out each row's masked tokens: ``masked`` maps
    a completion mask the collator returns (``completion_mask``) to the id columns its rows come from, in the
    collator's row order (DPO: every example's ``chosen_ids``, then every ``rejected_ids``); each row of the mask is
    multiplied by ``[1] * len(prompt_ids) + <column's loss mask>``, truncated as the collator truncates
    (``max_length``, ``truncation_mode``). Examples without a loss mask column are collated as the collator does."""

    def __init__(self, collator, masked: dict[str, tuple[str, ...]]):
        self.collator = collator
        self.masked = masked

    def __call__(self, examples: list[dict]) -> dict:
        import torch

        batch = self.collator(examples)
        max_length = getattr(self.collator, "max_length", None)
        keep_end = getattr(self.collator, "truncation_mode", "keep_start") == "keep_end"
        for mask_key, columns in self.masked.items():
            if mask_key not in batch or loss_mask_column(columns[0]) not in examples[0]:
                continue
            completion_mask = batch[mask_key]
            extra = torch.ones_like(completion_mask)
            rows = [(example, column) for column in columns for example in examples]
            for index, (example, column) in enumerate(rows):
                loss_mask = list(example[loss_mask_column(column)])
                if len(loss_mask) != len(example[column]):
                    raise ValueError(f"{len(loss_mask)} loss mask values for the {len(example[column])} {column}")
                row = [1] * len(example["prompt_ids"]) + loss_mask
                if max_length is not None:
                    row = row[-max_length:] if keep_end else row[:max_length]
                extra[index, : len(row)] = torch.tensor(row, dtype=completion_mask.dtype)
            batch[mask_key] = completion_mask * extra
        return batch


class LossMaskedTrainer:
    """A mixin for a TRL preference trainer (before it in the bases): its ``data_collator``, whatever TRL builds, is
    wrapped in a ``LossMaskedCollator`` of the class's ``LOSS_MASKED``, so every batch it collates (the reference's
    precompute, the steps, evaluation) masks the rows' tool tokens out of TRL's completion masks."""

    LOSS_MASKED: dict[str, tuple[str, ...]] = {}

    @property
    def data_collator(self):
        return self._loss_masked_collator

    @data_collator.setter
    def data_collator(self, collator):
        if collator is not None and not isinstance(collator, LossMaskedCollator):
            collator = LossMaskedCollator(collator, self.LOSS_MASKED)
        self._loss_masked_collator = collator
