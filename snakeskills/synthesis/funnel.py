"""The synthesis funnel: how many texts each round's writer wrote, parsed, kept unique and clean, and labelled, and
how many SFT examples they gave, as a JSON file and a table."""

from __future__ import annotations

from pathlib import Path

from snakeskills.io import read_json, write_json, write_text

FUNNEL_STEPS = ("generated", "parsed", "unique", "clean", "labelled")


def funnel(
    filter_stats: list[dict],
    label_stats: list[dict],
    runs: list[tuple[int, str]],
    sft_stats: dict,
    llm_check_stats: list[dict] | None = None,
) -> list[dict]:
    """One row per (round, benchmark): the new problems left after each step, the round's SFT examples from
    synthesized problems, and the label accuracy where the benchmark could check labels. With the LLM
    contamination check (``llm_check_stats``, one per run), clean counts what both checks kept, and
    ``llm_contaminated`` what the LLM check removed."""
    rows = []
    for position, ((round_number, benchmark), filtered, labelled) in enumerate(
        zip(runs, filter_stats, label_stats, strict=True)
    ):
        row = {"round": round_number, "benchmark": benchmark, **{step: filtered[step] for step in FUNNEL_STEPS[:-1]}}
        if llm_check_stats:
            row["llm_contaminated"] = llm_check_stats[position]["contaminated"]
            row["clean"] = llm_check_stats[position]["clean"]
        row["labelled"] = labelled["labelled"]
        row["sft_examples"] = sft_stats[round_number]["kept_by_source"].get("synthesized", 0)
        row["label_accuracy"] = labelled.get("label_accuracy")
        row["label_checked"] = labelled.get("label_checked")
        rows.append(row)
    return rows


def format_funnel(rows: list[dict]) -> str:
    header = ["round", "benchmark", *FUNNEL_STEPS, "SFT examples", "label accuracy"]
    lines = []
    for row in rows:
        accuracy = (
            f"{100 * row['label_accuracy']:.2f}% of {row['label_checked']}"
            if row["label_accuracy"] is not None
            else "-"
        )
        lines.append(
            [
                f"round{row['round']}",
                row["benchmark"],
                *(str(row[step]) for step in FUNNEL_STEPS),
                str(row["sft_examples"]),
                accuracy,
            ]
        )
    widths = [max(len(str(cell)) for cell in column) for column in zip(header, *lines, strict=True)]
    text = [
        "synthesized problems per round (generated -> parsed -> unique -> clean of contamination -> labelled), "
        "and the round's SFT examples from them"
    ]
    if any("llm_contaminated" in row for row in rows):
        removed = ", ".join(f"round{row['round']} {row['benchmark']}: {row['llm_contaminated']}" for row in rows)
        text.append(f"clean: by the n-gram and the LLM check (removed by the LLM judge: {removed})")
    for cells in [header, *lines]:
        text.append("  ".join(str(cell).ljust(width) for cell, width in zip(cells, widths, strict=True)).rstrip())
    return "\n".join(text) + "\n"


def write_funnel(
    filter_paths: list[str | Path],
    label_paths: list[str | Path],
    sft_stats_paths: list[str | Path],
    llm_check_paths: list[str | Path],
    *,
    runs: list[tuple[int, str]],
    rounds: list[int],
    output_path: str | Path,
    table_path: str | Path,
) -> list[dict]:
    sft_stats = {round_number: read_json(path) for round_number, path in zip(rounds, sft_stats_paths, strict=True)}
    rows = funnel(
        [read_json(path) for path in filter_paths],
        [read_json(path) for path in label_paths],
        runs,
        sft_stats,
        [read_json(path) for path in llm_check_paths],
    )
    write_json(output_path, rows)
    write_text(table_path, format_funnel(rows))
    return rows
