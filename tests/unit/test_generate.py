"""Generation's chunks and per-row seeds (snakeskills.generation.generate, model_job)."""

from __future__ import annotations

import pytest

from snakeskills.errors import SnakeskillsError
from snakeskills.generation.generate import chunk_bounds
from snakeskills.generation.model_job import row_seed


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
