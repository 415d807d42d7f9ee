"""The eval comparison's table (snakeskills.results.comparison)."""

from __future__ import annotations


def test_comparison_table_shows_the_llm_judge_beside_the_symbolic_verdict():
    from snakeskills.results.comparison import format_comparison

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
