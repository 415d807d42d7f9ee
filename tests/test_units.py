"""Unit tests: chunking and seeds, JSONL I/O, prompts, synthetic data, data preparation, SFT selection."""

from __future__ import annotations

import copy
import json
import os
import re
from pathlib import Path

import pytest
from conftest import resolved_prompt

from snakeskills.data.prepare import prepare_split
from snakeskills.data.synthetic import arithmetic_splits
from snakeskills.errors import SnakeskillsError
from snakeskills.generate import chunk_bounds
from snakeskills.io import atomic_open, concatenate_jsonl, read_jsonl, write_jsonl
from snakeskills.model_job import row_seed
from snakeskills.plan.config import default_config, prepare_config
from snakeskills.prompts import build_messages, fill_template, render_messages
from snakeskills.sft import select_sft_records


def write_lines(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


# ---------------------------------------------------------------- generate: chunks and seeds


@pytest.mark.parametrize("num_rows", [1, 2, 3, 7, 10, 13, 100])
def test_chunk_bounds_cover_every_row_once(num_rows):
    for num_chunks in range(1, num_rows + 1):
        bounds = [chunk_bounds(num_rows, index, num_chunks) for index in range(num_chunks)]
        covered = [row for start, end in bounds for row in range(start, end)]
        assert covered == list(range(num_rows)), (num_rows, num_chunks)
        sizes = [end - start for start, end in bounds]
        assert min(sizes) >= 1
        assert max(sizes) - min(sizes) <= 1  # balanced


def test_chunk_bounds_examples():
    assert chunk_bounds(10, 0, 3) == (0, 3)
    assert chunk_bounds(10, 1, 3) == (3, 6)
    assert chunk_bounds(10, 2, 3) == (6, 10)
    assert chunk_bounds(5, 0, 1) == (0, 5)


def test_chunk_bounds_more_chunks_than_rows():
    with pytest.raises(SnakeskillsError, match="num_chunks=4") as error:
        chunk_bounds(3, 0, 4)
    assert "3 rows" in str(error.value)


def test_chunk_bounds_bad_index_or_count():
    with pytest.raises(SnakeskillsError, match="chunk index 3"):
        chunk_bounds(10, 3, 3)
    with pytest.raises(SnakeskillsError, match="chunk index -1"):
        chunk_bounds(10, -1, 3)
    with pytest.raises(SnakeskillsError, match="num_chunks must be at least 1"):
        chunk_bounds(10, 0, 0)


def test_row_seed_is_stable_and_distinct():
    # pinned: changing the derivation would silently change every resumed generation
    assert row_seed(0, "test-000000") == 4429840809212848290
    assert row_seed(1, "test-000000") == 5181747678791535315
    assert row_seed(7, "a") == row_seed(7, "a")
    seeds = {row_seed(seed, f"id-{index}") for seed in range(5) for index in range(200)}
    assert len(seeds) == 1000
    assert all(0 <= seed < 2**63 for seed in seeds)
    # the separator keeps (1, "23") and (12, "3") apart
    assert row_seed(1, "23") != row_seed(12, "3")


# ---------------------------------------------------------------- io


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


# ---------------------------------------------------------------- prompts


def test_fill_template_fills_fields():
    assert fill_template("Q: {problem} ({id})", {"id": "p1", "problem": "2+2"}) == "Q: 2+2 (p1)"


def test_fill_template_missing_field_names_it():
    with pytest.raises(SnakeskillsError) as error:
        fill_template("Solve {question}", {"id": "p7", "problem": "2+2"})
    message = str(error.value)
    assert "'question'" in message
    assert "'p7'" in message
    assert "problem" in message  # lists the fields the record has


def test_fill_template_doubled_braces_are_literal():
    template = "Put the answer in \\boxed{{}}: {problem}"
    assert fill_template(template, {"problem": "1+1"}) == "Put the answer in \\boxed{}: 1+1"
    assert fill_template("{{problem}}", {"problem": "x"}) == "{problem}"


def test_fill_template_invalid_format_string():
    with pytest.raises(SnakeskillsError, match="not a valid format string"):
        fill_template("unbalanced {problem", {"problem": "x"})


def test_build_and_render_messages_without_chat_template():
    config = {
        "system": "Be brief. ",
        "user": "Q: {problem}",
        "examples": "",
        "chat_template": False,
        "chat_template_kwargs": {},
        "stop": [],
    }
    messages = build_messages(config, {"problem": "3*4"})
    assert messages == [{"role": "system", "content": "Be brief. "}, {"role": "user", "content": "Q: 3*4"}]
    assert render_messages(messages, chat_template=False, chat_template_kwargs={}) == "Be brief. Q: 3*4"
    no_system = build_messages({**config, "system": None}, {"problem": "3*4"})
    assert no_system == [{"role": "user", "content": "Q: 3*4"}]


def test_render_messages_chat_template_needs_a_tokenizer():
    messages = [{"role": "user", "content": "hi"}]
    with pytest.raises(SnakeskillsError, match="chat_template"):
        render_messages(messages, chat_template=True, chat_template_kwargs={}, tokenizer=None)

    class NoTemplate:
        chat_template = None

    with pytest.raises(SnakeskillsError, match="chat_template"):
        render_messages(messages, chat_template=True, chat_template_kwargs={}, tokenizer=NoTemplate())

    class WithTemplate:
        chat_template = "{{ messages }}"

        def apply_chat_template(self, messages, tokenize, add_generation_prompt):
            assert tokenize is False and add_generation_prompt is True
            return "<|user|>" + messages[-1]["content"] + "<|assistant|>"

    assert (
        render_messages(messages, chat_template=True, chat_template_kwargs={}, tokenizer=WithTemplate())
        == "<|user|>hi<|assistant|>"
    )


# ---------------------------------------------------------------- synthetic data

PROBLEM = re.compile(r"^(\d+)([+\-*])(\d+)$")


def test_arithmetic_splits_disjoint_deterministic_and_correct():
    sizes = {"bootstrap": 30, "train": 50, "test": 20}
    splits = arithmetic_splits(operations=["+", "-", "*"], max_operand=9, split_sizes=sizes, seed=3)
    assert {name: len(rows) for name, rows in splits.items()} == sizes
    problems = [row["problem"] for rows in splits.values() for row in rows]
    assert len(set(problems)) == len(problems) == 100  # disjoint, no repeats within a split
    ids = [row["id"] for rows in splits.values() for row in rows]
    assert len(set(ids)) == len(ids)
    assert splits["test"][0]["id"] == "test-000000"
    for row in (row for rows in splits.values() for row in rows):
        a, operation, b = PROBLEM.match(row["problem"]).groups()
        a, b = int(a), int(b)
        assert 0 <= a <= 9 and 0 <= b <= 9
        expected = {"+": a + b, "-": a - b, "*": a * b}[operation]
        assert row["expected_answer"] == str(expected)
    again = arithmetic_splits(operations=["+", "-", "*"], max_operand=9, split_sizes=sizes, seed=3)
    assert again == splits
    other = arithmetic_splits(operations=["+", "-", "*"], max_operand=9, split_sizes=sizes, seed=4)
    assert other != splits


def test_arithmetic_splits_too_many_problems():
    # one operation, operands 0..2 -> 9 distinct problems
    assert len(arithmetic_splits(operations=["+"], max_operand=2, split_sizes={"a": 9}, seed=0)["a"]) == 9
    with pytest.raises(SnakeskillsError, match="ask for 10 problems.* only 9"):
        arithmetic_splits(operations=["+"], max_operand=2, split_sizes={"a": 5, "b": 5}, seed=0)


def test_synthetic_splits_too_large_stop_the_plan_naming_the_key():
    """Checked when the config is loaded, not by the prepare_data job: a user asking for more problems than the
    operands allow learns it from snakemake -n, with the key to change."""
    config = copy.deepcopy(default_config())
    config["benchmarks"]["arithmetic"]["synthetic"].update(operations=["+", "-", "+"], max_operand=49)
    with pytest.raises(SnakeskillsError) as error:
        prepare_config(config)
    assert str(error.value).startswith("config key benchmarks.arithmetic.synthetic.split_sizes: the splits ask for")
    assert "allows only 5000 distinct ones" in str(error.value)


def test_arithmetic_splits_unknown_operation():
    with pytest.raises(SnakeskillsError, match="unknown operation '/'"):
        arithmetic_splits(operations=["+", "/"], max_operand=5, split_sizes={"a": 1}, seed=0)


# ---------------------------------------------------------------- prepare


def jsonl_spec(path: Path, field_map: dict | None = None, split: str = "test") -> dict:
    return {"source": "jsonl", "jsonl": {"paths": {split: str(path)}}, "field_map": field_map or {}}


def test_prepare_split_jsonl_with_field_map(tmp_path):
    path = tmp_path / "src.jsonl"
    write_jsonl(
        path,
        [
            {"id": "q1", "question": "What is 2+2?", "answer": 4},
            {"question": "What is 3+3?", "answer": "6", "level": 2},
        ],
    )
    rows = prepare_split("mybench", jsonl_spec(path, {"problem": "question", "expected_answer": "answer"}), "test")
    assert rows == [
        {"id": "q1", "question": "What is 2+2?", "answer": 4, "problem": "What is 2+2?", "expected_answer": "4"},
        {
            "question": "What is 3+3?",
            "answer": "6",
            "level": 2,
            "problem": "What is 3+3?",
            "expected_answer": "6",
            "id": "mybench-test-000001",
        },
    ]


def test_prepare_split_missing_expected_answer_names_row(tmp_path):
    path = tmp_path / "src.jsonl"
    write_jsonl(path, [{"problem": "1+1", "expected_answer": "2"}, {"problem": "2+2"}])
    with pytest.raises(SnakeskillsError) as error:
        prepare_split("b", jsonl_spec(path), "test")
    assert "row 2" in str(error.value)
    assert "'expected_answer'" in str(error.value)
    assert str(path) in str(error.value)


def test_prepare_split_blank_expected_answer_raises(tmp_path):
    path = tmp_path / "src.jsonl"
    write_jsonl(path, [{"problem": "1+1", "expected_answer": "  "}])
    with pytest.raises(SnakeskillsError, match="row 1 lacks required field 'expected_answer'"):
        prepare_split("b", jsonl_spec(path), "test")


def test_prepare_split_field_map_missing_column(tmp_path):
    path = tmp_path / "src.jsonl"
    write_jsonl(path, [{"question": "1+1", "answer": "2"}, {"answer": "3"}])
    with pytest.raises(SnakeskillsError, match="column 'question'"):
        prepare_split("b", jsonl_spec(path, {"problem": "question", "expected_answer": "answer"}), "test")


def test_prepare_split_empty_file(tmp_path):
    path = tmp_path / "empty.jsonl"
    path.write_text("", encoding="utf-8")
    with pytest.raises(SnakeskillsError, match="split 'test' of benchmark 'b' is empty"):
        prepare_split("b", jsonl_spec(path), "test")


def test_prepare_split_duplicate_ids(tmp_path):
    path = tmp_path / "src.jsonl"
    write_jsonl(
        path,
        [
            {"id": "a", "problem": "1+1", "expected_answer": "2"},
            {"id": "b", "problem": "1+2", "expected_answer": "3"},
            {"id": "a", "problem": "1+3", "expected_answer": "4"},
        ],
    )
    with pytest.raises(SnakeskillsError, match="row 3 repeats id 'a'"):
        prepare_split("b", jsonl_spec(path), "test")


def test_prepare_split_unknown_split_and_source(tmp_path):
    path = tmp_path / "src.jsonl"
    write_jsonl(path, [{"problem": "1+1", "expected_answer": "2"}])
    with pytest.raises(SnakeskillsError, match="no split 'train'"):
        prepare_split("b", jsonl_spec(path), "train")
    with pytest.raises(SnakeskillsError, match="unknown source 'csv'"):
        prepare_split("b", {"source": "csv"}, "test")


def test_prepare_split_synthetic_matches_generator():
    synthetic = {"operations": ["+"], "max_operand": 5, "split_sizes": {"train": 4, "test": 3}, "seed": 11}
    rows = prepare_split("arith", {"source": "synthetic", "synthetic": synthetic}, "test")
    assert (
        rows == arithmetic_splits(operations=["+"], max_operand=5, split_sizes={"train": 4, "test": 3}, seed=11)["test"]
    )
    assert [row["id"] for row in rows] == ["test-000000", "test-000001", "test-000002"]


# ---------------------------------------------------------------- sft

PROMPT = resolved_prompt(system="Solve.", user="Q: {problem}")
FILTERS = {
    "correct_only": True,
    "score": "symbolic_correct",
    "max_generation_tokens": 100,
    "dedup": True,
    "max_per_problem": 2,
}


def judged(id_: str, problem: str, generation: str, correct: bool = True, finish: str = "stop", tokens: int = 10):
    return {
        "id": id_,
        "problem": problem,
        "expected_answer": {"1+1": "2", "2+2": "4", "3+3": "6"}[problem],
        "generation": generation,
        "symbolic_correct": correct,
        "finish_reason": finish,
        "num_generated_tokens": tokens,
        "predicted_answer": None,
    }


@pytest.fixture
def judged_files(tmp_path) -> list[Path]:
    seed0 = [
        judged("p1", "1+1", "1+1=\\boxed{2}"),  # kept
        judged("p2", "2+2", "\\boxed{5}", correct=False),  # incorrect
        judged("p3", "3+3", "3+3=\\boxed{6}", finish="length"),  # truncated
        judged("p1", "1+1", "1+1=\\boxed{2}"),  # duplicate of the first
    ]
    seed1 = [
        judged("p1", "1+1", "long " * 50 + "\\boxed{2}", tokens=500),  # too long
        judged("p1", "1+1", "one and one: \\boxed{2}"),  # kept (second for p1)
        judged("p1", "1+1", "two: \\boxed{2}"),  # over the per-problem cap of 2
        judged("p2", "2+2", "2+2=\\boxed{4}"),  # kept
    ]
    write_jsonl(tmp_path / "seed0.jsonl", seed0)
    write_jsonl(tmp_path / "seed1.jsonl", seed1)
    return [tmp_path / "seed0.jsonl", tmp_path / "seed1.jsonl"]


def test_select_sft_records_filters(judged_files):
    records, counts = select_sft_records(judged_files, ["base", "base"], [PROMPT] * 2, FILTERS)
    assert counts == {
        "judged": 8,
        "incorrect": 1,
        "truncated": 1,
        "too_long": 1,
        "duplicate": 1,
        "over_per_problem_cap": 1,
        "kept": 3,
        "problems_covered": 2,
        "kept_by_source": {"base": 3},
    }
    assert [(r["id"], r["messages"][-1]["content"]) for r in records] == [
        ("p1", "1+1=\\boxed{2}"),
        ("p1", "one and one: \\boxed{2}"),
        ("p2", "2+2=\\boxed{4}"),
    ]
    assert records[0] == {
        "id": "p1",
        "problem": "1+1",
        "expected_answer": "2",
        "generated_by": "base",
        "messages": [
            {"role": "system", "content": "Solve."},
            {"role": "user", "content": "Q: 1+1"},
            {"role": "assistant", "content": "1+1=\\boxed{2}"},
        ],
    }
    for record in records:
        assert record["messages"][-1]["role"] == "assistant"
        assert json.dumps(record)  # serialisable as a JSONL row


def test_select_sft_records_relaxed_filters_still_drop_truncated(judged_files):
    relaxed = {
        "correct_only": False,
        "score": "symbolic_correct",
        "max_generation_tokens": None,
        "dedup": False,
        "max_per_problem": None,
    }
    records, counts = select_sft_records(judged_files, ["base", "base"], [PROMPT] * 2, relaxed)
    assert counts["truncated"] == 1
    assert counts["kept"] == 7
    assert counts["incorrect"] == counts["too_long"] == counts["duplicate"] == counts["over_per_problem_cap"] == 0
    assert counts["problems_covered"] == 2  # p3 only had a truncated generation
    assert "p3" not in {record["id"] for record in records}


def test_sft_examples_name_the_model_that_wrote_them_and_dedup_across_models(tmp_path):
    """A teacher's and a student's samples pool into one dataset: each example says who wrote it, and a
    generation both wrote is one example (the first file's)."""
    write_jsonl(tmp_path / "teacher.jsonl", [judged("p1", "1+1", "\\boxed{2}"), judged("p2", "2+2", "\\boxed{4}")])
    write_jsonl(tmp_path / "round1.jsonl", [judged("p1", "1+1", "1+1=\\boxed{2}"), judged("p2", "2+2", "\\boxed{4}")])
    paths = [tmp_path / "teacher.jsonl", tmp_path / "round1.jsonl"]
    records, counts = select_sft_records(paths, ["teacher", "round1"], [PROMPT] * 2, FILTERS)
    assert [(r["generated_by"], r["id"], r["messages"][-1]["content"]) for r in records] == [
        ("teacher", "p1", "\\boxed{2}"),
        ("teacher", "p2", "\\boxed{4}"),
        ("round1", "p1", "1+1=\\boxed{2}"),
    ]
    assert counts["kept_by_source"] == {"teacher": 2, "round1": 1} and counts["duplicate"] == 1
    with pytest.raises(SnakeskillsError, match="2 judged files but 1 sources"):
        select_sft_records(paths, ["teacher"], [PROMPT], FILTERS)


def test_select_sft_records_cap_of_one(judged_files):
    records, counts = select_sft_records(
        judged_files, ["base", "base"], [PROMPT] * 2, {**FILTERS, "max_per_problem": 1}
    )
    assert [(r["id"], r["messages"][-1]["content"]) for r in records] == [
        ("p1", "1+1=\\boxed{2}"),
        ("p2", "2+2=\\boxed{4}"),
    ]
    # dedup is checked before the cap: the repeated first generation counts as a duplicate
    assert counts["duplicate"] == 1
    assert counts["over_per_problem_cap"] == 2


def test_last_complete_checkpoint_skips_and_removes_partial_ones(tmp_path):
    from snakeskills.checkpoints import last_complete_checkpoint

    assert last_complete_checkpoint(tmp_path / "absent") is None
    assert last_complete_checkpoint(tmp_path) is None
    for step in (20, 40, 100):
        (tmp_path / f"checkpoint-{step}").mkdir()
        (tmp_path / f"checkpoint-{step}" / "trainer_state.json").write_text(json.dumps({"global_step": step}))
    (tmp_path / "checkpoint-120").mkdir()  # weights only: killed before the trainer state was written
    (tmp_path / "checkpoint-120" / "adapter_model.safetensors").write_bytes(b"")
    (tmp_path / "checkpoint-140").mkdir()  # killed while writing the trainer state
    (tmp_path / "checkpoint-140" / "trainer_state.json").write_text('{"global_st')
    (tmp_path / "checkpoint-9x").mkdir()  # not a checkpoint name: left alone
    # numeric, not lexical, order: 100 is newer than 40
    assert last_complete_checkpoint(tmp_path) == str(tmp_path / "checkpoint-100")
    assert sorted(path.name for path in tmp_path.iterdir()) == [
        "checkpoint-100",
        "checkpoint-20",
        "checkpoint-40",
        "checkpoint-9x",
    ]


def test_claim_trainer_dir_keeps_only_the_same_runs_checkpoints(tmp_path):
    from snakeskills.checkpoints import claim_trainer_dir, training_fingerprint

    examples, other_examples = [{"prompt": "1+1=", "completion": "2"}], [{"prompt": "1+1=", "completion": "3"}]
    fingerprint = training_fingerprint({"base_model_path": "m"}, {"learning_rate": 1e-3}, examples)
    assert fingerprint == training_fingerprint({"base_model_path": "m"}, {"learning_rate": 1e-3}, examples)
    for other in (
        training_fingerprint({"base_model_path": "other"}, {"learning_rate": 1e-3}, examples),
        training_fingerprint({"base_model_path": "m"}, {"learning_rate": 2e-3}, examples),
        training_fingerprint({"base_model_path": "m"}, {"learning_rate": 1e-3}, other_examples),
    ):
        assert other != fingerprint

    trainer_dir = tmp_path / ".adapter-trainer"
    claim_trainer_dir(trainer_dir, fingerprint)
    (trainer_dir / "checkpoint-20").mkdir()
    claim_trainer_dir(trainer_dir, fingerprint)  # the same run, resumed: its checkpoints stay
    assert (trainer_dir / "checkpoint-20").is_dir()
    claim_trainer_dir(trainer_dir, "another run")  # a changed run: they go
    assert not (trainer_dir / "checkpoint-20").exists()
    (trainer_dir / "checkpoint-20").mkdir()
    (trainer_dir / "run_fingerprint.json").unlink()  # leftovers nobody vouches for: they go too
    claim_trainer_dir(trainer_dir, "another run")
    assert not (trainer_dir / "checkpoint-20").exists()
    assert json.loads((trainer_dir / "run_fingerprint.json").read_text()) == {"fingerprint": "another run"}


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


@pytest.mark.parametrize(
    ("score", "kept"),
    [("symbolic_correct", ["a", "b"]), ("judge_correct", ["a", "c"]), ("both", ["a"])],
)
def test_select_sft_records_by_the_chosen_verdict(tmp_path, score, kept):
    """sft.filters.score picks which judge's verdict decides what SFT learns from."""
    rows = []
    for generation, symbolic, llm in [("a", True, True), ("b", True, False), ("c", False, True), ("d", False, False)]:
        rows.append({**judged("p1", "1+1", generation, correct=symbolic), "judge_correct": llm, "judgement": "..."})
    write_jsonl(tmp_path / "judged.jsonl", rows)
    records, counts = select_sft_records([tmp_path / "judged.jsonl"], ["base"], [PROMPT], {**FILTERS, "score": score})
    assert [record["messages"][-1]["content"] for record in records] == kept
    assert counts["incorrect"] == 4 - len(kept) and counts["kept"] == len(kept)


def test_select_sft_records_without_the_llm_verdict_names_the_file_and_row(judged_files):
    with pytest.raises(SnakeskillsError, match=r"seed0\.jsonl: row 1: no 'judge_correct' field.*judge\.llm"):
        select_sft_records(judged_files, ["base", "base"], [PROMPT] * 2, {**FILTERS, "score": "both"})


def test_comparison_table_shows_the_llm_judge_beside_the_symbolic_verdict():
    from snakeskills.summarize import format_comparison

    def metrics(symbolic, llm=None):
        mode = {"num_entries": 10, "symbolic_correct": symbolic}
        if llm is not None:
            mode["judge_correct"] = llm
        return {name: dict(mode) for name in ("pass@1[avg-of-2]", "majority@2", "pass@2")}

    plain = format_comparison({"base": {"sums": metrics(10.0)}, "round1": {"sums": metrics(40.0)}}, "base")
    assert "judge" not in plain.splitlines()[1]
    table = format_comparison(
        {"base": {"sums": metrics(10.0, 20.0)}, "round1": {"sums": metrics(40.0, 55.0)}}, "base"
    ).splitlines()
    assert [cell.strip() for cell in table[1].split("|")] == [
        "model",
        "benchmark",
        "num_entries",
        "pass@1[avg-of-2]",
        "majority@2",
        "pass@2",
        "pass@1[avg-of-2] judge",
    ]
    assert [cell.strip() for cell in table[4].split("|")] == [
        "round1",
        "sums",
        "10",
        "40.00%",
        "40.00%",
        "40.00%",
        "55.00%",
    ]
    assert (
        "LLM judge" in table[0] and "round1 vs base on sums: pass@1[avg-of-2] symbolic_correct +30.00 points" in table
    )


@pytest.mark.parametrize(
    ("keys", "expected"),
    [({}, {"dtype"}), ({"torch_dtype": "float32"}, {"torch_dtype"}), ({"dtype": "a", "torch_dtype": "b"}, None)],
    ids=["neither", "older-name", "both"],
)
def test_cast_saved_weights_names_the_dtype_under_every_key_the_config_uses(tmp_path, keys, expected):
    import torch
    from safetensors.torch import load_file, save_file

    from snakeskills.training import cast_saved_weights

    save_file({"weight": torch.ones(2), "steps": torch.arange(2)}, str(tmp_path / "model.safetensors"))
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama", **keys}))
    cast_saved_weights(tmp_path, torch.bfloat16)
    tensors = load_file(str(tmp_path / "model.safetensors"))
    assert tensors["weight"].dtype == torch.bfloat16 and tensors["steps"].dtype == torch.int64
    config = json.loads((tmp_path / "config.json").read_text())
    written = {key for key in ("dtype", "torch_dtype") if key in config}
    assert written == (expected or {"dtype", "torch_dtype"})
    assert {config[key] for key in written} == {"bfloat16"}


@pytest.mark.parametrize(
    ("answer", "kind"), [(["22", "twenty-two"], "list"), ({"value": 22}, "dict"), (True, "bool")], ids=str
)
def test_prepare_split_non_scalar_expected_answer_is_refused_not_stringified(tmp_path, answer, kind):
    """A list of accepted answers used to become the string "['22', 'twenty-two']", which never matches."""
    path = tmp_path / "src.jsonl"
    write_jsonl(path, [{"problem": "1+1", "expected_answer": "2"}, {"problem": "11+11", "expected_answer": answer}])
    with pytest.raises(SnakeskillsError, match=rf"src\.jsonl.*row 2: field 'expected_answer' is a {kind} "):
        prepare_split("b", jsonl_spec(path), "test")


def test_prepare_split_numeric_expected_answer_becomes_its_string(tmp_path):
    path = tmp_path / "src.jsonl"
    write_jsonl(path, [{"problem": "1+1", "expected_answer": 2}, {"problem": "1/2", "expected_answer": 0.5}])
    assert [row["expected_answer"] for row in prepare_split("b", jsonl_spec(path), "test")] == ["2", "0.5"]


def test_dtype_auto_generates_in_float32_on_a_cpu_without_bf16_instructions(monkeypatch):
    import torch

    from snakeskills import models
    from snakeskills.models import FROZEN_BASE, INFERENCE, TRAINED_WEIGHTS, load_dtype

    monkeypatch.setattr(models, "cpu_has_native_bf16", lambda: False)  # AVX2, most AVX-512: bf16 is emulated
    assert load_dtype("auto", INFERENCE, on_gpu=False) is torch.float32
    assert load_dtype("auto", INFERENCE, on_gpu=True) == "auto"  # the checkpoint's own
    monkeypatch.setattr(models, "cpu_has_native_bf16", lambda: True)  # AVX512_BF16 or AMX
    assert load_dtype("auto", INFERENCE, on_gpu=False) == "auto"
    assert load_dtype("bfloat16", INFERENCE, on_gpu=False) is torch.bfloat16  # asked for, so given
    assert load_dtype("auto", FROZEN_BASE, on_gpu=False) is torch.float32
    assert load_dtype("bfloat16", TRAINED_WEIGHTS, on_gpu=True) is torch.float32
