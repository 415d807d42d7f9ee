"""The built-in synthetic arithmetic task (snakeskills.data.synthetic)."""

from __future__ import annotations

import copy
import re

import pytest

from snakeskills.data.synthetic import arithmetic_splits
from snakeskills.errors import SnakeskillsError
from snakeskills.plan.config import default_config, prepare_config

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
