"""Generation with the real hf backend on an untrained tiny Llama: per-row seeds and resume."""

from __future__ import annotations

import dataclasses
import os

import pytest
from conftest import asked_model, hf_backend, resolved_prompt
from interruptions import run_killed_after_batches

from snakeskills.backends import SamplingParams
from snakeskills.data.synthetic import arithmetic_splits
from snakeskills.generation.generate import generate_chunk
from snakeskills.generation.resumable import FINGERPRINT_KEY, progress_path_for
from snakeskills.io import read_jsonl, write_jsonl

PROMPT = resolved_prompt(user="{problem}=")
SAMPLING = SamplingParams(temperature=1.0, top_p=0.9, top_k=0, max_new_tokens=6)


@pytest.fixture(scope="module")
def backend(tiny_checkpoint):

    return hf_backend(str(tiny_checkpoint), batch_size=7, threads=1)


@pytest.fixture()
def prepared(tmp_path):
    path = tmp_path / "split.jsonl"
    records = arithmetic_splits(operations=["+"], max_operand=20, split_sizes={"test": 40}, seed=1)["test"]
    write_jsonl(path, records)
    return path


def _generate(backend, prepared, output, chunk_index=0, num_chunks=1, sampling=SAMPLING, fingerprint_files=()):
    return generate_chunk(
        asked_model(backend, PROMPT, sampling, rows_per_flush=10, fingerprint_files=list(fingerprint_files)),
        prepared_path=prepared,
        output_path=output,
        chunk_index=chunk_index,
        num_chunks=num_chunks,
        random_seed=3,
    )


def test_resumed_chunk_equals_uninterrupted_and_redoes_only_missing_rows(backend, prepared, tmp_path, monkeypatch):
    reference = tmp_path / "reference.jsonl"
    counts = _generate(backend, prepared, reference)
    assert counts == {"rows": 40, "resumed_rows": 0, "generated_rows": 40}
    assert not progress_path_for(reference).exists()

    # a job killed after two flushes leaves 20 rows in its progress file, under its fingerprint
    resumed = tmp_path / "resumed.jsonl"
    run_killed_after_batches(backend, monkeypatch, lambda: _generate(backend, prepared, resumed), batches=2)
    assert not resumed.exists()
    progress = read_jsonl(progress_path_for(resumed))
    assert list(progress[0]) == [FINGERPRINT_KEY] and len(progress) == 21
    counts = _generate(backend, prepared, resumed)
    assert counts == {"rows": 40, "resumed_rows": 20, "generated_rows": 20}
    assert resumed.read_bytes() == reference.read_bytes()
    assert not progress_path_for(resumed).exists()


def test_progress_made_with_other_settings_or_inputs_is_not_resumed(backend, prepared, tmp_path, monkeypatch):
    """A kill, then a config change (sampling, a rewritten settings file or split): the rerun starts over."""
    settings = tmp_path / "settings.json"
    settings.write_text("{}")
    output = tmp_path / "out.jsonl"

    def kill_then_rerun(**changed):
        run_killed_after_batches(
            backend, monkeypatch, lambda: _generate(backend, prepared, output, fingerprint_files=[settings]), batches=2
        )
        return _generate(backend, prepared, output, **{"fingerprint_files": [settings], **changed})

    cooler = dataclasses.replace(SAMPLING, temperature=0.5)
    assert kill_then_rerun(sampling=cooler)["resumed_rows"] == 0
    assert kill_then_rerun()["resumed_rows"] == 20  # the same job resumes

    def rewrite(path):
        status = os.stat(path)
        os.utime(path, ns=(status.st_atime_ns, status.st_mtime_ns + 1_000_000_000))

    run_killed_after_batches(
        backend, monkeypatch, lambda: _generate(backend, prepared, output, fingerprint_files=[settings]), batches=2
    )
    rewrite(settings)  # the settings job reran: say the adapter it names was retrained
    assert _generate(backend, prepared, output, fingerprint_files=[settings])["resumed_rows"] == 0
    run_killed_after_batches(
        backend, monkeypatch, lambda: _generate(backend, prepared, output, fingerprint_files=[settings]), batches=2
    )
    rewrite(prepared)
    assert _generate(backend, prepared, output, fingerprint_files=[settings])["resumed_rows"] == 0
    # a progress file from before fingerprints (rows only) is not trusted either
    write_jsonl(progress_path_for(output), read_jsonl(output)[:20])
    assert _generate(backend, prepared, output, fingerprint_files=[settings])["resumed_rows"] == 0


def test_samples_do_not_depend_on_chunking(backend, prepared, tmp_path):
    whole = tmp_path / "whole.jsonl"
    _generate(backend, prepared, whole)
    parts = []
    for chunk in range(3):
        part = tmp_path / f"part{chunk}.jsonl"
        _generate(backend, prepared, part, chunk_index=chunk, num_chunks=3)
        parts.extend(read_jsonl(part))
    assert [row["generation"] for row in parts] == [row["generation"] for row in read_jsonl(whole)]
    assert len({row["generation"] for row in parts}) > 5, "sampling at temperature 1 should vary across rows"


def test_damaged_progress_file_starts_its_job_over_with_a_warning(backend, prepared, tmp_path, monkeypatch, caplog):
    reference = tmp_path / "reference.jsonl"
    _generate(backend, prepared, reference)
    output = tmp_path / "out.jsonl"
    run_killed_after_batches(backend, monkeypatch, lambda: _generate(backend, prepared, output), batches=2)
    progress = progress_path_for(output)
    progress.write_text(progress.read_text()[:-30])  # the last row cut in the middle
    with caplog.at_level("WARNING"):
        assert _generate(backend, prepared, output)["resumed_rows"] == 0
    assert "progress file is damaged" in caplog.text and "starting its job over" in caplog.text
    assert output.read_bytes() == reference.read_bytes()


def test_generate_log_says_rows_done_rate_and_eta_each_batch(backend, prepared, tmp_path, monkeypatch, caplog):
    """The tiny backend's batches finish in milliseconds: with no minimum interval every batch reports."""
    import re

    import snakeskills.progress

    monkeypatch.setattr(snakeskills.progress, "MIN_INTERVAL_SECONDS", 0.0)
    with caplog.at_level("INFO", logger="snakeskills.progress"):
        _generate(backend, prepared, tmp_path / "out.jsonl")
    messages = [record.getMessage() for record in caplog.records if record.name == "snakeskills.progress"]
    # inside a batch, its decoding steps (hf); after it, the rows done
    steps = [message for message in messages if ", a batch of " in message]
    # a step line's ETA: unknown on the batch's first step (warm-up), then at most the step rate's, then the rows'
    step_eta = r"a batch of [73] at step \d+/\d+, .* ETA (unknown|at most \w+|\w+)$"
    assert steps and all(re.search(step_eta, step) for step in steps)
    assert any(step.endswith("ETA unknown") for step in steps) and any("ETA at most" in step for step in steps)
    lines = [message for message in messages if message not in steps]
    # flushes of 10 rows, each generated in backend batches of 7 and 3
    assert [int(re.search(r": (\d+)/40 rows", line).group(1)) for line in lines] == [7, 10, 17, 20, 27, 30, 37, 40]
    # the first rows' rate would count the model's warm-up: their line waits for more rows; the next has a rate
    assert lines[0].startswith("generate out.jsonl: 7/40 rows (17.5%), elapsed") and "ETA unknown until" in lines[0]
    pattern = (
        r"^generate out\.jsonl: 10/40 rows \(25\.0%\), [\d.]+ rows/s, [\d.]+ generated tokens/s, "
        r"elapsed \d+s, ETA \d+s$"
    )
    assert re.match(pattern, lines[1]), lines[1]
    assert lines[-1].startswith("generate out.jsonl: 40/40 rows (100.0%)") and lines[-1].endswith(", done")


def test_bf16_rows_depend_on_the_batch_but_a_resumed_job_still_equals_an_uninterrupted_one(
    smollm2, tmp_path, monkeypatch
):
    """The real SmolLM2 in bf16 on this CPU: a row's logits change in their last bits with its batch, so some
    sampled rows differ between batch sizes (bench/results/generation-smollm2-cpu-bf16.json: 34 of 64 alike). A
    resumed job starts at a flush boundary and hands the model the same groups of rows, in the same batches, as
    the uninterrupted job: its file is byte-identical even in bf16."""
    prepared = tmp_path / "split.jsonl"
    write_jsonl(
        prepared, arithmetic_splits(operations=["+"], max_operand=999, split_sizes={"test": 16}, seed=2)["test"]
    )
    prompt = resolved_prompt(template="generic-math", chat_template=True)
    sampling = SamplingParams(temperature=0.7, top_p=1.0, top_k=0, max_new_tokens=32)

    def generate(backend, output):
        return generate_chunk(
            asked_model(backend, prompt, sampling, rows_per_flush=8),
            prepared_path=prepared,
            output_path=output,
            chunk_index=0,
            num_chunks=1,
            random_seed=0,
        )

    batched = hf_backend(smollm2, device="cpu", dtype="bfloat16", batch_size=8, threads=os.cpu_count())
    generate(batched, tmp_path / "reference.jsonl")
    run_killed_after_batches(batched, monkeypatch, lambda: generate(batched, tmp_path / "resumed.jsonl"), batches=1)
    assert generate(batched, tmp_path / "resumed.jsonl")["resumed_rows"] == 8
    assert (tmp_path / "resumed.jsonl").read_bytes() == (tmp_path / "reference.jsonl").read_bytes()

    alone = hf_backend(smollm2, device="cpu", dtype="bfloat16", batch_size=1, threads=os.cpu_count())
    generate(alone, tmp_path / "alone.jsonl")
    texts = [[row["generation"] for row in read_jsonl(tmp_path / name)] for name in ("reference.jsonl", "alone.jsonl")]
    assert texts[0] != texts[1], "bf16 rows are expected to depend on their batch on this CPU"
