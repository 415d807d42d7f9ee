"""A learning curve on the real SmolLM2-135M-Instruct (config/examples/smollm2-135m-instruct-learning-curves.yaml).

Usage: python3 bench/learning_curves.py [--cores 2] [--workdir DIR] [--output FILE]
(default output: bench/results/learning-curves-smollm2.json).
Runs the real `snakemake` on the example (sft.select: best_validation), then the same config with select: last in
the same folder (the segments and their evaluations are done: only the selection and the output model's test
evaluation run again), and reports each checkpoint's validation pass@1 with its interval, the step chosen, and the
test pass@1 of the chosen step beside the last step's, with the wall time of each run. --workdir keeps the folder
(a run there that finished does nothing again).
"""

from __future__ import annotations

import argparse
import json
import platform
import tempfile
from pathlib import Path

import yaml
from pipeline import REPO, snakemake

from snakeskills.models.pretrained import link_folder, packaged_model_folder

EXAMPLE = REPO / "config/examples/smollm2-135m-instruct-learning-curves.yaml"
RESULTS = "results/smollm2-135m-instruct-learning-curves"
MODE = "pass@1[avg-of-2]"


def test_figure(summary: dict, model: str) -> float:
    return summary[model]["arithmetic"][MODE]["symbolic_correct"]


def run(workdir: Path, cores: str, arguments: argparse.Namespace) -> dict:
    link = workdir / "models/SmolLM2-135M-Instruct"
    if not link.exists():
        link_folder(packaged_model_folder("smollm2-135m-instruct"), link)
    best_seconds, _ = snakemake(workdir, "--cores", cores, configfile=EXAMPLE)
    results = workdir / RESULTS
    best = json.loads((results / "eval/summary.json").read_text())
    config = yaml.safe_load(EXAMPLE.read_text())
    config["sft"]["select"] = "last"
    last_config = workdir / "select-last.yaml"
    last_config.write_text(yaml.safe_dump(config, sort_keys=False))
    last_seconds, _ = snakemake(workdir, "--cores", cores, configfile=last_config)
    last = json.loads((results / "eval/summary.json").read_text())
    round_name = "sft-round1"
    selection = best[round_name]["validation/selection"]
    return {
        "command": "python3 bench/learning_curves.py --cores " + cores,
        "machine": {"processor": platform.processor() or platform.machine(), "cores": cores},
        "wall_seconds": {"select_best_validation": round(best_seconds, 1), "then_select_last": round(last_seconds, 1)},
        "validation_curve": [
            {
                "step": entry["step"],
                "model": entry["checkpoint"],
                **{key: entry["benchmarks"]["arithmetic"][key] for key in ("pass@1", "ci_low", "ci_high")},
            }
            for entry in best[round_name]["validation/curve"]
        ],
        "selected_step": selection["selected_step"],
        "last_step": selection["last_step"],
        "test_pass_at_1": {
            "base": test_figure(best, "smollm2-135m-instruct"),
            f"step {selection['selected_step']} (best_validation)": test_figure(best, round_name),
            f"step {selection['last_step']} (last)": test_figure(last, round_name),
        },
        "test_gain_over_base": {
            "best_validation": best[round_name]["arithmetic/paired_gain"],
            "last": last[round_name]["arithmetic/paired_gain"],
        },
        "training_cost": best[round_name]["training/cost"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--cores", default="2")
    parser.add_argument("--workdir", type=Path)
    parser.add_argument("--output", type=Path, default=REPO / "bench/results/learning-curves-smollm2.json")
    arguments = parser.parse_args()
    if arguments.workdir is not None:
        arguments.workdir.mkdir(parents=True, exist_ok=True)
        figures = run(arguments.workdir, arguments.cores, arguments)
    else:
        with tempfile.TemporaryDirectory(prefix="snakeskills-curves-") as scratch:
            figures = run(Path(scratch), arguments.cores, arguments)
    arguments.output.write_text(json.dumps(figures, indent=2) + "\n")
    print(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
