"""A round across several nodes, as far as it can be checked without a cluster: what the plan asks SLURM for (and
the sbatch line snakemake-executor-plugin-slurm makes of it), the round's settings, the launch commands, and the
line that names the process that failed. The run itself, on a two-node SLURM: tests/external/test_slurm_nodes.py."""

from __future__ import annotations

import json
import types

import pytest
from snakemake_executor_plugin_slurm.submit_string import get_submit_command
from test_plan import checked, plan_of

from snakeskills.errors import SnakeskillsError
from snakeskills.plan.resources import training_gpu_resource, training_nodes_resources, training_world_size
from snakeskills.training import launch
from snakeskills.training.rounds import RoundRun


def two_nodes(gpus=None, processes=None, distributed="ddp"):
    return lambda config: config.update(
        training={"nodes": 2, "gpus": gpus, "processes": processes, "distributed": distributed}
    )


def slurm_checked(mutate):
    from test_plan import DEFAULT, check_config, copy, prepare_config

    config = copy.deepcopy(DEFAULT)
    mutate(config)
    prepare_config(config)
    check_config(config, gpus_available=True, executor="slurm")
    return config


def test_one_node_asks_for_nothing_more_and_keeps_its_gpu_resource():
    config = checked(gpus_available=True)
    assert training_nodes_resources(config, True) == {}
    assert training_gpu_resource(config, True) == 1
    assert "nodes" not in plan_of().trainings["sft"].training_config(True), "one node's params read as before"


def test_two_nodes_ask_for_a_task_per_node_and_each_nodes_gpus():
    config = slurm_checked(two_nodes(gpus=8))
    assert training_world_size(config, True) == 16, "nodes 2 x gpus 8: 16 processes"
    assert training_gpu_resource(config, True) == 0, "the gpu resource would be --gpus=8 for the whole job"
    assert training_nodes_resources(config, True) == {
        "nodes": 2,
        "tasks": 2,
        "mpi": "srun",
        "tasks_per_gpu": 0,
        "gres": "gpu:8",
    }
    cpu = slurm_checked(lambda config: (two_nodes(processes=2)(config), config["generation"].update(device="cpu")))
    assert "gres" not in training_nodes_resources(cpu, True) and training_world_size(cpu, True) == 4


class Resources(dict):
    __getattr__ = dict.__getitem__


def test_the_slurm_plugin_asks_for_two_nodes_with_their_gpus_and_no_task_per_gpu():
    """The sbatch line snakemake-executor-plugin-slurm makes of a two-node round's resources (as the rule declares
    them, with the profile's cpus_per_gpu): two nodes, one task on each, 8 GPUs on each, and neither --gpus (the
    whole job's count) nor --ntasks-per-gpu (which would start the job once per GPU: the plugin's issues 316, 459)."""
    config = slurm_checked(two_nodes(gpus=8))
    resources = Resources(
        gpu=training_gpu_resource(config, True),
        mem_mb=64000,
        runtime=600,
        cpus_per_gpu=8,
        **training_nodes_resources(config, True),
    )
    job = types.SimpleNamespace(resources=resources, threads=8, is_group=lambda: False)
    params = {
        "run_uuid": "uuid",
        "slurm_logfile": "log",
        "comment_str": "rule_sft",
        "account": "",
        "partition": "",
        "workdir": "/work",
    }
    line = get_submit_command(job, params)
    options = line.split()
    assert "--nodes=2" in options and "--ntasks=2" in options and "--gres=gpu:8" not in options, line
    assert "--cpus-per-gpu=8" in options, line
    assert not any(option.startswith(("--ntasks-per-gpu", "--gpus")) for option in options), line
    from snakemake_executor_plugin_slurm.utils import set_gres_string

    assert set_gres_string(job).split() == ["--gres=gpu:8"], "the GPUs of each node, and no --gpus"


def test_a_two_node_rounds_settings_name_its_nodes_and_split_batches_over_all_processes():
    plan = plan_of(lambda config: config["sft"]["training"].update(batch_size=8))
    config = slurm_checked(lambda config: (two_nodes(processes=2)(config), config["generation"].update(device="cpu")))
    from snakeskills.plan.layout import Layout
    from snakeskills.plan.run import Plan

    settings = Plan(config, Layout.under("results/x")).trainings["sft"].training_config(True)
    assert settings["nodes"] == 2 and settings["processes"] == 2
    assert "nodes" not in plan.trainings["sft"].training_config(False)
    with pytest.raises(SnakeskillsError, match=r"sft\.training\.batch_size \(6\) must be a multiple of the 4 training"):
        slurm_checked(
            lambda config: (
                two_nodes(processes=2)(config),
                config["generation"].update(device="cpu"),
                config["sft"]["training"].update(batch_size=6, gradient_accumulation_steps=1),
            )
        )
    run = RoundRun(
        weights="lora",
        base_model_path="m",
        data_path="d",
        output_dir="o",
        lora=None,
        training={},
        chat_template=True,
        chat_template_kwargs={},
        seed=0,
        threads=1,
        dtype="auto",
        trust_remote_code=False,
        processes=2,
        nodes=2,
    )
    assert run.world_size == 4


def test_each_nodes_launcher_meets_the_first_node():
    command = launch.accelerate_command(
        "m", "{}", processes=2, nodes=3, machine_rank=1, main_address="10.0.0.1", port=29400
    )
    joined = " ".join(command)
    assert "--num_processes 6 --num_machines 3" in joined, "accelerate counts the processes of every machine"
    assert "--machine_rank 1 --main_process_ip 10.0.0.1" in joined and "--main_process_port 29400" in joined
    one = " ".join(launch.accelerate_command("m", "{}", processes=2, port=1))
    assert "--num_processes 2 --num_machines 1" in one and "--machine_rank" not in one
    srun = launch.srun_command(2, 8)
    assert srun[:4] == ["srun", "--nodes=2", "--ntasks=2", "--ntasks-per-node=1"]
    assert "--cpus-per-task=8" in srun and "--kill-on-bad-exit=1" in srun


def test_a_round_across_nodes_outside_slurm_stops_naming_the_key(monkeypatch, tmp_path):
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    with pytest.raises(SnakeskillsError, match=r"training\.nodes is 2: .*one SLURM job of 2 nodes"):
        launch.launch_training("m", {}, processes=1, nodes=2, output_dir=tmp_path / "out", log_path=tmp_path / "log")


def write_record(folder, rank, host, node_rank, status, error=None):
    record = {"rank": rank, "host": host, "node_rank": node_rank, "status": status, "error": error}
    (folder / f"rank-{rank}.json").write_text(json.dumps(record))


def test_a_failure_names_the_rank_that_ended_without_a_word_first(tmp_path):
    write_record(tmp_path, 0, "node1", 0, "failed", "RuntimeError: Connection closed by peer [10.77.0.3]:5000")
    write_record(tmp_path, 1, "node2", 1, "started")
    message = launch.failure(tmp_path, processes=1, nodes=2)
    assert message.startswith("training process rank 1 on node2 (node rank 1) ended without a word"), message
    assert "then rank 0 on node1 (node rank 0): RuntimeError: Connection closed" in message
    (tmp_path / "rank-1.json").unlink()
    assert "rank 1 (node rank 1) never started" in launch.failure(tmp_path, processes=1, nodes=2)


def test_a_process_records_its_place_and_how_it_ended(tmp_path, monkeypatch):
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("GROUP_RANK", "1")
    monkeypatch.setenv("LOCAL_RANK", "1")
    launch.record_rank(tmp_path, "started")
    launch.record_rank(tmp_path, "failed", "ValueError: bad")
    record = json.loads((tmp_path / "rank-3.json").read_text())
    assert record["status"] == "failed" and record["node_rank"] == 1 and record["error"] == "ValueError: bad"
    assert "rank 3 on" in launch.failure(tmp_path, processes=2, nodes=2)
    launch.record_rank(None, "started")  # a process started without a records folder records nothing
