"""Judge throughput: samples/s of the rule-based judge (extraction + math-verify) on this machine.

Usage: python bench/judge.py [--samples 10000] [--workers 2] [--output bench/results/judge.json]

Builds a deterministic mix of typical math-benchmark generations (a few hundred characters of
reasoning ending in ``\\boxed{}``): integer answers right and wrong (GSM8K/AIME-like, decided without
sympy), and fractions, decimals, radicals, expressions, intervals, sets and text answers (MATH-like,
compared by math-verify in worker processes), plus generations with no answer. Times
``judge_records`` over all of them, and separately over only the samples that need math-verify.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import time
from pathlib import Path

from snakeskills.judging.judge import judge_records, quick_verdict
from snakeskills.settings.judging import RuleJudge

REPO = Path(__file__).resolve().parent.parent


def symbolic_answer(rng: random.Random) -> tuple[str, str]:
    """A MATH-like (expected, predicted) pair that needs a symbolic comparison; right about half the time."""
    a, b, c = rng.randint(1, 60), rng.randint(2, 60), rng.randint(2, 12)
    right = rng.random() < 0.5
    kind = rng.randrange(7)
    if kind == 0:  # fraction vs decimal or slash
        predicted = f"{a / b:.6f}".rstrip("0") if rng.random() < 0.5 else f"{a}/{b}"
        return rf"\frac{{{a}}}{{{b}}}", predicted if right else f"{a + 1}/{b}"
    if kind == 1:  # radicals
        return rf"{a}\sqrt{{{c}}}", rf"\sqrt{{{a * a * c}}}" if right else rf"{a}\sqrt{{{c + 1}}}"
    if kind == 2:  # intervals
        return f"({a},{a + b}]", f"({a}, {a + b}]" if right else f"[{a},{a + b}]"
    if kind == 3:  # sets
        return rf"\{{{a},{b}\}}", rf"\{{{b},{a}\}}" if right else rf"\{{{a},{b + 1}\}}"
    if kind == 4:  # expressions
        return f"x^2+{2 * a}x+{a * a}", f"(x+{a})^2" if right else f"(x-{a})^2"
    if kind == 5:  # multiples of pi
        return rf"{a}\pi", rf"\pi \cdot {a}" if right else rf"{a + 1}\pi"
    return rf"-\frac{{{a}}}{{{b}}}", f"-{a}/{b}" if right else rf"\frac{{{a}}}{{{b}}}"  # signs


FILLER = (
    "We set up the problem carefully. First we write down what is given and what is asked. "
    "Then we simplify the expression step by step, checking each step. "
)


def typical_records(count: int, seed: int) -> list[dict]:
    rng = random.Random(seed)
    records = []
    for index in range(count):
        kind = rng.random()
        if kind < 0.05:
            expected, answer = str(rng.randint(1, 999)), None  # ran out of tokens: no \boxed{}
        elif kind < 0.6:
            expected = str(rng.randint(1, 999))
            answer = expected if rng.random() < 0.6 else str(rng.randint(1, 999))
            if rng.random() < 0.1:
                answer = answer.zfill(3)  # AIME-style "016"
        else:
            expected, answer = symbolic_answer(rng)
        reasoning = FILLER * rng.randint(1, 4)
        generation = reasoning + (f"So the final answer is $\\boxed{{{answer}}}$." if answer is not None else "")
        records.append({"id": f"b{index}", "expected_answer": expected, "generation": generation})
    return records


def time_judging(records: list[dict], workers: int, timeout: float) -> tuple[float, list[dict]]:
    judge = RuleJudge.from_dict(
        {
            "extraction": "boxed",
            "regex": None,
            "equivalence": "math-verify",
            "timeout_seconds": timeout,
            "memory_limit_mb": 4096,
        },
        "judge",
    )
    start = time.perf_counter()
    judged = judge_records(records, judge, num_workers=workers)
    return time.perf_counter() - start, judged


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--samples", type=int, default=10_000)
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--timeout", type=float, default=5.0)
    parser.add_argument("--output", type=Path, default=REPO / "bench/results/judge.json")
    arguments = parser.parse_args()

    records = typical_records(arguments.samples, seed=0)
    all_seconds, judged = time_judging(records, arguments.workers, arguments.timeout)
    symbolic = [
        record
        for record, row in zip(records, judged, strict=True)
        if quick_verdict(record["expected_answer"], row["predicted_answer"]) is None
    ]
    symbolic_seconds, _ = time_judging(symbolic, arguments.workers, arguments.timeout)
    one_worker_seconds, _ = time_judging(symbolic, 1, arguments.timeout)
    figures = {
        "machine": f"{platform.machine()}, {os.cpu_count()} cores",
        "workers": arguments.workers,
        "samples": len(records),
        "seconds": round(all_seconds, 2),
        "samples_per_second": round(len(records) / all_seconds, 1),
        "correct_share": round(sum(row["symbolic_correct"] for row in judged) / len(judged), 3),
        "no_answer_share": round(sum(row["predicted_answer"] is None for row in judged) / len(judged), 3),
        "math_verify_samples": len(symbolic),
        "math_verify_distinct_pairs": len({(r["expected_answer"], r["generation"]) for r in symbolic}),
        "math_verify_seconds": round(symbolic_seconds, 2),
        "math_verify_samples_per_second": round(len(symbolic) / symbolic_seconds, 1),
        "math_verify_one_worker_samples_per_second": round(len(symbolic) / one_worker_seconds, 1),
    }
    arguments.output.parent.mkdir(parents=True, exist_ok=True)
    arguments.output.write_text(json.dumps(figures, indent=2) + "\n")
    for key, value in figures.items():
        print(f"{key:45s} {value}")


if __name__ == "__main__":
    main()
