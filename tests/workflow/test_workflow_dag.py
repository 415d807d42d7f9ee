"""DAG shape and config validation through real `snakemake` dry runs (fast, nothing is executed), and the README's
commands for the DAG, run as written at the root of a fresh clone (tests/fresh_clone.py)."""

from __future__ import annotations

import os
import re
import shutil
import time
from collections import Counter
from graphlib import TopologicalSorter
from itertools import pairwise

import yaml
from conftest import DEFAULT_CONFIG, dry_run_counts, run_snakemake
from fresh_clone import fresh_clone, run_command

# the README's commands
PLAN = "python3 -m snakemake -n"
RULE_GRAPH = "python3 -m snakemake --rulegraph | dot -Tsvg > dag.svg"
RERUN_JUDGE = "python3 -m snakemake -c all -R judge"


def test_job_counts_follow_chunks_and_seeds(tmp_path):
    # default: 2 models; base generates on train (4 seeds) + test (4 seeds), sft-round1 on test (4 seeds)
    counts = dry_run_counts(tmp_path, "--config", "num_chunks=3", "num_seeds=5", "train_num_seeds=2")
    train_jobs = 2 * 3  # base on train: 2 seeds x 3 chunks
    test_jobs = 2 * 5 * 3  # base and sft-round1 on test: 5 seeds x 3 chunks
    assert counts["generate"] == train_jobs + test_jobs
    assert counts["judge"] == train_jobs + test_jobs
    assert counts["merge_judged"] == 2 + 2 * 5
    assert counts["summarize"] == 3  # base/train, base/test, sft-round1/test
    assert counts["prepare_data"] == 4  # bootstrap, validation, train, test
    assert counts["build_tiny_model"] == counts["sft_data"] == counts["sft"] == counts["eval"] == 1


def test_rounds_chain_models(tmp_path):
    counts = dry_run_counts(tmp_path, "--config", "rounds=3", "num_chunks=1", "num_seeds=2", "train_num_seeds=2")
    # rounds 1..3 are trained; base, sft-round1 and sft-round2 generate training data; all 4 models are evaluated
    assert counts["sft"] == counts["sft_data"] == 3
    assert counts["generate"] == 3 * 2 + 4 * 2
    assert counts["summarize"] == 3 + 4


def _write_config(tmp_path, mutate):
    config = yaml.safe_load(DEFAULT_CONFIG.read_text())
    mutate(config)
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def test_mistyped_key_stops_before_any_job(tmp_path):
    def mutate(config):
        config["generation"]["sampling"]["temprature"] = 0.7

    process = run_snakemake(tmp_path, "--cores", "1", configfile=_write_config(tmp_path, mutate))
    output = process.stdout + process.stderr
    assert process.returncode != 0
    assert "unknown config key generation.sampling.temprature: did you mean 'temperature'?" in output
    assert len(output.splitlines()) < 12, "a short message, not the schema"
    assert not (tmp_path / "results").exists()


def test_lint_is_clean(tmp_path):
    process = run_snakemake(tmp_path, "--lint")
    output = process.stdout + process.stderr
    assert process.returncode == 0, output
    assert "Lints for" not in output, output


def test_ruff_is_clean():
    import subprocess

    from conftest import REPO

    ruff = shutil.which("ruff")
    assert ruff, "ruff is part of the [test] extra"
    for command in ([ruff, "check", "."], [ruff, "format", "--check", "."]):
        process = subprocess.run(command, capture_output=True, text=True, cwd=REPO)
        assert process.returncode == 0, process.stdout + process.stderr


def test_the_rule_graph_is_the_loop_as_one_dot_graph(tmp_path):
    """`snakemake --rulegraph` prints the graph alone on stdout (anything else there would break `| dot`): the loop's
    rules, an edge for each file one hands to the next."""
    clone = fresh_clone(tmp_path / "clone")
    process = run_command(clone, RULE_GRAPH.split(" | ")[0])
    assert process.returncode == 0, process.stderr[-3000:]
    assert re.fullmatch(r"\s*digraph snakemake_dag \{.*\}\s*", process.stdout, flags=re.DOTALL), process.stdout[:500]
    names = dict(re.findall(r'^\s*(\d+)\[label = "(\w+)"', process.stdout, flags=re.MULTILINE))
    edges = {(names[a], names[b]) for a, b in re.findall(r"^\s*(\d+) -> (\d+)\s*$", process.stdout, flags=re.MULTILINE)}
    loop = ["prepare_data", "generation_settings", "generate", "judge", "merge_judged", "summarize", "eval", "all"]
    training = ["merge_judged", "sft_data", "sft", "generation_settings"]  # the tuned model generates again
    for chain in (loop, training, ["prepare_data", "build_tiny_model", "sft"]):
        assert set(pairwise(chain)) <= edges, (chain, sorted(edges))


def test_the_readme_draws_the_rule_graph(tmp_path, graphviz):
    clone = fresh_clone(tmp_path / "clone")
    process = run_command(clone, RULE_GRAPH)
    assert process.returncode == 0, process.stderr[-3000:]
    svg = (clone / "dag.svg").read_text()
    assert "<svg" in svg
    for rule in ("prepare_data", "generate", "judge", "summarize", "sft", "eval"):
        assert f">{rule}</text>" in svg, rule


def listed_jobs(output: str) -> list[tuple[str, tuple[str, ...], tuple[str, ...]]]:
    """(rule, input files, output files) of every job a dry run lists, in the order of the DAG (inputs first)."""
    jobs = []
    for block in re.split(r"\n(?=(?:local)?rule \S+:\n)", output):
        if header := re.match(r"(?:local)?rule (\S+):\n", block):
            fields = dict(re.findall(r"^\s{4}(\w+): (.*)$", block, flags=re.MULTILINE))
            files = {key: tuple(fields[key].split(", ")) if key in fields else () for key in ("input", "output")}
            jobs.append((header.group(1), files["input"], files["output"]))
    producers = {path: index for index, (_, _, outputs) in enumerate(jobs) for path in outputs}
    needs = {
        index: {producers[path] for path in inputs if path in producers} for index, (_, inputs, _) in enumerate(jobs)
    }
    return [jobs[index] for index in TopologicalSorter(needs).static_order()]


def write_as_finished(folder, jobs) -> None:
    """Every job's outputs written empty, each job's after its inputs' and after every source file: Snakemake sees a
    finished run (its records of params and code are missing, which alone reruns nothing)."""
    written = time.time()
    for step, (_, _, outputs) in enumerate(jobs):
        for path in outputs:
            (folder / path).parent.mkdir(parents=True, exist_ok=True)
            (folder / path).touch()
            os.utime(folder / path, (written + step / 100, written + step / 100))


def test_rerun_judge_reruns_judge_and_what_depends_on_it_nothing_else(tmp_path):
    """The README's `-R judge` on a finished run (every planned output written in the DAG's order) plans every judge
    job and every job downstream of one in the whole plan, and nothing else: not the prepared data, the tiny model or
    the base model's samples (tests/workflow/test_end_to_end.py plans it on a real finished run too)."""
    clone = fresh_clone(tmp_path / "clone")
    process = run_command(clone, PLAN)
    assert process.returncode == 0, process.stderr[-3000:]
    jobs = listed_jobs(process.stdout + process.stderr)
    write_as_finished(clone, jobs)
    process = run_command(clone, PLAN)
    assert "Nothing to be done" in process.stdout + process.stderr, "not a finished run: " + process.stderr[-3000:]
    rerun, rewritten = set(), set()
    for rule, inputs, outputs in jobs:  # inputs first, so one pass finds everything downstream
        if rule == "judge" or rewritten.intersection(inputs):
            rerun.add((rule, outputs))
            rewritten.update(outputs)
    process = run_command(clone, f"{RERUN_JUDGE} --dry-run")
    assert process.returncode == 0, process.stderr[-3000:]
    planned = {(rule, outputs) for rule, _, outputs in listed_jobs(process.stdout + process.stderr)}
    assert planned == rerun, {"not downstream of judge": sorted(planned - rerun), "missing": sorted(rerun - planned)}
    rules = Counter(rule for rule, _ in planned)
    assert rules["judge"] == Counter(rule for rule, _, _ in jobs)["judge"]
    assert not {"prepare_data", "build_tiny_model"} & set(rules)
    assert all("/sft-round1/" in outputs[0] for rule, outputs in planned if rule == "generate"), "only the tuned model"
