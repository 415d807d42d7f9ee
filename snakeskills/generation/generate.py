"""Generation of one chunk of one split for one random seed.

Chunk k of N is the slice ``[k*n//N, (k+1)*n//N)`` of the prepared split, computed at run time.
Rows are generated in batches by the model jobs' runner (``model_job``), resumably, so a killed job goes on
where it stopped. Because every row is sampled from its own seed (``row_seed``), the resumed output equals an
uninterrupted one.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from snakeskills.backends import build_request
from snakeskills.errors import SnakeskillsError
from snakeskills.generation.model_job import AskedModel, ask_model_per_row, row_seed
from snakeskills.io import read_jsonl


def chunk_bounds(num_rows: int, chunk_index: int, num_chunks: int, *, allow_empty: bool = False) -> tuple[int, int]:
    """Rows [start, end) of one chunk. A prepared split must have a row per chunk (num_chunks above its size is a
    config mistake); a synthesized split (``allow_empty``), whose size is known only once made, may leave chunks
    empty."""
    if num_chunks < 1:
        raise SnakeskillsError(f"num_chunks must be at least 1, got {num_chunks}")
    if not 0 <= chunk_index < num_chunks:
        raise SnakeskillsError(f"chunk index {chunk_index} is outside 0..{num_chunks - 1}")
    if num_chunks > num_rows and not allow_empty:
        raise SnakeskillsError(
            f"num_chunks={num_chunks} is more than the {num_rows} rows of the split; lower num_chunks"
        )
    return num_rows * chunk_index // num_chunks, num_rows * (chunk_index + 1) // num_chunks


def generated_record(record: dict, fields: dict, result, random_seed: int, price=None) -> dict:
    """NeMo-Skills' generation fields added to the input record: the text's ``fields`` (``result_fields``), the
    token count, finish reason and seed (``error`` only for a soft failure; ``reasoning_content`` where an
    OpenAI-compatible server split the model's reasoning off); with tools, what the tool loop recorded; for a
    priced model answering on its own (``price``, a ``tools.price.Price``: a model tool evaluated alone), the
    answer's ``cost``."""
    generated = {
        **record,
        **fields,
        "num_generated_tokens": result.num_generated_tokens,
        "finish_reason": result.finish_reason,
        "random_seed": random_seed,
    }
    if result.tools is not None:  # tool-integrated generation: calls, timeouts, tool time, the outputs' spans
        generated.update(result.tools)
    if price is not None:
        generated["cost"] = round(answer_cost(price, result), 10)
    if result.reasoning_content is not None:
        generated["reasoning_content"] = result.reasoning_content
    if result.error is not None:
        generated["error"] = result.error
    return generated


def answer_cost(price, result) -> float:
    """What a priced model's answer costs: one call of it (``Price.cost``) on the prompt's and the answer's tokens."""
    if result.num_prompt_tokens is None and price.per_input_token:
        raise SnakeskillsError(
            "a price per input token is set, but the backend did not say how many tokens the prompt had (an "
            "OpenAI-compatible server that reports no usage)"
        )
    return price.cost(result.num_prompt_tokens or 0, result.num_generated_tokens)


def generate_chunk(
    model: AskedModel,
    *,
    prepared_path: str | Path,
    output_path: str | Path,
    chunk_index: int,
    num_chunks: int,
    random_seed: int,
    allow_empty_chunk: bool = False,
    price=None,
) -> dict:
    """Generate the chunk with ``model`` (``model_job.ask_model_per_row``: resumed from the progress file if one
    exists); returns counts. ``price``: the model's own, where it is priced (``generated_record``). The prepared
    split is part of the fingerprint; the workflow's settings file
    (``model.fingerprint_files``) is rewritten whenever the model, adapter or split changes."""
    records = read_jsonl(prepared_path)
    # the always-ask baseline (tools.first_call): the tool loop calls the tool with the problem before the model
    forced = getattr(model.backend, "forces_first_call", False)

    def request_for(record: dict):
        request = build_request(model.backend, model.prompt, record, row_seed(random_seed, record["id"]))
        return dataclasses.replace(request, forced_call=record["problem"]) if forced else request

    start, end = chunk_bounds(len(records), chunk_index, num_chunks, allow_empty=allow_empty_chunk)
    counts = ask_model_per_row(
        records[start:end],
        model,
        output_path=output_path,
        inputs=[prepared_path],
        settings={"chunk_index": chunk_index, "num_chunks": num_chunks, "random_seed": random_seed},
        key="generation",
        label=f"generate {Path(output_path).name}",
        request_for=request_for,
        output_row=lambda record, fields, result: generated_record(record, fields, result, random_seed, price),
    )
    return {"rows": counts["rows"], "resumed_rows": counts["resumed_rows"], "generated_rows": counts["processed_rows"]}
