"""The launch of a round's training processes, for real (``accelerate launch`` of two CPU processes): a launch in
which no process started is made once more, and a failure says what the processes said."""

from __future__ import annotations

import textwrap

import pytest

from snakeskills.training import launch

# a stand-in for a round's training module: each process fails before it records that it started (on the first
# launch only, or always), else records its start and end and the main process writes the round's metrics. A failing
# process waits until every process of its launch has said why before it exits: the launcher stops the others as soon
# as one exits, so without the wait a slow process (a loaded machine) would be stopped before it marked or said
# anything, and the test would depend on timing
TRAINING_MODULE = textwrap.dedent(
    """
    import json, os, sys, time
    from pathlib import Path

    from snakeskills.training.launch import record_rank

    arguments = json.loads(sys.argv[1])
    folder = Path(arguments["folder"])
    marker = folder / f"launched-{os.environ['RANK']}"
    if arguments["fail"] == "always" or not marker.exists():
        marker.write_text("")
        print("ValueError: the round's data is missing", file=sys.stderr, flush=True)
        records = Path(arguments["records"])  # a fresh folder for each launch
        (records / f"said-{os.environ['RANK']}").write_text("")
        deadline = time.monotonic() + 120
        while len(list(records.glob("said-*"))) < int(os.environ["WORLD_SIZE"]) and time.monotonic() < deadline:
            time.sleep(0.05)
        sys.exit(3)
    record_rank(arguments["records"], "started")
    if os.environ["RANK"] == "0":
        (folder / "out").mkdir(exist_ok=True)
        (folder / "out" / "training_metrics.json").write_text(json.dumps({"steps": 1}))
    record_rank(arguments["records"], "done")
    """
)


@pytest.fixture
def training_module(tmp_path, monkeypatch):
    (tmp_path / "stand_in_training.py").write_text(TRAINING_MODULE)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    return "stand_in_training"


def test_a_launch_in_which_no_process_started_is_made_once_more(training_module, tmp_path, caplog):
    metrics = launch.launch_training(
        training_module,
        {"folder": str(tmp_path), "fail": "first"},
        processes=2,
        output_dir=tmp_path / "out",
        log_path=tmp_path / "round.log",
    )
    assert metrics == {"steps": 1}
    [warning] = [record.getMessage() for record in caplog.records if "once more" in record.getMessage()]
    assert warning.startswith("no training process started (launcher exit 1: ValueError: the round's data is missing)")
    assert not launch.records_dir_for(tmp_path / "out").exists()


def test_a_second_launch_that_fails_too_says_what_the_processes_said(training_module, tmp_path):
    with pytest.raises(launch.LaunchFailed) as failed:
        launch.launch_training(
            training_module,
            {"folder": str(tmp_path), "fail": "always"},
            processes=2,
            output_dir=tmp_path / "out",
            log_path=tmp_path / "round.log",
        )
    message = str(failed.value)
    assert message.startswith("the 2 training processes on one node failed (exit 1): rank 0 (node rank 0), rank 1")
    assert "never started (the launcher said: ValueError: the round's data is missing)" in message
    assert "\n" not in message  # one line a user reads
    assert (tmp_path / "round.log").read_text().count("ValueError: the round's data is missing") == 4
