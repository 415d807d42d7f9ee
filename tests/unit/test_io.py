"""JSONL I/O written atomically, and fingerprints (snakeskills.io)."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from snakeskills.errors import SnakeskillsError
from snakeskills.io import atomic_open, concatenate_jsonl, read_jsonl, write_jsonl


def write_lines(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def test_read_jsonl_reads_objects_and_skips_blank_lines(tmp_path):
    path = write_lines(tmp_path / "ok.jsonl", ['{"a": 1}', "", "   ", '{"b": "é"}'])
    assert read_jsonl(path) == [{"a": 1}, {"b": "é"}]


def test_read_jsonl_malformed_line_names_file_and_line(tmp_path):
    path = write_lines(tmp_path / "bad.jsonl", ['{"a": 1}', '{"a": 2}', '{"a": 3'])
    with pytest.raises(SnakeskillsError) as error:
        read_jsonl(path)
    assert f"{path}:3:" in str(error.value)
    assert "malformed JSON" in str(error.value)


def test_read_jsonl_non_object_line(tmp_path):
    path = write_lines(tmp_path / "list.jsonl", ['{"a": 1}', "[1, 2]"])
    with pytest.raises(SnakeskillsError, match=re.escape(f"{path}:2: expected a JSON object, got list")):
        read_jsonl(path)


def test_read_jsonl_missing_file(tmp_path):
    with pytest.raises(SnakeskillsError, match="does not exist"):
        read_jsonl(tmp_path / "absent.jsonl")


def test_write_jsonl_round_trip(tmp_path):
    records = [{"id": "x", "text": "ünïcode"}, {"id": "y", "n": [1, 2]}]
    path = tmp_path / "sub" / "out.jsonl"
    assert write_jsonl(path, records) == 2
    assert read_jsonl(path) == records
    assert "ünïcode" in path.read_text(encoding="utf-8")  # no ASCII escaping
    assert sorted(p.name for p in path.parent.iterdir()) == ["out.jsonl"]


def test_atomic_open_failure_leaves_nothing(tmp_path):
    target = tmp_path / "out.txt"
    with pytest.raises(RuntimeError, match="boom"), atomic_open(target) as handle:
        handle.write("partial")
        raise RuntimeError("boom")
    assert not target.exists()
    assert list(tmp_path.iterdir()) == []


def test_write_jsonl_failure_keeps_previous_file(tmp_path):
    target = tmp_path / "out.jsonl"
    write_jsonl(target, [{"old": True}])

    def records():
        yield {"new": 1}
        raise ValueError("generator failed")

    with pytest.raises(ValueError, match="generator failed"):
        write_jsonl(target, records())
    assert read_jsonl(target) == [{"old": True}]
    assert [p.name for p in tmp_path.iterdir()] == ["out.jsonl"]


def test_concatenate_jsonl_in_order(tmp_path):
    first = write_jsonl(tmp_path / "a.jsonl", [{"i": 0}, {"i": 1}])
    assert first == 2
    write_jsonl(tmp_path / "b.jsonl", [{"i": 2}])
    write_lines(tmp_path / "c.jsonl", [""])  # empty file contributes nothing
    output = tmp_path / "all.jsonl"
    count = concatenate_jsonl([tmp_path / "a.jsonl", tmp_path / "c.jsonl", tmp_path / "b.jsonl"], output)
    assert count == 3
    assert read_jsonl(output) == [{"i": 0}, {"i": 1}, {"i": 2}]


def test_concatenate_jsonl_bad_input_writes_no_output(tmp_path):
    write_jsonl(tmp_path / "a.jsonl", [{"i": 0}])
    bad = write_lines(tmp_path / "b.jsonl", ['{"i": 1}', "not json"])
    output = tmp_path / "all.jsonl"
    with pytest.raises(SnakeskillsError, match=re.escape(f"{bad}:2:")):
        concatenate_jsonl([tmp_path / "a.jsonl", bad], output)
    assert not output.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.jsonl", "b.jsonl"]


def test_fingerprint_follows_file_identity_and_settings(tmp_path):
    from snakeskills.io import fingerprint

    adapter = tmp_path / "adapter"
    adapter.mkdir()
    first = fingerprint([adapter], {"temperature": 1.0})
    assert fingerprint([adapter], {"temperature": 1.0}) == first
    assert fingerprint([adapter], {"temperature": 0.5}) != first
    # re-trained: a new folder renamed into place, as atomic_directory does
    staging = tmp_path / "staging"
    staging.mkdir()
    os.utime(staging, ns=(0, adapter.stat().st_mtime_ns + 1_000_000_000))
    adapter.rmdir()
    staging.rename(adapter)
    assert fingerprint([adapter], {"temperature": 1.0}) != first
    with pytest.raises(SnakeskillsError, match="missing.jsonl: cannot read the file"):
        fingerprint([tmp_path / "missing.jsonl"], {})
