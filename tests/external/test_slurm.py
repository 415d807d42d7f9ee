"""profiles/slurm, for real: the pipeline through sbatch on a single-node SLURM cluster, and its GPU requests.

The README's plan and the end-to-end run start at the root of a fresh clone (tests/fresh_clone.py), where
`--profile slurm` names the project's profile (the link `slurm` -> `profiles/slurm`; docs/cluster.md); the Qwen
example's plan names it by its path, `profiles/slurm`. The end-to-end test brings up the
cluster itself (tests/external/slurm/setup-slurm.sh: apt-get installs munge, slurmctld, slurmd, slurmdbd and
MariaDB, as root, ~20 s the first time), gives tests/external/slurm/profile.yaml after profiles/slurm as a site
gives its own (a CPU-only node with two pretend GPUs, 2 CPUs, short status checks), runs a small default config
through it, and checks with the job logs and `sacct` that every non-local job ran as a SLURM job, with a GPU where
the profile asks for one. Run it alone with `python3 -m pytest tests/external/test_slurm.py` (it is marked slow).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections import defaultdict
from pathlib import Path

import pytest
import yaml
from conftest import (
    QWEN25_15B,
    REPO,
    folders_as_the_plan_sees_them,
    job_counts,
    shrunk_default_config,
    start_slurm_cluster,
    write_config,
)
from fresh_clone import fresh_clone, run_command
from without_slurm import SLURM_TOOLS, path_without, stand_in_sbatch, with_slurm

from snakeskills.job import snakemake_command

SETUP = REPO / "tests/external/slurm/setup-slurm.sh"
# the test cluster's settings, a profile of their own given after profiles/slurm as a site gives its own
TEST_CLUSTER_PROFILE = "tests/external/slurm"
EXAMPLE = REPO / "config/examples/qwen2.5-1.5b-instruct-gsm8k-math500.yaml"
# sft, dpo, kto and grpo side by side on the tiny model
METHODS_EXAMPLE = REPO / "config/examples/tiny-arithmetic-sft-dpo-kto-grpo.yaml"
# the README's plan on SLURM, typed at the project's root
PLAN_ON_SLURM = "python3 -m snakemake --profile slurm -n"
RESULTS = "results/tiny-arithmetic"

# rules whose jobs go to SLURM, and the ones the Snakefile's `localrules:` keeps in the main process
# (named by their log folder under results/<experiment>/logs/)
SUBMITTED = {"prepare_data", "build_tiny_model", "generate", "judge", "summarize", "sft_data", "sft"}
LOCAL = {"merge_judged", "eval", "report", "settings"}  # report: the plots; settings: the settings files
GPU_RULES = {"generate", "sft"}
# the environment a user's login shell may carry that would point sbatch elsewhere
SLURM_VARIABLES = ("SBATCH_PARTITION", "SBATCH_ACCOUNT", "SLURM_JOB_ID", "SLURM_CONF")


def small_config(path: Path) -> Path:
    """The embedded default, smaller: 2 seeds x 1 chunk, a few hundred problems, one short SFT epoch."""
    config = shrunk_default_config({"bootstrap": 4800, "validation": 100, "train": 300, "test": 100})
    config["tiny_model"]["stop_at_accuracy"] = 0.3
    config["sft"]["training"]["num_epochs"] = 1
    return write_config(path, config)


def clean_environment() -> dict:
    """This shell's environment with SLURM's programs on PATH (the suite hides them: tests/without_slurm.py), without
    the SLURM variables a login shell may carry."""
    return {key: value for key, value in with_slurm(os.environ).items() if key not in SLURM_VARIABLES}


def login_node(tmp_path: Path) -> dict:
    """The environment of a SLURM login node without GPUs: ``sbatch`` on PATH (a stand-in: a plan never calls it; the
    rest of SLURM hidden, as for the suite's other tests), so the plan asks GPUs for the model jobs as on a real login
    node, and no SLURM variables of this shell."""
    environment = clean_environment()
    environment["PATH"] = f"{stand_in_sbatch(tmp_path / 'login-node-bin')}{os.pathsep}{os.environ['PATH']}"
    return environment


def laptop(tmp_path: Path) -> dict:
    """The environment of a machine without SLURM and without GPUs (a laptop where a user prepares a cluster's run):
    no GPU visible and none of SLURM's programs on PATH (``without_slurm.path_without``: a folder of PATH that holds
    one, /usr/bin where SLURM is installed as on this test machine, is replaced by one of links to its other programs).
    """
    environment = clean_environment()
    environment["CUDA_VISIBLE_DEVICES"] = ""
    environment["PATH"] = path_without(environment["PATH"], SLURM_TOOLS, tmp_path / "laptop-bin")
    assert shutil.which("sbatch", path=environment["PATH"]) is None
    return environment


@pytest.fixture(scope="session")
def slurm_cluster() -> None:
    """A running single-node SLURM cluster on this machine (installed and started on first use)."""
    start_slurm_cluster(SETUP)


def slurm_job_ids(logs: Path) -> dict[str, dict[Path, str | None]]:
    """{rule log folder: {log file: the SLURM job id it records, or None}} for every job log of a run."""
    found: dict[str, dict[Path, str | None]] = defaultdict(dict)
    for log in sorted(logs.rglob("*.log")):
        match = re.search(r"SLURM job (\d+)", log.read_text())
        found[log.relative_to(logs).parts[0]][log] = match.group(1) if match else None
    return found


def sacct(job_ids: set[str]) -> dict[str, tuple[str, str]]:
    """{job id: (state, allocated TRES)} from the accounting database."""
    output = subprocess.run(
        ["sacct", "-n", "-P", "-X", "-j", ",".join(sorted(job_ids)), "-o", "JobID,State,AllocTRES"],
        capture_output=True,
        text=True,
        check=True,
        env=clean_environment(),
    ).stdout
    rows = [line.split("|") for line in output.splitlines() if line]
    return {job_id: (state, tres) for job_id, state, tres in rows}


@pytest.mark.slow
def test_pipeline_runs_as_slurm_jobs(slurm_cluster, tmp_path):
    clone = fresh_clone(tmp_path / "clone")
    workdir = tmp_path / "run"
    workdir.mkdir()
    configfile = small_config(tmp_path / "config.yaml")
    profiles = ("--profile", "slurm", "--profile", TEST_CLUSTER_PROFILE)
    command = snakemake_command(clone / "Snakefile", workdir, configfile, *profiles)
    # Snakemake can hang on a stuck status check; SIGINT (then SIGKILL 60 s later) cancels it and its jobs
    process = subprocess.run(
        ["timeout", "-s", "INT", "-k", "60", "900", *command],
        capture_output=True,
        text=True,
        cwd=clone,
        env=clean_environment(),
    )
    output = process.stdout + process.stderr
    assert process.returncode == 0, output[-6000:]
    assert "has been submitted with SLURM jobid" in output
    summary = json.loads((workdir / RESULTS / "eval/summary.json").read_text())
    assert list(summary) == ["base", "sft-round1"]

    logged = slurm_job_ids(workdir / RESULTS / "logs")
    assert set(logged) == SUBMITTED | LOCAL, "every rule's logs are accounted for"
    for rule in SUBMITTED:
        missing = [str(log) for log, job_id in logged[rule].items() if job_id is None]
        assert not missing, f"{rule} jobs that did not run under SLURM: {missing}"
    for rule in LOCAL:
        assert not any(logged[rule].values()), f"{rule} is a local rule but ran under SLURM"

    # generate and judge go out together: one submission per (model, benchmark, split) here
    generate_jobs = set(logged["generate"].values())
    assert set(logged["judge"].values()) == generate_jobs
    assert len(generate_jobs) == 3, "base/train, base/test and sft-round1/test groups"

    all_jobs = {job_id for rule in SUBMITTED for job_id in logged[rule].values()}
    accounting = sacct(all_jobs)
    assert set(accounting) == all_jobs, "sacct knows every job the logs name"
    for rule in SUBMITTED:
        for job_id in set(logged[rule].values()):
            state, tres = accounting[job_id]
            assert state == "COMPLETED", (rule, job_id, state)
            asked_gpu = "gres/gpu=1" in tres
            assert asked_gpu == (rule in GPU_RULES or rule == "judge"), (rule, job_id, tres)


def resources_by_rule(output: str) -> dict[str, set[str]]:
    """{rule: the distinct requests of its jobs} from a dry run's job listing, each its threads and the values of its
    `resources:` line (`threads=8, tmpdir=/tmp, ..., mem_mb=8000, ...`)."""
    resources: dict[str, set[str]] = defaultdict(set)
    rule = threads = None
    for line in output.splitlines():
        line = line.strip()
        if match := re.match(r"^(?:local)?rule (\w+):$", line):
            rule, threads = match.group(1), None
        elif line.startswith("threads:"):
            threads = line.removeprefix("threads:").strip()
        elif line.startswith("resources:") and rule:
            resources[rule].add(f"threads={threads}, {line.removeprefix('resources:').strip()}")
    return resources


def has_resources(line: str, **values: int | str) -> bool:
    return all(re.search(rf"\b{name}={value}(,|$)", line) for name, value in values.items())


def test_the_profile_is_found_by_its_name_at_the_projects_root(tmp_path, monkeypatch):
    """Snakemake looks a profile's name up in the current folder first, then in the user's and the system's profile
    folders: at the project's root `slurm` and `profiles/slurm` are the same profile, and a user's own profile named
    `slurm` is found by that name everywhere else."""
    from snakemake.cli import get_profile_dir

    clone = fresh_clone(tmp_path / "clone")
    own = tmp_path / "config-home/snakemake/slurm"
    own.mkdir(parents=True)
    (own / "config.yaml").write_text("executor: slurm\n")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config-home"))
    monkeypatch.chdir(clone)
    by_name, by_path = get_profile_dir("slurm"), get_profile_dir("profiles/slurm")
    assert by_name and by_path, "neither a name nor a path finds the profile"
    assert by_name[1].resolve() == by_path[1].resolve() == (clone / "profiles/slurm/config.yaml").resolve()
    monkeypatch.chdir(tmp_path)
    assert get_profile_dir("slurm")[1].resolve() == (own / "config.yaml").resolve()


def test_the_readme_plans_the_demo_on_slurm_from_a_fresh_clone(tmp_path):
    """The README's `python3 -m snakemake --profile slurm -n`, typed at a fresh clone's root on a login node. The
    embedded default's 340k-parameter model asks a few GB and under an hour per model job (not 64 GB and 8 h), one
    GPU and 8 CPUs with it; the CPU jobs ask no GPU, and the profile's threads as --cpus-per-task."""
    from snakemake.utils import available_cpu_count

    clone = fresh_clone(tmp_path / "clone")
    process = run_command(clone, PLAN_ON_SLURM, env=login_node(tmp_path))
    output = process.stdout + process.stderr
    assert process.returncode == 0, output[-5000:]
    resources = resources_by_rule(output)
    for rule, mem_mb, runtime in (("generate", 4000, 21), ("sft", 5000, 31)):
        assert resources[rule], f"no {rule} jobs listed: {output[-3000:]}"
        for line in resources[rule]:
            assert has_resources(line, gpu=1, cpus_per_gpu=8, mem_mb=mem_mb, runtime=runtime), (rule, line)
    # the profile's set-threads, capped at this machine's cores by profiles/default's `cores: all`
    cores = available_cpu_count()
    for rule, threads, mem_mb, runtime in (
        ("prepare_data", 2, 16000, 60),
        ("judge", 8, 8000, 15),
        ("summarize", 2, 4000, 30),
        ("sft_data", 2, 4000, 30),
    ):
        assert resources[rule], f"no {rule} jobs listed"
        for line in resources[rule]:
            assert has_resources(line, threads=min(threads, cores), mem_mb=mem_mb, runtime=runtime), (rule, line)
            assert "gpu" not in line, (rule, line)


def test_the_plan_on_slurm_is_the_clusters_on_a_laptop_without_slurm(tmp_path):
    """docs/cluster.md's dry run on a machine without SLURM (no sbatch) and without GPUs: the profile's executor
    (slurm) makes the plan the cluster's, wherever it is made. The model jobs ask for the GPU they get on the cluster,
    and a config that names a GPU device (generation.device: cuda; here the training methods' example, so that every
    training rule's GPU request is shown) plans; the same config's local plan there is refused, naming the key."""
    clone = fresh_clone(tmp_path / "clone")
    environment = laptop(tmp_path)
    process = run_command(clone, PLAN_ON_SLURM, env=environment)
    output = process.stdout + process.stderr
    assert process.returncode == 0, output[-5000:]
    resources = resources_by_rule(output)
    for rule in ("generate", "sft"):
        assert resources[rule], f"no {rule} jobs listed: {output[-3000:]}"
        assert all(has_resources(line, gpu=1, cpus_per_gpu=8) for line in resources[rule]), (rule, resources[rule])
    assert resources["judge"] and not any("gpu" in line for line in resources["judge"]), resources["judge"]

    config = yaml.safe_load(METHODS_EXAMPLE.read_text())
    config["generation"]["device"] = "cuda"
    on_cuda = write_config(tmp_path / "cuda.yaml", config)
    process = run_command(clone, f"{PLAN_ON_SLURM} --configfile {on_cuda}", env=environment)
    output = process.stdout + process.stderr
    assert process.returncode == 0, output[-5000:]
    resources = resources_by_rule(output)
    for rule in ("generate", "sft", "dpo", "kto", "grpo"):
        assert resources[rule], f"no {rule} jobs listed: {output[-3000:]}"
        assert all(has_resources(line, gpu=1, cpus_per_gpu=8) for line in resources[rule]), (rule, resources[rule])
    for rule in ("preference_pairs", "kto_samples", "rl_problems"):
        assert resources[rule] and all(has_resources(line, mem_mb=4000, runtime=30) for line in resources[rule])

    process = run_command(clone, f"python3 -m snakemake -n --configfile {on_cuda}", env=environment)
    assert process.returncode != 0
    assert "config key generation.device is 'cuda', but this machine has no GPU" in process.stdout + process.stderr


def test_a_sites_profile_after_it_replaces_only_its_own_keys(tmp_path):
    """`--profile slurm --profile my-site`: the site's keys replace the project's whole (here default-resources: a
    partition, an account, a smaller default memory), and every other key stays the project's (the judge's memory and
    runtime, the model jobs' GPUs)."""
    clone = fresh_clone(tmp_path / "clone")
    site = tmp_path / "my-site"
    site.mkdir()
    site_resources = {"slurm_partition": "gpu", "slurm_account": "myproject", "mem_mb": 2000, "runtime": 30}
    (site / "config.yaml").write_text(yaml.safe_dump({"default-resources": site_resources}))
    process = run_command(clone, f"python3 -m snakemake --profile slurm --profile {site} -n", env=login_node(tmp_path))
    output = process.stdout + process.stderr
    assert process.returncode == 0, output[-5000:]
    resources = resources_by_rule(output)
    for rule in ("prepare_data", "generate", "judge", "sft", "merge_judged"):
        assert resources[rule], f"no {rule} jobs listed"
        for line in resources[rule]:
            assert has_resources(line, slurm_partition="gpu", slurm_account="myproject"), (rule, line)
    assert all(has_resources(line, mem_mb=2000, runtime=30) for line in resources["merge_judged"]), resources
    assert all(has_resources(line, mem_mb=8000, runtime=15) for line in resources["judge"]), resources
    assert all(has_resources(line, gpu=1, cpus_per_gpu=8) for line in resources["generate"]), resources


def test_real_model_example_asks_for_gpus_only_for_generate_and_sft(tmp_path):
    folders_as_the_plan_sees_them(tmp_path, "models/Qwen2.5-1.5B-Instruct", "datasets/gsm8k", "datasets/math-500")
    # the checkpoint's real sizes: memory and runtime follow them
    (tmp_path / "models/Qwen2.5-1.5B-Instruct/config.json").write_text(json.dumps(QWEN25_15B))
    # the profile by its path, which keeps working beside its name
    command = snakemake_command(REPO / "Snakefile", tmp_path, EXAMPLE, "--profile", "profiles/slurm", "-n")
    process = subprocess.run(command, capture_output=True, text=True, cwd=REPO, env=login_node(tmp_path), timeout=300)
    output = process.stdout + process.stderr
    assert process.returncode == 0, output[-5000:]
    counts = job_counts(output)
    assert counts["generate"] == 144 and counts["sft"] == 1
    resources = resources_by_rule(output)
    for rule in ("generate", "sft"):
        assert resources[rule], f"no {rule} jobs listed"
        for line in resources[rule]:
            assert re.search(r"\bgpu=1\b", line) and "cpus_per_gpu=8" in line, (rule, line)
    # vLLM: 8 GB + 2.5x the bf16 weights, 20 min + 40 per billion parameters; LoRA: 4 GB + 3x, 30 min + 60 per
    # billion parameters per epoch (2)
    assert all(has_resources(line, mem_mb=16000, runtime=82) for line in resources["generate"]), resources["generate"]
    assert all(has_resources(line, mem_mb=13000, runtime=216) for line in resources["sft"]), resources
    for rule in ("prepare_data", "judge", "summarize", "sft_data"):
        assert resources[rule], f"no {rule} jobs listed"
        for line in resources[rule]:
            assert "gpu" not in line, (rule, line)
    # generate and judge jobs are grouped: 8 seed x chunk components per (model, benchmark, split)
    assert output.count("Group job generate_judge_") == counts["generate"] // 8


# Llama-3.1-8B's shape: the plan's memory and runtime estimates read it
LLAMA31_8B = {
    "hidden_size": 4096,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "intermediate_size": 14336,
    "vocab_size": 128256,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
}


def test_the_two_node_example_asks_for_two_nodes_for_its_rounds_and_one_gpu_for_generation(tmp_path):
    """`snakemake --profile slurm -n` on the two-node example: each SFT round one job of 2 nodes, one task and 8 GPUs
    on each (gres, per node; no gpu resource, which the plugin would send as --gpus for the whole job), run in its
    batch script (mpi) and without --ntasks-per-gpu (tasks_per_gpu 0); the generate jobs as before."""
    example = REPO / "config/examples/llama-3.1-8b-instruct-gsm8k-two-nodes.yaml"
    folders_as_the_plan_sees_them(tmp_path, "models/Llama-3.1-8B-Instruct", "datasets/gsm8k", "datasets/math-500")
    (tmp_path / "models/Llama-3.1-8B-Instruct/config.json").write_text(json.dumps(LLAMA31_8B))
    command = snakemake_command(REPO / "Snakefile", tmp_path, example, "--profile", "profiles/slurm", "-n")
    environment = laptop(tmp_path)
    process = subprocess.run(command, capture_output=True, text=True, cwd=REPO, env=environment, timeout=300)
    output = process.stdout + process.stderr
    assert process.returncode == 0, output[-5000:]
    resources = resources_by_rule(output)
    assert job_counts(output)["sft"] == 2 and len(resources["sft"]) == 1, resources["sft"]
    (sft,) = resources["sft"]
    assert has_resources(sft, nodes=2, tasks=2, mpi="srun", tasks_per_gpu=0, gpu=0, cpus_per_gpu=8), sft
    assert has_resources(sft, gres="gpu:8"), sft
    assert all(has_resources(line, gpu=1, cpus_per_gpu=8) for line in resources["generate"]), resources["generate"]
    assert not any("nodes=" in line for line in resources["generate"])

    # a local run of it stops at the key
    process = subprocess.run(
        snakemake_command(REPO / "Snakefile", tmp_path, example, "-n", "-c1"),
        capture_output=True,
        text=True,
        cwd=REPO,
        env=environment,
        timeout=300,
    )
    assert process.returncode != 0
    assert "config key training.nodes is 2, but this run's jobs run on this machine" in process.stdout + process.stderr


def test_a_training_job_of_four_gpus_asks_for_four_and_a_group_for_one(tmp_path):
    """The profile's per-submission GPU cap does not cut a job's own count down (a 4-GPU round asks for 4); generate
    jobs, one at a time in their group job (generate_slot), still ask for one each."""
    config = yaml.safe_load(METHODS_EXAMPLE.read_text())
    config["training"] = {"gpus": 4}
    configfile = write_config(tmp_path / "four.yaml", config)
    command = snakemake_command(REPO / "Snakefile", tmp_path, configfile, "--profile", "profiles/slurm", "-n")
    process = subprocess.run(command, capture_output=True, text=True, cwd=REPO, env=laptop(tmp_path), timeout=300)
    output = process.stdout + process.stderr
    assert process.returncode == 0, output[-5000:]
    resources = resources_by_rule(output)
    for rule in ("sft", "dpo", "kto", "grpo"):
        assert resources[rule] and all(has_resources(line, gpu=4) for line in resources[rule]), resources[rule]
    assert all(has_resources(line, gpu=1, generate_slot=1) for line in resources["generate"]), resources["generate"]
