"""The judge's worker pool: per-task time limit and a memory limit relative to the forked worker."""

from __future__ import annotations

import mmap

from snakeskills.judging.judge import symbolic_verdicts
from snakeskills.sandbox.timed_pool import TimedProcessPool


def allocate_megabytes(megabytes: int) -> int:
    return len(bytearray(megabytes * 1024 * 1024))


def test_task_past_the_memory_limit_fails_and_the_pool_goes_on():
    with TimedProcessPool(allocate_megabytes, num_workers=1, timeout_seconds=30, memory_limit_mb=256) as pool:
        too_much, small = pool.map([(1024,), (16,)])
    assert too_much.error is not None and too_much.error.startswith("MemoryError")
    assert small.value == 16 * 1024 * 1024 and small.error is None


def test_memory_limit_counts_from_the_address_space_the_worker_was_forked_with():
    """Regression (CI): after a model was trained in the pytest process, its multi-GB address space made
    every forked math-verify worker die on its first allocation with an absolute 4 GB limit."""
    mapped = mmap.mmap(-1, 6 * 1024**3)  # address space only: nothing is touched, so no memory is used
    try:
        verdicts = symbolic_verdicts(
            [("1/2", "0.5"), ("0.75", r"\dfrac{3}{4}"), (r"\frac{1}{3}", "0.33")],
            equivalence="math-verify",
            num_workers=2,
            timeout_seconds=10,
            memory_limit_mb=1024,
        )
    finally:
        mapped.close()
    assert verdicts == [True, True, False]
